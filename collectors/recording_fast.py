"""`memsight replay --json` of a format-2 recording at a few Python operations per value (issue 20).

The general reader turns every line into format 1's complete event (RecordingReader, Decoder: the OS
scalars and the process table copied and sorted, an agent's whole record rebuilt), then summarize picks out
what changed. A day's recording is a million lines, nearly all of them format 2's changes: an OS line of a
few figures and the process rows that changed, an agent's changed values, a device's changed fields. Those
are read here, each value checked as the Decoder checks it and appended to its statistics' values to fold
(_Stats.appender: folded by min() and max() every _FOLD_EVERY lines, not one call per value), and so is
an OS line written in full (once a minute: its figures and its table). Any other line (a declaration, an
agent's or a device's line written in full, an alert), and any line that fails a check here, goes
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

from collectors.recording import RecordingReader, _is_key
from collectors.recording_checks import (
    _CHARS,
    _DEVICE_FIELDS,
    _GPU_PROCESS_FIELDS,
    _KINDS,
    _LATEST,
    _MEASURED,
    _OS_FIELDS,
)
from collectors.recording_format import FIELD_VALUE, OS_FIELDS, OS_SCALARS
from collectors.recording_summary import (
    _ALLOCATED,
    _CUDA_STATE,
    _EXACT,
    _RESERVED,
    _SUMMARY_AT,
    Summary,
    _Stats,
)
from planner import limits

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: replay --json does not pay for it
if TYPE_CHECKING:
    from typing import Any


def _refuse(text: str) -> float:
    raise ValueError(text)  # NaN, Infinity: the general reader says why


# the shaped decoder's scanner (limits.loads_json(shaped=True)), called without JSONDecoder.decode's regular
# expressions: a line that is not one JSON object and a newline goes to the general reader
_SCAN = json.JSONDecoder(parse_constant=_refuse).scan_once
_OS_TESTS = {name: _KINDS[_OS_FIELDS[name]] for name in OS_SCALARS}  # the checks of an OS line's figures
# those that are numbers: name -> whether null is one
_OS_NUMBERS = {
    name: kind == "num?"
    for name, kind in _OS_FIELDS.items()
    if name in OS_SCALARS and kind in ("num", "num?")
}
_DEVICE_TESTS = {name: _KINDS[kind] for name, kind in _DEVICE_FIELDS.items() if kind != "list-"}
_DEVICE_NUMBERS = frozenset(name for name, kind in _DEVICE_FIELDS.items() if kind == "num?")
_DEVICE_SUMMED = ("total", "reserved", "used", "free", "utilization_gpu")  # summarize's, with processes_used
_GPU_PROCESS_KEYS = frozenset(_GPU_PROCESS_FIELDS)  # GpuProcess's fields, none with a default
_ABSENT = object()
_FOLD_EVERY = 512  # lines: the values appended to the statistics wait at most this long to be folded
_BIG = limits.MAX_MEASURED  # _MEASURED as an int, for ints
_INT = {int}
_NUMBER = {int, float}


def fold_lines(reader: RecordingReader, summary: Summary) -> None:
    """Every line of `reader` (format 2) folded into `summary`, as summary.event() of each of the general
    reader's events would."""
    fold = _Folder(reader, summary)
    handlers = {"os": fold.os, "agent": fold.agent, "nvml": fold.nvml}
    longest = limits.MAX_RECORDING_LINE
    scan = _SCAN
    unfolded = 0
    for line in reader.lines():
        unfolded += 1
        if unfolded == _FOLD_EVERY:
            fold.fold_pending()
            unfolded = 0
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
                    reader.truncated_tail = False  # (each time: an over-long line after it is skipped unread)
                    continue
        fold.general(line)


