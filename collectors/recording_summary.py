"""The `memsight replay --json` document: min, max and last of every field of every source (the OS, each
agent and device, each process, each NVML device, each vLLM engine), folded in the reader's one pass.

summarize() takes a Recording or a RecordingReader; format 2's common lines are folded by
collectors/recording_fast.py, which checks and folds only what each line holds, everything else by
Summary.event() from the reader's decoded events.
"""

from __future__ import annotations

import math

from collectors import agent_format as fmt
from collectors.recording import RecordingReader
from collectors.recording_format import (
    ALERT_KEYS,
    FIELD_VALUE,
    OS_FIELDS,
    recorded_record_fields,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: replay --json does not pay for it
if TYPE_CHECKING:
    from typing import Any


def vllm_source_id(model_name: str, engine: str | None) -> str:
    """The `memsight replay --json` id of one vLLM engine: vllm:<model_name>[:<engine>]."""
    return f"vllm:{model_name}" if engine is None else f"vllm:{model_name}:{engine}"


class _Stats:
    """min, max and last of a field's numbers (None, a bool, a string and NaN are no number). The fast reader
    (collectors/recording_fast.py) appends values to `pending` instead of calling add() for each one: they
    are folded at the next add(), fold() or to_json, in one pass of min() and max() (which, like add(), keep
    the first of equal values: 1 and 1.0 print differently)."""

    __slots__ = ("min", "max", "last", "pending", "convert")

    def __init__(self) -> None:
        self.min: float | None = None
        self.max: float | None = None
        self.last: float | None = None
        self.pending: list | None = None  # values not folded yet (appender)
        self.convert: Any = None  # what each pending value is turned into first, where it is not an int

    def add(self, value: Any) -> None:
        if self.pending:
            self.fold()
        kind = type(value)
        if (kind is not int and kind is not float) or value != value:  # None, a bool, a string, NaN
            return
        if self.min is None:
            self.min = self.max = value
        elif value < self.min:
            self.min = value
        elif value > self.max:
            self.max = value
        self.last = value

    def appender(self, convert: Any = None) -> Any:
        """The append of a list of values to fold later; `convert`: each value that is not an int of at
        most 2**53 (its own float) becomes convert(float(value), or NaN for None) first, None skipped (an
        agent's record value, as recorded_record_fields reads it)."""
        if self.pending is None:
            self.pending = []
        self.convert = convert
        return self.pending.append

    def fold(self) -> None:
        """The pending values folded in, as add() of each in turn would."""
        pending = self.pending
        if not pending:
            return
        span = _span(pending, self.convert)
        pending.clear()
        if span is None:
            return
        low, high, self.last = span
        if self.min is None:
            self.min, self.max = low, high
        else:
            if low < self.min:
                self.min = low
            if high > self.max:
                self.max = high

    def to_json(self) -> dict:
        self.fold()
        return {"min": self.min, "max": self.max, "last": self.last}


_INT = {int}
_NUMBER = {int, float}
_EXACT = 2**53  # an integer up to this is its own float


def _span(values: list, convert: Any) -> tuple | None:
    """(min, max, last) of the numbers among a batch of values (None, a bool, a string and NaN are none), as
    _Stats.add() of each in turn would find them; None when there is no number. `convert`: _Stats.convert."""
    kinds = set(map(type, values))
    if kinds == _INT:  # (the common case: sizes and counts, each its own float)
        low, high = min(values), max(values)
        if -_EXACT <= low and high <= _EXACT:
            return low, high, values[-1]
    if convert is not None:
        values = [_converted(v, convert) for v in values]
        kinds = set(map(type, values))
    if not kinds <= _NUMBER:
        values = [v for v in values if type(v) is int or type(v) is float]
    if not values:
        return None
    low, high = min(values), max(values)
    # a NaN anywhere but first is passed over by min() and max() (every comparison with it is false), so only
    # a NaN first or last changes their answers
    if low != low or high != high or values[-1] != values[-1]:
        values = [v for v in values if v == v]
        if not values:
            return None
        low, high = min(values), max(values)
    return low, high, values[-1]


def _converted(value: Any, convert: Any) -> Any:
    """A pending value as _Stats.appender's `convert` makes it."""
    if type(value) is int and -_EXACT <= value <= _EXACT:
        return value
    return convert(math.nan if value is None else float(value))


class _Source:
    def __init__(self, sid: str, kind: str, pid: int | None) -> None:
        self.id, self.kind, self.pid = sid, kind, pid
        self.samples = 0
        self.start: float | None = None
        self.end: float | None = None
        self.fields: dict[str, _Stats] = {}
        self.status: str | None = None  # agents: the last cuda_state ("CUDA not initialized", "ok", ...)
        self.name: str | None = None  # processes: /proc comm
        self.cmdline: str | None = None  # processes and agents: the command line

    def add(self, t: float, values: dict[str, Any]) -> None:
        self.seen(t, t, 1)
        fields = self.fields
        for name, value in values.items():
            stats = fields.get(name)
            if stats is None:
                stats = fields[name] = _Stats()
            stats.add(value)

    def seen(self, first: float, last: float, samples: int) -> None:
        """`samples` samples from time `first` to `last`."""
        self.samples += samples
        self.start = first if self.start is None else min(self.start, first)
        self.end = last if self.end is None else max(self.end, last)

    def to_json(self) -> dict:
        out = {
            "id": self.id,
            "kind": self.kind,
            "pid": self.pid,
            "samples": self.samples,
            "start": self.start,
            "end": self.end,
            "fields": {n: s.to_json() for n, s in self.fields.items()},
        }
        if self.status is not None:
            out["status"] = self.status
        if self.name is not None:
            out["name"] = self.name
        if self.cmdline is not None:
            out["cmdline"] = self.cmdline
        return out


AGENT_SUMMARY_FIELDS = (
    "allocated", "reserved", "peak_allocated", "active", "inactive_split", "alloc_retries", "num_ooms",
    "segments", "cuda_free", "cuda_total", "rss", "weights_bytes", "kv_bytes", "step_index",
)  # fmt: skip


class _Processes:
    """The per-process sources of the OS events' tables. A row seen again unchanged (format 2 keeps the
    same row object until it changes) adds a sample, not a new value. A process's run, the OS events it
    stayed in the table with as many rows, is settled into its source when it leaves the table or at the
    end: each of those events a sample per row, from the earliest of their times to the latest. An
    unchanged table costs a count per event, a change a few dictionary operations per row, and a new row
    its values. What it keeps is one entry per process in the current table (and the sources, one per
    process the document lists): nothing grows with the number of events or table changes."""

    def __init__(self, source) -> None:
        self._source = source
        self._table: list | None = None
        self._rows: dict[int, list] = {}  # id -> row of the current table (held: their ids are not reused)
        # (pid, start) -> [source, rows, events before its first, earliest time, latest time]
        self._runs: dict[tuple, list] = {}
        self._sources: dict[tuple, _Source] = {}
        # (pid, start) -> its source and the appends of its rss and growth (folded at its source's to_json,
        # when it leaves the table or at fold_pending)
        self._folds: dict[tuple, tuple[_Source, Any, Any]] = {}
        self._events = 0  # OS events so far
        self._last_t = -math.inf  # the time of the latest one
        # While every OS time is at or after the one before (a clock that never stepped back), a run's
        # earliest time is its first event's and its latest the last one's; once one steps back, each run
        # keeps its own earliest and latest at every event instead.
        self._ordered = True

    def add(self, t: float, table: list, cmdlines: dict) -> None:
        self._stepped_back(t)
        if table is not self._table:
            self._change(t, table, cmdlines)
        self._counted(t)

    def same(self, t: float) -> None:
        """An OS event whose table is the previous one (collectors/recording_fast.py)."""
        if t >= self._last_t and self._ordered:
            self._events += 1
            self._last_t = t
            return
        self._stepped_back(t)
        self._counted(t)

    def delta(
        self, t: float, changed: dict[tuple, list], gone: list[tuple], as_written: bool, cmdlines: dict
    ) -> None:
        """An OS event whose table is the previous one (one row per process) with the `changed` rows (by
        (pid, start), in the order format 2 wrote them) set and the `gone` processes removed: as add() of
        the whole table would fold it (collectors/recording_fast.py). `as_written`: `changed` is the whole
        table, in its order (else its rows are a change, and the table is sorted by RSS)."""
        ordered = t >= self._last_t and self._ordered  # (then _stepped_back and _counted are two steps)
        if not ordered:
            self._stepped_back(t)
        sources, runs = self._sources, self._runs
        folds, events = self._folds, self._events
        for key in gone:
            self._settle(runs.pop(key))
        items = changed.items()
        if not as_written and not changed.keys() <= sources.keys():
            # sources are made in the table's order: largest RSS first, ties in the order written
            items = sorted(items, key=_row_rss, reverse=True)
        for key, row in items:
            fold = folds.get(key)
            if fold is None:
                self._new_row(row, cmdlines)
            else:  # _new_row of a process seen before, its source and statistics kept (a dozen rows a second)
                src, rss, growth = fold
                rss(row[3])
                growth(row[4])
                src.name, src.cmdline = row[2], cmdlines.get(key, "")
            if key not in runs:
                runs[key] = [sources[key], 1, events, t, t]
        if self._table is not None:  # a table given to add() next is new in every row
            self._table, self._rows = None, {}
        if ordered:
            self._events += 1
            self._last_t = t
        else:
            self._counted(t)

    def _stepped_back(self, t: float) -> None:
        if t < self._last_t and self._ordered:
            self._ordered = False
            for run in self._runs.values():  # their latest so far: the last time (ordered until now)
                run[4] = self._last_t

    def _counted(self, t: float) -> None:
        if not self._ordered:
            for run in self._runs.values():
                if t < run[3]:
                    run[3] = t
                if t > run[4]:
                    run[4] = t
        self._events += 1
        self._last_t = t

    def _change(self, t: float, table: list, cmdlines: dict) -> None:
        previous = self._rows
        for row in table:
            if id(row) not in previous:  # a new row: its values are samples
                self._new_row(row, cmdlines)
        keys = [(row[0], row[1]) for row in table]
        counts = dict.fromkeys(keys, 1)
        if len(counts) < len(keys):  # a process with two rows (a hand-made table): count them
            counts = {}
            for key in keys:
                counts[key] = counts.get(key, 0) + 1
        runs = self._runs
        for key in [key for key, run in runs.items() if counts.get(key) != run[1]]:
            self._settle(runs.pop(key))  # gone, or its rows are not as many as before
        for key, count in counts.items():
            if key not in runs:
                runs[key] = [self._sources[key], count, self._events, t, t]
        self._table, self._rows = table, {id(row): row for row in table}

    def _new_row(self, row: list, cmdlines: dict) -> None:
        key = (row[0], row[1])
        src = self._sources.get(key)
        if src is None:
            src = self._sources[key] = self._source(f"process:{key[0]}:{key[1]}", "process", key[0])
        fields = src.fields
        if not fields:  # a process's source holds these two, made together at its first row
            fields["rss"], fields["growth"] = _Stats(), _Stats()
            self._folds[key] = (src, fields["rss"].appender(), fields["growth"].appender())
        fields["rss"].add(row[3])
        fields["growth"].add(row[4])
        src.name, src.cmdline = row[2], cmdlines.get(key, "")

    def _settle(self, run: list) -> None:
        """A run that ended before this event, into its source."""
        src, count, began, earliest, latest = run
        src.seen(earliest, latest if not self._ordered else self._last_t, (self._events - began) * count)
        for stats in src.fields.values():  # what delta() appended: nothing waits for a process gone
            stats.fold()

    def fold_pending(self) -> None:
        """The values delta() appended, folded (what they hold stays bounded however long the table stays)."""
        for run in self._runs.values():
            for stats in run[0].fields.values():
                stats.fold()

    def settle(self) -> None:
        """The runs of the processes still in the table (at the end of the recording)."""
        for run in self._runs.values():
            self._settle(run)
        self._runs, self._rows, self._table = {}, {}, None


def _row_rss(item: tuple) -> Any:
    """A (key, row) of a process table by the row's RSS."""
    return item[1][3]


def summarize(recording) -> dict:
    """The `memsight replay FILE --json` document: one entry per source, min/max/last of every field.
    `recording`: a Recording or a RecordingReader (one pass over its events; format 2's common lines read
    by collectors/recording_fast.py, which checks and folds only what each line holds)."""
    summary = Summary()
    if isinstance(recording, RecordingReader) and recording.version >= 2:
        from collectors.recording_fast import fold_lines  # noqa: PLC0415

        fold_lines(recording, summary)
    elif isinstance(recording, RecordingReader):
        for e, changed, rows in recording.decoded():
            summary.event(e, changed, rows)
    else:
        for e in recording.events:
            summary.event(e, None, e.get("procs", []))
    return summary.document(recording)


class Summary:
    """What summarize folds the events into (event() one at a time, then document())."""

    def __init__(self) -> None:
        self.sources: dict[str, _Source] = {}
        self.processes = _Processes(self.source)
        self.os_source: _Source | None = None  # made at the first os event (the sources' order)
        self.cmdlines: dict[tuple, str] = {}  # processes' (declared once each: as many as the document's)
        self.agent_cmdlines: dict[tuple, str] = {}
        self.alerts: list[dict] = []  # the document lists them all
        self.skipped: list[dict] = []
        self.recorded_summary: dict | None = None

    def source(self, sid: str, kind: str, pid: int | None) -> _Source:
        src = self.sources.get(sid)
        if src is None:
            src = self.sources[sid] = _Source(sid, kind, pid)
        return src

    def event(self, e: dict, changed: tuple | None, rows: list) -> None:
        """Fold one complete event in; `changed` (format 2): what it changed (only that is folded, the rest
        holds the values already seen), `rows`: an os event's process table as written."""
        k, t = e["k"], e.get("t")
        if k == "os":
            fields = OS_FIELDS if changed is None else [f for f in changed if f in _OS_STATS]
            values = {f: e.get(f) for f in fields}
            if changed is None or "mem_total" in changed or "mem_available" in changed:
                values["system_used"] = e["mem_total"] - e["mem_available"]
            if self.os_source is None:
                self.os_source = self.source("os", "os", None)
            self.os_source.add(t, values)
            self.processes.add(t, rows, self.cmdlines)
        elif k == "agent":
            _summarize_agent(e, changed, self.source, self.agent_cmdlines)
        elif k in ("engine", "engine_log"):
            _summarize_engine(e, t, self.source)
        elif k == "proc":
            self.cmdlines[(e.get("pid"), e.get("start"))] = e.get("cmdline", "")
        elif k == "agent_meta":
            self.agent_cmdlines[(e.get("pid"), e.get("start"))] = e.get("cmdline", "")
        elif k == "alert":
            self.alerts.append({key: e.get(key) for key in ALERT_KEYS})
        elif k == "skip":
            self.skipped.append({key: e[key] for key in ("t", "source", "path", "reason")})
        elif k == "summary":
            self.recorded_summary = {key: value for key, value in e.items() if key not in ("k", "t")}
        elif k == "nvml":
            _summarize_nvml(e, t, self.source)
        elif k == "vllm":
            _summarize_vllm(e, t, self.source)

    def document(self, recording) -> dict:
        self.processes.settle()
        return {
            "version": recording.header["version"],  # the file's format
            "created": recording.header.get("created"),
            "host": recording.header.get("host"),
            "bad_lines": recording.bad_lines,
            "sources": [s.to_json() for s in self.sources.values()],
            "alerts": self.alerts,  # as raised during the run (recorded before alerts were recorded: [])
            "skipped": self.skipped,  # input the monitor did not read (unsafe or corrupt agent files), why
            "summary": self.recorded_summary,  # collectors.summary.summary_to_json; None in older recordings
        }


_OS_STATS = frozenset(OS_FIELDS)
_FIELD_INDEX = {name: i for i, name in enumerate(fmt.RECORD_FIELDS)}
# each summarized field of an agent's record: its name, index and conversion (recorded_record_fields')
_SUMMARY_AT = tuple((name, _FIELD_INDEX[name], FIELD_VALUE[name]) for name in AGENT_SUMMARY_FIELDS)
_ALLOCATED, _RESERVED, _CUDA_STATE = (_FIELD_INDEX[n] for n in ("allocated", "reserved", "cuda_state"))


def _summarize_agent(e: dict, changed: tuple | None, source, cmdlines: dict) -> None:
    values = e["r"]
    src = source(f"agent:{e['pid']}:{e['start']}:{int(values[1])}", "agent", e["pid"])
    src.cmdline = cmdlines.get((e["pid"], e["start"]), "")
    if changed is None:  # the whole record
        r = recorded_record_fields(values)
        stats = {name: r[name] for name in AGENT_SUMMARY_FIELDS}
        if r["reserved"] is not None and r["allocated"] is not None:
            stats["gap"] = r["reserved"] - r["allocated"]
        src.add(r["t"], stats)
        src.status = r["cuda_state"]
        return

    def value(index: int, convert):  # as recorded_record_fields makes it
        x = values[index]
        return convert(math.nan if x is None else float(x))

    given = set(changed)  # indices of the record (its label's is past every field's)
    stats = {name: value(index, convert) for name, index, convert in _SUMMARY_AT if index in given}
    if _ALLOCATED in given or _RESERVED in given:
        allocated = value(_ALLOCATED, FIELD_VALUE["allocated"])
        reserved = value(_RESERVED, FIELD_VALUE["reserved"])
        if allocated is not None and reserved is not None:
            stats["gap"] = reserved - allocated
    src.add(float(values[0]), stats)
    if _CUDA_STATE in given:
        src.status = value(_CUDA_STATE, FIELD_VALUE["cuda_state"])


def _summarize_engine(e: dict, t: float, source) -> None:
    if e["k"] == "engine":
        src = source(f"engine:{e.get('kind') or 'unknown'}", "engine", None)
        keys = ("kv_usage", "kv_tokens_used", "kv_tokens_total", "running", "waiting")
        src.add(t, {key: e.get(key) for key in keys})
        for load in e.get("loads") or []:
            source(f"engine:ollama:{load.get('name')}", "engine", None).add(
                t, {"size": load.get("size"), "size_vram": load.get("size_vram")}
            )
        src.status = e.get("status")
        return
    src = source(f"engine_log:{e.get('engine')}", "engine_log", None)
    fields = dict(e.get("figures") or {})
    for d in e.get("devices") or []:
        for key in ("weights", "kv", "activations", "overhead"):
            fields[f"{key}:{d.get('device')}"] = d.get(key)
    src.add(t, fields)
    src.status = e.get("stage")


def _summarize_nvml(e: dict, t: float, source) -> None:
    for d in e.get("devices", []):
        source(f"nvml:{d['index']}", "nvml", None).add(
            t,
            {
                "total": d.get("total"),
                "reserved": d.get("reserved"),
                "used": d.get("used"),
                "free": d.get("free"),
                "utilization_gpu": d.get("utilization_gpu"),
                "processes_used": sum(
                    p["used_bytes"] for p in d.get("processes", []) if p.get("used_bytes") is not None
                ),
            },
        )
        for p in d.get("processes", []):
            source(f"gpu_process:{d['index']}:{p['pid']}", "gpu_process", p["pid"]).add(
                t, {"used_bytes": p.get("used_bytes")}
            )


def _summarize_vllm(e: dict, t: float, source) -> None:
    from collectors.recording_snapshots import vllm_snapshot_from  # noqa: PLC0415  (vLLM's recordings only)

    snap = vllm_snapshot_from(e)
    if not snap.models:  # a failed scrape: one "vllm" source that says why
        src = source("vllm", "vllm", None)
        src.add(t, {})
        src.status = snap.status
    for m in snap.models:
        src = source(vllm_source_id(m.model_name, m.engine), "vllm", None)
        src.add(
            t,
            {
                "kv_cache_usage": m.kv_cache_usage,
                "requests_running": m.requests_running,
                "requests_waiting": m.requests_waiting,
                "requests_swapped": m.requests_swapped,
                "preemptions_total": m.preemptions_total,
                "prefix_cache_hits": m.prefix_cache_hits,
                "prefix_cache_queries": m.prefix_cache_queries,
                "num_gpu_blocks": snap.num_gpu_blocks,
            },
        )
        src.status = snap.status

