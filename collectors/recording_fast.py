"""`memsight replay --json` of a format-2 recording at a few Python operations per value (issue 20).

The general reader turns every line into format 1's complete event (RecordingReader, Decoder: the OS
scalars and the process table copied and sorted, an agent's whole record rebuilt), then summarize picks out
what changed. A day's recording is a million lines, nearly all of them format 2's changes: an OS line of a
few figures and the process rows that changed, an agent's changed values, a device's changed fields. Those
are read here, each value checked as the Decoder checks it and folded straight into its statistics. Any
other line (a declaration, a line written in full, an alert), and any line that fails a check here, goes
through the general reader as it is, which refuses it or reads it in its own terms: what is skipped, and
why, is the general reader's word, and the document is the same byte for byte
(tests/collectors/test_replay_streaming.py compares the two on fuzzed recordings).

The state is the Decoder's own (its OS scalars, each agent device's record and carried fields, the last
nvml event), updated in place (nothing else holds it while summarize reads), plus the process table as a
dictionary (the Decoder keeps it as a sorted list, which summarize never needs): written back before the
general reader reads an OS line, and taken from it after.
"""

from __future__ import annotations

import json
import math
from typing import Any

from collectors.agent_reader import FIELD_VALUE
from collectors.recorder import OS_SCALARS
from collectors.recording import (
    _ALLOCATED,
    _CHARS,
    _CUDA_STATE,
    _DEVICE_FIELDS,
    _GPU_PROCESS_FIELDS,
    _KINDS,
    _LATEST,
    _MEASURED,
    _OS_FIELDS,
    _RESERVED,
    _SUMMARY_AT,
    RecordingReader,
    Summary,
    _is_key,
    _row_fits,
    _Stats,
)
from collectors.snapshots import OS_FIELDS
from planner import limits


def _refuse(text: str) -> float:
    raise ValueError(text)  # NaN, Infinity: the general reader says why


# the shaped decoder's scanner (limits.loads_json(shaped=True)), called without JSONDecoder.decode's regular
# expressions: a line that is not one JSON object and a newline goes to the general reader
_SCAN = json.JSONDecoder(parse_constant=_refuse).scan_once
_OS_TESTS = {name: _KINDS[_OS_FIELDS[name]] for name in OS_SCALARS}  # the checks of an OS line's figures
_DEVICE_TESTS = {name: _KINDS[kind] for name, kind in _DEVICE_FIELDS.items() if kind != "list-"}
_DEVICE_SUMMED = ("total", "reserved", "used", "free", "utilization_gpu")  # summarize's, with processes_used
_GPU_PROCESS_KEYS = frozenset(_GPU_PROCESS_FIELDS)  # GpuProcess's fields, none with a default
_ABSENT = object()
_BIG = limits.MAX_MEASURED  # _MEASURED as an int, for ints
_EXACT = 2**53  # an integer up to this is its own float: the conversion of a record's value keeps it


def fold_lines(reader: RecordingReader, summary: Summary) -> None:
    """Every line of `reader` (format 2) folded into `summary`, as summary.event() of each of the general
    reader's events would."""
    fold = _Folder(reader, summary)
    handlers = {"os": fold.os, "agent": fold.agent, "nvml": fold.nvml}
    longest = limits.MAX_RECORDING_LINE
    scan = _SCAN
    for _, line in reader.lines():
        if line[0] == "{" and len(line) <= longest:
            try:
                obj, end = scan(line, 0)
            except Exception:  # noqa: BLE001  (whatever it is, the general reader says it)
                obj = None
            else:
                if (end != len(line) - 1 or line[end] != "\n") and line[end:].strip(" \t\n\r"):
                    obj = None
            if obj is not None:
                k = obj.get("k")
                handler = handlers.get(k) if type(k) is str else None
                if handler is not None and handler(obj):
                    reader.truncated_tail = False
                    continue
        fold.general(line)