class _Folder:
    def __init__(self, reader: RecordingReader, summary: Summary) -> None:
        self.reader = reader
        self.decoder = reader.decoder
        self.summary = summary
        self.agent_cmdlines = summary.agent_cmdlines
        self.processes = summary.processes
        self._taken(None)
        # name -> the append of the os source's _Stats (system_used: used_append), once it has them all
        self.os_appends: dict[str, Any] | None = None
        self.agents: dict[tuple, tuple] = {}  # (pid, start, dev) -> what agent() folds a change into
        self.nvml_event: dict | None = None  # the Decoder's last nvml event, whose devices are these:
        self.devices: dict[int, list] = {}  # index -> [device, its source, its processes' sources]

    def fold_pending(self) -> None:
        """The values appended to the statistics (_Stats.appender) folded in: what waits stays bounded."""
        for src, *_ in self.agents.values():
            for stats in src.fields.values():
                stats.fold()
        for _, src, processes, _ in self.devices.values():
            for stats in src.fields.values():
                stats.fold()
            for _, process, _ in processes:
                process.fields["used_bytes"].fold()
        if self.os_appends is not None:
            for stats in self.summary.os_source.fields.values():
                stats.fold()
        self.processes.fold_pending()

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
            elif event["k"] == "os" and self.os_appends is None:
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
            self.os_appends = {name: fields[name].appender() for name in OS_FIELDS}
            self.used_append = fields["system_used"].appender()

    def _agent_folds(self, event: dict) -> None:
        values = event["r"]
        key3 = (event["pid"], event["start"], int(values[1]))
        src = self.summary.sources.get(f"agent:{key3[0]}:{key3[1]}:{key3[2]}")
        fields = {} if src is None else src.fields
        if "gap" not in fields or not all(name in fields for name, _, _ in _SUMMARY_AT):
            self.agents.pop(key3, None)
            return
        appends: list = [None] * len(values)
        for name, index, convert in _SUMMARY_AT:
            appends[index] = fields[name].appender(convert)
        self.agents[key3] = (src, appends, fields["gap"].appender())

    def _nvml_folds(self, event: dict) -> None:
        sources = self.summary.sources
        self.nvml_event, self.devices = event, {}
        for d in event["devices"]:
            if type(d["index"]) is not int or d["index"] in self.devices:
                self.nvml_event = None  # not read here: nvml() leaves every change to the general reader
                return
            src = sources[f"nvml:{d['index']}"]
            appends = {name: src.fields[name].appender() for name in (*_DEVICE_SUMMED, "processes_used")}
            self.devices[d["index"]] = [d, src, self._gpu_processes(d), appends]

    def _gpu_processes(self, d: dict) -> list[tuple]:
        """(pid, source, the append of its used_bytes) of each of a device's processes, in its order."""
        sources, found = self.summary.sources, []
        for p in d.get("processes", []):
            src = sources[f"gpu_process:{d['index']}:{p['pid']}"]
            if "used_bytes" not in src.fields:
                src.fields["used_bytes"] = _Stats()
            found.append((p["pid"], src, src.fields["used_bytes"].appender()))
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
        changed = _device_changes(changes, self.devices)
        if changed is None:
            return False
        devices = self.devices
        # the Decoder's event and its devices updated in place (nothing else holds them: summarize has read
        # them, and the general reader makes new ones from them)
        for index, entry in devices.items():
            device, src, processes, appends = entry
            _seen(src, t)
            change = changed.get(index)
            if change is None:
                for _, process, _ in processes:
                    _seen(process, t)
                continue
            device.update(change)
            for name in _DEVICE_SUMMED:
                if name in change:
                    appends[name](change[name])
            if "processes" not in change:
                for _, process, _ in processes:
                    _seen(process, t)
                continue
            now = device["processes"]
            pids = [p["pid"] for p in now]
            if pids != [q[0] for q in processes]:
                for p in now:  # other processes: their sources made in this order, as summarize makes them
                    self.summary.source(f"gpu_process:{index}:{p['pid']}", "gpu_process", p["pid"])
                processes = entry[2] = self._gpu_processes(device)
            total = 0
            for p, (_, process, append) in zip(now, processes, strict=True):
                used = p["used_bytes"]
                _seen(process, t)
                append(used)
                if used is not None:
                    total += used
            appends["processes_used"](total)
        event["t"] = t
        return True

    # ---- an OS line of changes
    def os(self, e: dict) -> bool:
        """Fold an OS change line (the general reader's _os and summary.event); False: not read here."""
        scalars, appends = self.decoder.os, self.os_appends
        if scalars is None or appends is None:
            return False
        t = e.get("t")
        if not ((type(t) is float or type(t) is int) and 0.0 <= t <= _LATEST):
            return False
        figures = _os_figures(e)
        if figures is None:
            return False
        given, procs, pset, pdel = figures
        if procs is not _ABSENT:  # a new table (more than half of it changed, or once a minute with every
            changed = self._table_replaced(procs)  # figure: then each is given), whatever pset says
            if changed is None:
                return False
        elif pset is _ABSENT and pdel is _ABSENT:
            changed = None
        else:
            changed = self._table_change(pset, pdel)
            if changed is None:
                return False
        scalars.update(given)
        scalars["t"] = t
        src = self.summary.os_source
        src.samples += 1
        if t < src.start:
            src.start = t
        if t > src.end:
            src.end = t
        for name, value in given:
            append = appends.get(name)
            if append is not None:
                append(value)
        if "mem_available" in e or "mem_total" in e:
            self.used_append(scalars["mem_total"] - scalars["mem_available"])
        if changed is None:
            self.processes.same(t)
        else:
            self.processes.delta(t, *changed, self.summary.cmdlines)
        return True

    def _table_replaced(self, procs: Any) -> tuple[dict, list, bool] | None:
        """(rows, processes gone, True) of a format-2 table written whole, each row checked as _checked_rows
        checks it; None when the general reader is to read it (a process with two rows, before or now)."""
        if self.twice or type(procs) is not list or not _rows_fit(procs):
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
        to say what is wrong. `pset`, `pdel`: the line's, or _ABSENT."""
        if self.twice:
            return None
        table = self.table.copy()
        gone: list = []
        if pdel is not _ABSENT:
            if type(pdel) is not list or not all(_is_key(x) for x in pdel):
                return None
            for key in pdel:
                if table.pop((key[0], key[1]), None) is None:
                    return None
        if pset is _ABSENT:
            pset = []
        elif type(pset) is not list:
            return None
        changed = {}  # rows for _Processes.delta (a process's size changes are folded here)
        folds, cmdlines = self.processes._folds, self.summary.cmdlines
        folded: dict[tuple, tuple] = {}  # the processes whose sizes were folded here
        m, big = _MEASURED, _BIG
        for row in pset:
            if type(row) is not list:
                return _sizes_taken_back(folded)
            if len(row) == 4:  # [pid, start, rss, growth]: _size_change_fits, written out
                pid, start, rss, growth = row
                if type(pid) is not int or type(start) is not int:  # (in the table: within the limits)
                    return _sizes_taken_back(folded)
                kind = type(rss)  # an int compared with an int: a third of the time of one with a float
                if not ((kind is int and -big <= rss <= big) or (kind is float and -m <= rss <= m)):
                    return _sizes_taken_back(folded)
                if growth is not None:
                    kind = type(growth)
                    if not ((kind is int and -big <= growth <= big) or (kind is float and -m <= growth <= m)):
                        return _sizes_taken_back(folded)
                key = (pid, start)
                old = table.get(key)
                if old is None or key in folded:  # (set twice: the general reader keeps the last)
                    return _sizes_taken_back(folded)
                table[key] = [pid, start, old[2], rss, growth, *old[5:]]
                fold = folds.get(key)
                if fold is None or key in changed:
                    changed[key] = table[key]
                    continue
                # _Processes.delta's fold of a process in the table (so in its runs), here
                src, rss_append, growth_append = fold
                rss_append(rss)
                growth_append(growth)
                src.cmdline = cmdlines.get(key, "")
                folded[key] = fold
            elif _rows_fit((row,)) and (row[0], row[1]) not in folded:
                table[(row[0], row[1])] = changed[(row[0], row[1])] = row
            else:
                return _sizes_taken_back(folded)
        if pdel is not _ABSENT:
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
            and type(pid) is int and type(start) is int and type(dev) is int
            and (type(t) is float or type(t) is int) and 0.0 <= t <= _LATEST
        ):  # fmt: skip  (pid, start and dev within the limits: an agent's already read, below)
            return False
        key3 = (pid, start, dev)
        values = self.decoder.records.get(key3)
        folds = self.agents.get(key3)
        if values is None or folds is None or (pid, start) not in self.decoder.carried:
            return False
        label = len(values) - 1
        src, appends, gap = folds
        it = iter(d)
        for index, value in zip(it, it, strict=True):  # _changed's checks, the value stored as it passes
            if type(index) is not int or index < 2 or index >= label:  # (a refused line costs the agent
                if index == label and type(index) is int and type(value) is str and len(value) <= _CHARS:
                    values[index] = value  # its record: the values stored here go with it)
                    continue
                return _taken_back(d, index, value, appends)
            kind = type(value)
            if kind is int:  # an int compared with an int: a third of the time of one compared with a float
                if value > big or value < -big:
                    return _taken_back(d, index, value, appends)
            elif kind is float:
                if not -m <= value <= m:
                    return _taken_back(d, index, value, appends)
            elif value is not None:
                return _taken_back(d, index, value, appends)
            values[index] = value
            append = appends[index]
            if append is not None:
                append(value)
        values[0] = t
        _gap_and_status(values, d[::2], gap, src)
        t = float(t)
        src.samples += 1
        if t < src.start:
            src.start = t
        if t > src.end:
            src.end = t
        src.cmdline = self.agent_cmdlines.get((pid, start), "")
        return True


def _os_figures(e: dict) -> tuple[list, Any, Any, Any] | None:
    """An OS change line's figures, each checked as the general reader's _os checks it ((name, value) pairs
    in the line's order), and its process table's "procs", "pset" and "pdel" (_ABSENT where it has none),
    not checked yet; None when the general reader is to read the line."""
    given = []
    procs = pset = pdel = _ABSENT
    m, big = _MEASURED, _BIG
    for item in e.items():
        name, value = item
        nullable = _OS_NUMBERS.get(name)
        if nullable is not None:  # "num" or "num?" (_KINDS' tests, written out: a line holds a few)
            kind = type(value)
            if kind is int:
                if value > big or value < -big:
                    return None
            elif kind is float:
                if not -m <= value <= m:
                    return None
            elif value is not None or not nullable:
                return None
            given.append(item)
        elif name == "k" or name == "t":  # (t: os() checked it)
            continue
        elif name in _OS_TESTS:
            if not _OS_TESTS[name](value):
                return None
            given.append(item)
        elif name == "pset":
            pset = value
        elif name == "pdel":
            pdel = value
        elif name == "procs":
            procs = value
    return given, procs, pset, pdel


def _device_changes(changes: list, devices: dict) -> dict[int, dict] | None:
    """An nvml line's changes by device index, each field checked as the Decoder's _nvml_changed and
    check_event check it; None when the general reader is to read the line (a device not known here, one
    changed twice, a field that is not a DeviceInfo's or does not fit)."""
    changed: dict[int, dict] = {}
    m, big = _MEASURED, _BIG
    for change in changes:
        if type(change) is not dict:
            return None
        index = change.get("index")
        if type(index) is not int or index not in devices or index in changed:
            return None
        for name, value in change.items():
            if name in _DEVICE_NUMBERS:  # "num?" (_KINDS' test, written out: a line holds a few)
                kind = type(value)
                if not (
                    (kind is int and -big <= value <= big) or (kind is float and -m <= value <= m)
                    or value is None
                ):  # fmt: skip
                    return None
                continue
            test = _DEVICE_TESTS.get(name)
            if test is not None:
                if not test(value):
                    return None
            elif name == "processes":
                if not _gpu_processes_fit(value):
                    return None
            elif name == "unsupported" or name == "errors":
                if type(value) is not list or not all(type(x) is str and len(x) <= _CHARS for x in value):
                    return None
            else:
                return None  # not a DeviceInfo field
        changed[index] = change
    return changed