class _Folder:
    def __init__(self, reader: RecordingReader, summary: Summary) -> None:
        self.reader = reader
        self.decoder = reader.decoder
        self.summary = summary
        self.processes = summary.processes
        self._taken(None)
        self.os_stats: dict[str, Any] | None = None  # name -> _Stats of the os source, once it has them all
        self.agents: dict[tuple, tuple] = {}  # (pid, start, dev) -> what agent() folds a change into
        self.nvml_event: dict | None = None  # the Decoder's last nvml event, whose devices are these:
        self.devices: dict[int, list] = {}  # index -> [device, its source, its processes' sources]

    # ---- the general reader
    def general(self, line: str) -> None:
        """One line through the general reader and summary.event."""
        decoder = self.decoder
        if self.moved:  # the general reader reads (and sorts) the Decoder's list
            self.rows = decoder.rows = list(self.table.values())
            self.moved = False
        event = self.reader.event_of(line)
        if event is not None:
            self.summary.event(event, decoder.changed, decoder.rows)
            if event["k"] == "agent":
                self._agent_folds(event)
            elif event["k"] == "os" and self.os_stats is None:
                self._os_folds()
            elif event["k"] == "nvml":
                self._nvml_folds(event)
        if decoder.rows is not self.rows:
            self._taken(decoder.rows)

    def _taken(self, rows: list | None) -> None:
        """The process table as the Decoder holds it (a list, sorted) becomes this one's (by process)."""
        self.rows = self.decoder.rows if rows is None else rows
        self.table = {(row[0], row[1]): row for row in self.rows}
        self.twice = len(self.table) < len(self.rows)  # a process with two rows: add() counts them
        self.moved = False  # the table is no longer the Decoder's list

    def _os_folds(self) -> None:
        fields = self.summary.os_source.fields
        if all(name in fields for name in (*OS_FIELDS, "system_used")):
            self.os_stats = {name: fields[name] for name in OS_FIELDS}
            self.used_stats = fields["system_used"]

    def _agent_folds(self, event: dict) -> None:
        values = event["r"]
        key3 = (event["pid"], event["start"], int(values[1]))
        src = self.summary.sources.get(f"agent:{key3[0]}:{key3[1]}:{key3[2]}")
        fields = {} if src is None else src.fields
        if "gap" not in fields or not all(name in fields for name, _, _ in _SUMMARY_AT):
            self.agents.pop(key3, None)
            return
        stats_at: list = [None] * len(values)
        converts: list = [None] * len(values)
        for name, index, convert in _SUMMARY_AT:
            stats_at[index], converts[index] = fields[name], convert
        self.agents[key3] = (src, stats_at, converts, fields["gap"])

    def _nvml_folds(self, event: dict) -> None:
        sources = self.summary.sources
        self.nvml_event, self.devices = event, {}
        for d in event["devices"]:
            if type(d["index"]) is not int or d["index"] in self.devices:
                self.nvml_event = None  # not read here: nvml() leaves every change to the general reader
                return
            self.devices[d["index"]] = [d, sources[f"nvml:{d['index']}"], self._gpu_processes(d)]

    def _gpu_processes(self, d: dict) -> list[tuple]:
        """(pid, source, its used_bytes) of each of a device's processes, in its order."""
        sources, found = self.summary.sources, []
        for p in d.get("processes", []):
            src = sources[f"gpu_process:{d['index']}:{p['pid']}"]
            if "used_bytes" not in src.fields:
                src.fields["used_bytes"] = _Stats()
            found.append((p["pid"], src, src.fields["used_bytes"]))
        return found

    # ---- an nvml line of changes
    def nvml(self, e: dict) -> bool:
        """Fold an nvml change line ("dset": the Decoder's _nvml_changed and check_event, summarize's
        _summarize_nvml); False: not read here."""
        event, changes, t = self.nvml_event, e.get("dset"), e.get("t")
        if event is None or event is not self.decoder.nvml or type(changes) is not list:
            return False
        if not ((type(t) is float or type(t) is int) and 0.0 <= t <= _LATEST):
            return False
        devices = self.devices
        changed: dict[int, dict] = {}
        for change in changes:
            if type(change) is not dict:
                return False
            index = change.get("index")
            if type(index) is not int or index not in devices or index in changed:
                return False
            for name, value in change.items():
                test = _DEVICE_TESTS.get(name)
                if test is not None:
                    if not test(value):
                        return False
                elif name == "processes":
                    if not _gpu_processes_fit(value):
                        return False
                elif name == "unsupported" or name == "errors":
                    if type(value) is not list or not all(type(x) is str and len(x) <= _CHARS for x in value):
                        return False
                else:
                    return False  # not a DeviceInfo field
            changed[index] = change
        merged = []
        for index, entry in devices.items():
            device, src, processes = entry
            src.seen(t, t, 1)
            change = changed.get(index)
            if change is None:
                merged.append(device)
                for _, process, _ in processes:
                    process.seen(t, t, 1)
                continue
            device = entry[0] = {**device, **change}
            merged.append(device)
            fields = src.fields
            for name in _DEVICE_SUMMED:
                if name in change:
                    fields[name].add(change[name])
            if "processes" not in change:
                for _, process, _ in processes:
                    process.seen(t, t, 1)
                continue
            now = device["processes"]
            pids = [p["pid"] for p in now]
            if pids != [q[0] for q in processes]:
                for p in now:  # other processes: their sources made in this order, as summarize makes them
                    self.summary.source(f"gpu_process:{index}:{p['pid']}", "gpu_process", p["pid"])
                processes = entry[2] = self._gpu_processes(device)
            total = 0
            for p, (_, process, stats) in zip(now, processes, strict=True):
                used = p["used_bytes"]
                process.seen(t, t, 1)
                stats.add(used)
                if used is not None:
                    total += used
            fields["processes_used"].add(total)
        self.nvml_event = self.decoder.nvml = {**event, "t": t, "devices": merged}
        return True

    # ---- an OS line of changes
    def os(self, e: dict) -> bool:
        """Fold an OS change line (the general reader's _os and summary.event); False: not read here."""
        decoder = self.decoder
        scalars, stats = decoder.os, self.os_stats
        if scalars is None or stats is None:
            return False
        procs = e.get("procs", _ABSENT)
        if procs is not _ABSENT and all(name in e for name in OS_SCALARS):
            return False  # written in full (once a minute): the general reader
        t = e.get("t")
        if not ((type(t) is float or type(t) is int) and 0.0 <= t <= _LATEST):
            return False
        given = []
        pset = pdel = _ABSENT
        for name, value in e.items():
            test = _OS_TESTS.get(name)
            if test is not None:
                if not test(value):
                    return False
                given.append((name, value))
            elif name == "pset":
                pset = value
            elif name == "pdel":
                pdel = value
        if procs is not _ABSENT:  # a new table (more than half of it changed), whatever pset says
            changed = self._table_replaced(procs)
            if changed is None:
                return False
        elif pset is _ABSENT and pdel is _ABSENT:
            changed = None
        else:
            changed = self._table_change([] if pset is _ABSENT else pset, [] if pdel is _ABSENT else pdel)
            if changed is None:
                return False
        for name, value in given:
            scalars[name] = value
        scalars["t"] = t
        src = self.summary.os_source
        src.samples += 1
        if t < src.start:
            src.start = t
        if t > src.end:
            src.end = t
        used = False
        for name, value in given:
            st = stats.get(name)
            if st is not None:
                st.add(value)
                used = used or name == "mem_available" or name == "mem_total"
        if used:
            self.used_stats.add(scalars["mem_total"] - scalars["mem_available"])
        if changed is None:
            self.processes.same(t)
        else:
            self.processes.delta(t, *changed, self.summary.cmdlines)
        return True

    def _table_replaced(self, procs: Any) -> tuple[dict, list, bool] | None:
        """(rows, processes gone, True) of a format-2 table written whole, each row checked as _checked_rows
        checks it; None when the general reader is to read it (a process with two rows, before or now)."""
        if self.twice or type(procs) is not list:
            return None
        for row in procs:
            if not (type(row) is list and 7 <= len(row) <= 8 and _row_fits(*row)):
                return None
        table = {(row[0], row[1]): row for row in procs}
        if len(table) < len(procs):
            return None
        gone = [key for key in self.table if key not in table]
        self.table, self.rows, self.moved = table, procs, False
        self.decoder.rows = procs
        return table, gone, True

    def _table_change(self, pset: Any, pdel: Any) -> tuple[dict, list, bool] | None:
        """(rows set, processes gone, False) of a format-2 table change, the table updated (apply_proc_delta's
        result, by process), each row checked as _checked_rows checks it; None when the general reader is
        to say what is wrong."""
        if self.twice or type(pdel) is not list or type(pset) is not list:
            return None
        if not all(_is_key(x) for x in pdel):
            return None
        table = self.table.copy()
        for key in pdel:
            if table.pop((key[0], key[1]), None) is None:
                return None
        changed = {}
        m, big = _MEASURED, _BIG
        for row in pset:
            if type(row) is not list:
                return None
            if len(row) == 4:  # [pid, start, rss, growth]: _size_change_fits, written out
                pid, start, rss, growth = row
                if not (
                    type(pid) is int and -big <= pid <= big and type(start) is int and -big <= start <= big
                    and ((type(rss) is int and -big <= rss <= big) or (type(rss) is float and -m <= rss <= m))
                    and (growth is None or (type(growth) is int and -big <= growth <= big)
                         or (type(growth) is float and -m <= growth <= m))
                ):  # fmt: skip
                    return None
                key = (pid, start)
                old = table.get(key)
                if old is None:
                    return None
                row = [pid, start, old[2], rss, growth, *old[5:]]
            elif 7 <= len(row) <= 8 and _row_fits(*row):
                key = (row[0], row[1])
            else:
                return None
            table[key] = changed[key] = row
        gone = [key for key in {(x[0], x[1]): None for x in pdel} if key not in table]
        self.table, self.moved = table, True
        return changed, gone, False

    # ---- an agent's change line
    def agent(self, e: dict) -> bool:
        """Fold an agent's change line: k, pid, start, t, dev and "d" (the Decoder's _agent and _changed,
        summarize's _summarize_agent); False: not read here."""
        if len(e) != 6:
            return False
        d = e.get("d")
        pid, start, dev, t = e.get("pid"), e.get("start"), e.get("dev"), e.get("t")
        m, big = _MEASURED, _BIG
        if not (
            type(d) is list and not len(d) & 1
            and type(pid) is int and -big <= pid <= big and type(start) is int and -big <= start <= big
            and type(dev) is int and -big <= dev <= big
            and (type(t) is float or type(t) is int) and 0.0 <= t <= _LATEST
        ):  # fmt: skip
            return False
        key3 = (pid, start, dev)
        values = self.decoder.records.get(key3)
        folds = self.agents.get(key3)
        if values is None or folds is None or (pid, start) not in self.decoder.carried:
            return False
        label = len(values) - 1
        it = iter(d)
        for index, value in zip(it, it, strict=True):  # _changed's checks, the value stored as it passes
            if type(index) is not int or index < 2 or index >= label:  # (a refused line costs the agent
                if index == label and type(index) is int and type(value) is str and len(value) <= _CHARS:
                    values[index] = value  # its record: the values stored here go with it)
                    continue
                return False
            kind = type(value)
            if kind is int:  # an int compared with an int: a third of the time of one compared with a float
                if value > big or value < -big:
                    return False
            elif kind is float:
                if not -m <= value <= m:
                    return False
            elif value is not None:
                return False
            values[index] = value
        values[0] = t
        src, stats_at, converts, gap = folds
        exact = _EXACT
        low = False  # the CUDA state, allocated or reserved among them
        it = iter(d)
        for index, value in zip(it, it, strict=True):
            if index < _LOW:
                low = True
            st = stats_at[index]
            if st is None:
                continue
            if type(value) is not int or not -exact <= value <= exact:  # else its conversion gives it back
                value = converts[index](math.nan if value is None else float(value))
                if value is None:
                    continue
            st.add(value)
        if low:  # (folding the gap and the state again when they did not change changes nothing)
            allocated, reserved = values[_ALLOCATED], values[_RESERVED]
            if allocated is not None and reserved is not None:
                gap.add(_ALLOCATION(float(reserved)) - _ALLOCATION(float(allocated)))
            x = values[_CUDA_STATE]
            src.status = _STATE(math.nan if x is None else float(x))
        t = float(t)
        src.samples += 1
        if t < src.start:
            src.start = t
        if t > src.end:
            src.end = t
        src.cmdline = self.summary.agent_cmdlines.get((pid, start), "")
        return True


def _gpu_processes_fit(processes: Any) -> bool:
    """A device's processes as check_event's _check_list takes them (each a GpuProcess's three fields)."""
    if type(processes) is not list:
        return False
    m = _MEASURED
    for p in processes:
        if type(p) is not dict or p.keys() != _GPU_PROCESS_KEYS:
            return False
        pid, used, kind = p["pid"], p["used_bytes"], p["kind"]
        if not (
            type(pid) is int and -m <= pid <= m and type(kind) is str and len(kind) <= _CHARS
            and (used is None or ((type(used) is int or type(used) is float) and -m <= used <= m))
        ):  # fmt: skip
            return False
    return True


_ALLOCATION = FIELD_VALUE["allocated"]  # allocated's and reserved's (the same conversion)
_LOW = max(_CUDA_STATE, _ALLOCATED, _RESERVED) + 1
_STATE = FIELD_VALUE["cuda_state"]