def _gap_and_status(values: list, indices: list, gap: Any, src: Any) -> None:
    """What an agent's change line changed beyond its values (`indices`: the record's indices it set): the
    allocator gap folded again where allocated or reserved changed (folded unchanged it changes nothing), and
    the CUDA state as the source's status (the state's since its last complete line)."""
    if _ALLOCATED in indices or _RESERVED in indices:
        allocated, reserved = values[_ALLOCATED], values[_RESERVED]
        x = _EXACT
        if type(allocated) is int is type(reserved) and -x <= allocated <= x and -x <= reserved <= x:
            gap(reserved - allocated)  # (each its own float: their conversions give them back)
        elif allocated is not None and reserved is not None:
            gap(_ALLOCATION(float(reserved)) - _ALLOCATION(float(allocated)))
    if _CUDA_STATE in indices:
        x = values[_CUDA_STATE]
        src.status = _STATE(math.nan if x is None else float(x))


def _taken_back(d: list, index: Any, value: Any, appends: list) -> bool:
    """False, the values an agent's change line appended before its refused pair (`index`, `value`) taken
    back: the general reader refuses the whole line. The pairs before it passed the same checks, so it is
    the first pair of these two objects."""
    for i in range(0, len(d), 2):
        if d[i] is index and d[i + 1] is value:
            break
        append = appends[d[i]]  # (None at the label's index)
        if append is not None:
            append.__self__.pop()
    return False


def _rows_fit(rows: list) -> bool:
    """Each row a process row as collectors/recording.py's _row_fits checks it (its 7 values, or 8 with its
    own window), written out in one loop: a table written whole holds a few dozen."""
    m, big, chars = _MEASURED, _BIG, _CHARS
    for row in rows:
        if type(row) is not list:
            return False
        n = len(row)
        if n == 7:
            pid, start, name, rss, growth, _, user = row
        elif n == 8:
            pid, start, name, rss, growth, _, user, window = row
            kind = type(window)
            if not ((kind is int and -big <= window <= big) or (kind is float and -m <= window <= m)):
                return False
        else:
            return False
        if not (
            type(pid) is int and -big <= pid <= big and type(start) is int and -big <= start <= big
            and type(name) is str and len(name) <= chars and type(user) is str and len(user) <= chars
        ):  # fmt: skip
            return False
        kind = type(rss)
        if not ((kind is int and -big <= rss <= big) or (kind is float and -m <= rss <= m)):
            return False
        if growth is not None:
            kind = type(growth)
            if not ((kind is int and -big <= growth <= big) or (kind is float and -m <= growth <= m)):
                return False
    return True


def _sizes_taken_back(folded: dict) -> None:
    """None (the line is the general reader's), the sizes a process table's change folded taken back."""
    for _, rss_append, growth_append in folded.values():
        rss_append.__self__.pop()
        growth_append.__self__.pop()


def _seen(src: Any, t: float) -> None:
    """_Source.seen(t, t, 1), written out for a source seen before."""
    if src.start is None:
        src.seen(t, t, 1)
        return
    src.samples += 1
    if t < src.start:
        src.start = t
    if t > src.end:
        src.end = t


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
_STATE = FIELD_VALUE["cuda_state"]
