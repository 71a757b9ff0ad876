"""Reading a recording (collectors/recorder.py writes it and describes the format), in one pass.

RecordingReader streams a file line by line: memory does not grow with its length. Each line is checked
against what the readers use (check_event) and format 2's changes are resolved into format 1's complete
events, so summarize(), the replay and the tests read one shape whatever the file's version. A line that
is not JSON, over MAX_RECORDING_LINE, or an event with a missing or wrong-typed field is skipped and
counted (bad_lines, first_bad), never raised later. `summarize` makes the `memsight replay --json` document
in the same single pass.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Any, NamedTuple

from collectors import agent_format as fmt
from collectors.errors import CollectorError
from collectors.recording_format import (
    AGENT_CARRIED,
    ALERT_KEYS,
    FIELD_VALUE,
    OS_FIELDS,
    OS_SCALARS,
    READ_VERSIONS,
    apply_proc_delta,
    recorded_record_fields,
    with_window,
)
from planner import limits  # a stdlib-only leaf: the limits every reader shares


class Recording(NamedTuple):
    header: dict
    events: tuple[dict, ...]  # every line after the header, in file order (format 1's complete events)
    bad_lines: int  # unreadable lines skipped (a truncated last line included)
    truncated_tail: bool
    first_bad: str = ""  # why the first skipped line was skipped (line number and reason)


def read_recording(path: str | os.PathLike) -> Recording:
    """The whole recording in memory (tests, small files); RecordingReader streams it instead."""
    with RecordingReader(path) as reader:
        events = tuple(reader.events)
        return Recording(reader.header, events, reader.bad_lines, reader.truncated_tail, reader.first_bad)


class RecordingReader:
    """One pass over a recording: `header` at once (CollectorError when the file is not a recording), then
    `events`, an iterator of complete, checked events in file order. bad_lines, first_bad and truncated_tail
    count what was skipped so far (all of it once `events` is exhausted). `position()` says where the next
    line starts and `seek(position)` resumes there (collectors/replay.py builds its index from them)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        fd = limits.open_regular(self.path, CollectorError, "memsight recording")
        self._file = os.fdopen(fd, "rb")
        self.bad_lines = 0
        self.first_bad = ""
        self.truncated_tail = False
        self.line_number = 0
        self.offset = 0
        try:
            self.header = self._read_header()
        except BaseException:
            self.close()
            raise
        self.version: int = self.header["version"]
        self.decoder = Decoder(self.version)
        self.events: Iterator[dict] = self._events()

    def __enter__(self) -> RecordingReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()

    def lines(self) -> Iterator[str]:
        """The text of each non-empty line (line_number: its number); an over-long line is counted and skipped
        unread."""
        limit = limits.MAX_RECORDING_LINE
        readline = self._file.readline
        while True:
            raw = readline(limit + 1)
            if not raw:
                return
            self.line_number += 1
            self.offset += len(raw)
            if len(raw) > limit and not raw.endswith(b"\n"):
                size = len(raw)
                while raw and not raw.endswith(b"\n"):  # the rest of the line, in bounded pieces
                    raw = readline(limit)
                    size += len(raw)
                    self.offset += len(raw)
                over = limits.bound("MAX_RECORDING_LINE")
                self._bad(f"a line of {size} bytes, over {over}")
                continue
            text = raw.decode("utf-8", "replace")
            if text[0] == "{" or text.strip():  # (a blank line is skipped, uncounted)
                yield text

    def _bad(self, why: str) -> None:
        self.bad_lines += 1
        self.first_bad = self.first_bad or f"line {self.line_number}: {why}"
        self.truncated_tail = True  # until a good line follows: only a bad last line is a truncated tail

    def _read_header(self) -> dict:
        for line in self.lines():
            try:
                obj = _parse(line)
            except ValueError as exc:
                self._bad(str(exc))
                continue
            if obj.get("k") != "header":
                raise CollectorError(f"{self.path}: not a memsight recording (first record is not a header)")
            if obj.get("version") not in READ_VERSIONS:
                raise CollectorError(
                    f"{self.path}: recording format version {str(obj.get('version'))[:40]}, "
                    f"this memsight reads {', '.join(map(str, READ_VERSIONS))}"
                )
            try:
                _check_fields(obj, _HEADER_FIELDS)
            except ValueError as exc:
                raise CollectorError(f"{self.path}: bad recording header: {exc}") from None
            self.truncated_tail = False
            return obj
        raise CollectorError(f"{self.path}: empty or not a memsight recording")

    def _events(self) -> Iterator[dict]:
        for line in self.lines():
            event = self.event_of(line)
            if event is not None:
                yield event

    def event_of(self, line: str) -> dict | None:
        """The complete, checked event of one line (None: skipped and counted)."""
        try:
            obj = _parse(line)
        except ValueError as exc:
            self._bad(str(exc))
            self.decoder.line_lost()
            return None
        try:
            event = self.decoder.decode(obj)
        except ValueError as exc:
            self._bad(str(exc))
            return None
        self.truncated_tail = False
        return event

    def decoded(self) -> Iterator[tuple[dict, tuple | None, list]]:
        """`events` with what each changed (Decoder.changed) and, for an os event, its process table as
        written (format 2 keeps a row the same object until its size or name changes; its growth window
        aside): summarize updates only that."""
        for event in self.events:
            rows = self.decoder.rows if self.version >= 2 else event.get("procs", [])
            yield event, self.decoder.changed, rows

    def position(self) -> ReaderPosition:
        """Where the next line starts, with what reading it needs (the decoder's state) and what was
        skipped before it: seek() resumes there."""
        decoder = self.decoder.copy()
        return ReaderPosition(
            self.offset, self.line_number, decoder, self.bad_lines, self.first_bad, self.truncated_tail
        )

    def seek(self, position: ReaderPosition) -> None:
        """Read on from a position this reader passed before; `events` then yields from that line."""
        self._file.seek(position.offset)
        self.offset, self.line_number = position.offset, position.line_number
        self.decoder = position.decoder.copy()
        self.bad_lines, self.first_bad = position.bad_lines, position.first_bad
        self.truncated_tail = position.tail
        self.events = self._events()


class ReaderPosition(NamedTuple):
    offset: int
    line_number: int
    decoder: Decoder
    bad_lines: int
    first_bad: str
    tail: bool


# kinds whose every value the readers check against a fixed shape (check_event, the Decoder); the others (an
# agent's info file, the summary, kinds a newer memsight writes) are held to the JSON limits in full
_SHAPED = frozenset({"os", "agent", "nvml", "vllm", "proc", "agent_meta", "scope"})


def _parse(line: str) -> dict:
    if len(line) > limits.MAX_RECORDING_LINE:
        raise ValueError(f"a line of {len(line)} characters, over {limits.bound('MAX_RECORDING_LINE')}")
    obj = limits.loads_json(line, shaped=True)
    if not isinstance(obj, dict) or not isinstance(obj.get("k"), str):
        raise ValueError("not a memsight record")
    if obj["k"] not in _SHAPED:  # rare lines: parsed again, with every limit
        obj = limits.loads_json(line)
    return obj


class Decoder:
    """Format 2's changes back into complete events (format 1 lines pass through checked). Its state: the
    last complete OS scalars and process table, each agent device's last record and each agent's carried
    fields. After a bad line of a stream, that stream's changes are refused (counted) until its next
    complete line, so a lost change never shows as wrong figures."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.os: dict[str, Any] | None = None  # the last complete os event's scalars (OS_SCALARS and t)
        self.rows: list[list] = []  # its process table as written (format 2 rows)
        self.procs: list[list] = []  # and as format 1 writes it (the same list until it changes)
        self.records: dict[tuple[int, int, int], list] = {}
        self.carried: dict[tuple[int, int], dict[str, Any]] = {}
        self.nvml: dict | None = None  # the last complete nvml event
        self.changed: tuple | None = None  # what the last event changed (decode)

    def copy(self) -> Decoder:
        """A copy to resume from later (the values in it are never mutated, only replaced)."""
        other = Decoder(self.version)
        other.os, other.rows, other.procs, other.nvml = self.os, self.rows, self.procs, self.nvml
        other.records, other.carried = dict(self.records), dict(self.carried)
        return other

    def line_lost(self) -> None:
        """A line that is not a readable event: whichever stream it changed, refuse every change until the
        next complete line (the writer writes them all in full every KEYFRAME_S)."""
        self.os = None
        self.nvml = None
        self.records.clear()
        self.carried.clear()

    def decode(self, e: dict) -> dict:
        """The complete event; `changed` then names what changed since the stream's previous event (os: the
        scalars given, agent: the record's indices) or is None (all of it may have)."""
        self.changed = None
        if self.version >= 2:
            k = e["k"]
            if k == "os":
                return self._os(e)
            if k == "agent":
                return self._agent(e)
            if k == "nvml":
                return self._nvml(e)
        check_event(e)
        return e

    def _nvml(self, e: dict) -> dict:
        try:
            if "dset" in e:
                e = _nvml_changed(self.nvml, e)
            check_event(e)
        except (ValueError, TypeError) as exc:
            self.nvml = None
            raise ValueError(str(exc)) from None
        self.nvml = e
        return e

    def _os(self, e: dict) -> dict:
        full = "procs" in e and all(name in e for name in OS_SCALARS)
        if self.os is None and not full:
            raise ValueError("os event: a change without the complete os event before it")
        try:
            if full:
                _check_fields(e, _OS_FIELDS, "os event: ")
            else:  # the fields the line holds, in its order, and t (missing or not)
                kinds = {n: _OS_FIELDS[n] for n in e if n in _OS_FIELDS}
                kinds.setdefault("t", "time")
                _check_fields(e, kinds, "os event: ")
            if "procs" in e:
                rows = _checked_rows(e["procs"])
            elif "pset" in e or "pdel" in e:
                pdel = e.get("pdel", [])
                if not isinstance(pdel, list) or not all(_is_key(x) for x in pdel):
                    raise ValueError("os event: pdel must be a list of [pid, start] pairs")
                rows = apply_proc_delta(self.rows, _checked_rows(e.get("pset", []), changes=True), pdel)
            else:
                rows = self.rows
        except ValueError:
            self.os = None  # its changes are lost: refuse the ones after it until a complete line
            raise
        given = _os_scalars_in(e)
        scalars = {**(self.os or {}), **{name: e[name] for name in given}, "t": e["t"]}
        self.changed = None if full else given
        if rows is not self.rows or scalars.get("w") != self.os_window():
            self.procs = with_window(rows, scalars.get("w"))
        self.os, self.rows = scalars, rows
        return {"k": "os", **scalars, "procs": self.procs}

    def os_window(self) -> float | None:
        return self.os.get("w") if self.os is not None else None

    def _agent(self, e: dict) -> dict:
        key3 = (e.get("pid"), e.get("start"), e.get("dev"))
        key = key3[:2]
        try:
            if not _agent_head_fits(*key3, e.get("t")):
                _check_fields(e, _AGENT_V2_FIELDS)  # says what is wrong
            known = self.carried.get(key)
            if known is None and not all(n in e for n in AGENT_CARRIED):
                raise ValueError("agent event: a change without the agent's complete line before it")
            # k, pid, start, t, dev and the record or its change: then none of the carried fields
            plain = len(e) == 6 and ("d" in e or "r" in e)
            given = () if plain else [n for n in AGENT_CARRIED if n in e]
            # a change line rarely carries one: then the agent's dict is shared (never mutated, only replaced)
            carried = {**(known or {}), **{n: e[n] for n in given}} if given else known
            head = {"k": "agent", "pid": e["pid"], "start": e["start"], "t": e["t"], **carried}
            if "r" in e:
                values = e["r"]
                event = {**head, "r": values}
                check_event(event)
                if values[0] != e["t"] or values[1] != e["dev"]:
                    raise ValueError("agent event: t and dev differ from the record's")
            else:  # only what changed is checked: the rest was, in the line it came from
                _check_fields(e, {n: _AGENT_FIELDS[n] for n in given}, "agent event: ")
                values, self.changed = _changed(self.records.get(key3), e.get("d"), e["t"])
                event = {**head, "r": values}
        except (ValueError, TypeError) as exc:
            # its changes (this device's values, the agent's carried fields) are lost: refuse every change
            # of this agent until its next complete record
            if all(_fits(v, "int") for v in key):  # a pid or start that is not a number names no agent
                self.records = {k: v for k, v in self.records.items() if k[:2] != key}
                self.carried.pop(key, None)
            raise ValueError(str(exc)) from None
        self.records[key3] = values
        self.carried[key] = carried
        return event


def _agent_head_fits(pid: Any, start: Any, dev: Any, t: Any) -> bool:
    """_AGENT_V2_FIELDS' checks (pid, start and dev "int", t "time"), written out: half the lines of a
    recording are an agent's."""
    m = _MEASURED
    return (
        type(pid) is int and -m <= pid <= m and type(start) is int and -m <= start <= m
        and type(dev) is int and -m <= dev <= m
        and (type(t) is float or type(t) is int) and 0.0 <= t <= _LATEST
    )  # fmt: skip


def _os_scalars_in(e: dict) -> tuple[str, ...]:
    """The OS_SCALARS line `e` holds, in OS_SCALARS' order (a change line holds two or three of them)."""
    given = [name for name in e if name in _OS_SCALAR_ORDER]
    if len(given) > 1:
        given.sort(key=_OS_SCALAR_ORDER.__getitem__)
    return tuple(given)


_OS_SCALAR_ORDER = {name: i for i, name in enumerate(OS_SCALARS)}


def _nvml_changed(previous: dict | None, e: dict) -> dict:
    """The complete nvml event a format-2 change ("dset") makes of the previous one."""
    if previous is None:
        raise ValueError("nvml event: a change without the complete nvml event before it")
    changes = e["dset"]
    if not isinstance(changes, list) or not all(isinstance(c, dict) for c in changes):
        raise ValueError("nvml event: dset must be a list of objects")
    devices = {d["index"]: d for d in previous["devices"]}
    for change in changes:
        index = change.get("index")
        if index not in devices:
            raise ValueError(f"nvml event: a change of device {str(index)[:20]}, not in the previous event")
        devices[index] = {**devices[index], **change}
    return {**previous, "t": e.get("t"), "devices": list(devices.values())}


def _changed(previous: list | None, d: Any, t: float) -> tuple[list, tuple[int, ...]]:
    """The record a format-2 change ("d": index, value, ...) makes of the previous one, each new value
    checked as check_event checks a whole record; and the indices that changed."""
    if previous is None:
        raise ValueError("agent event: a change without the complete record before it")
    if not isinstance(d, list) or len(d) % 2:
        raise ValueError("agent event: d must be a list of index, value pairs")
    values = list(previous)
    values[0] = t
    label = len(values) - 1
    changed = tuple(d[0::2])
    m = _MEASURED
    for index, value in zip(changed, d[1::2], strict=True):
        if type(index) is not int or not 2 <= index <= label:  # JSON's ints are int; a bool is refused
            raise ValueError(f"agent event: index {str(index)[:20]} out of the record")
        if index == label:
            fits = type(value) is str and len(value) <= _CHARS
        else:  # _KINDS["num?"], written out: a recording has a dozen of these per agent line
            kind = type(value)
            fits = value is None or ((kind is float or kind is int) and -m <= value <= m)
        if not fits:
            raise ValueError(f"agent event: {repr(value)[:60]} at index {index} is no number within limits")
        values[index] = value
    return values, changed


def _is_key(x: Any) -> bool:
    return isinstance(x, list) and len(x) == 2 and all(_fits(v, "int") for v in x)


def _checked_rows(rows: Any, changes: bool = False) -> list:
    """`rows` (format 2's "procs" or, with `changes`, "pset"), each checked; ValueError otherwise."""
    if not isinstance(rows, list):
        raise ValueError("os event: the process table is not a list")
    for row in rows:
        if changes and type(row) is list and len(row) == 4:
            if not _size_change_fits(*row):
                raise ValueError(f"os event: a process change {repr(row)[:60]}: not pid, start, rss, growth")
        elif not (type(row) is list and 7 <= len(row) <= 8 and _row_fits(*row)):
            _check_row(row)  # says what is wrong
    return rows


def _size_change_fits(pid: Any, start: Any, rss: Any, growth: Any) -> bool:
    """A format-2 size change [pid, start, rss, growth] as _KINDS checks it ("int", "int", "num", "num?"),
    written out: a recording holds a few of these per second."""
    m = _MEASURED
    return (
        type(pid) is int and -m <= pid <= m and type(start) is int and -m <= start <= m
        and (type(rss) is int or type(rss) is float) and -m <= rss <= m
        and (growth is None or ((type(growth) is int or type(growth) is float) and -m <= growth <= m))
    )  # fmt: skip


def _row_fits(pid: Any, start: Any, name: Any, rss: Any, growth: Any, _new: Any, user: Any, *window) -> bool:
    """A process row (_PROC_ROW, and its own window) as _check_row checks it, written out."""
    m = _MEASURED
    return (
        _size_change_fits(pid, start, rss, growth)
        and type(name) is str and len(name) <= _CHARS and type(user) is str and len(user) <= _CHARS
        and (not window or ((type(window[0]) is int or type(window[0]) is float) and -m <= window[0] <= m))
    )  # fmt: skip


# ------------------------------------------------------------------------------------------ event checks
# What each event kind must hold for the readers (os_snapshot_from, summarize, ReplayMonitor...) to use it,
# with the types of the snapshot fields they become (collectors/snapshots.py: `int | None` is "num?").
# Kinds: "num" a finite number within MAX_MEASURED (not a bool), "time" one within [0, MAX_TIMESTAMP],
# "int" an integer within MAX_MEASURED, "str", "bool"; a trailing "?" allows null (a missing "?" field is
# null); "list-" a list when present (the readers iterate `event.get(name, [])`, so null is refused).
# Fields not listed are not read, so not checked (newer recordings may add some).
_HEADER_FIELDS = {"created": "time?", "host": "str?", "hz": "num?"}
_OS_FIELDS = {
    "t": "time", "mem_total": "num", "mem_available": "num", "cached": "num?", "shmem": "num?",
    "swap_total": "num", "swap_free": "num", "psi_some_avg10": "num?", "psi_full_avg10": "num?",
    "oom_kill": "num?", "skipped": "int?", "source": "str?", "procs": "list-", "w": "num?",
    "mem_free": "num?", "buffers": "num?", "anon_pages": "num?", "sreclaimable": "num?", "kernel": "num?",
}  # fmt: skip
_PROC_ROW = ("int", "int", "str", "num", "num?", "any", "str")  # pid, start, name, rss, growth, is_new, user
_PROC_FIELDS = {"pid": "int", "start": "int", "cmdline": "str?"}
_NVML_FIELDS = {"t": "time", "status": "str", "available": "bool", "driver": "str?", "devices": "list-"}
_DEVICE_FIELDS = {
    "index": "int", "name": "str", "uuid": "str", "total": "num?", "reserved": "num?", "used": "num?",
    "free": "num?", "unified": "bool", "utilization_gpu": "num?", "processes": "list-",
    "unsupported": "list-", "errors": "list-",
}  # fmt: skip
_GPU_PROCESS_FIELDS = {"pid": "int", "used_bytes": "num?", "kind": "str"}
_VLLM_FIELDS = {
    "t": "time", "url": "str?", "status": "str", "available": "bool", "models": "list-",
    "num_gpu_blocks": "int?", "block_size": "int?", "gpu_memory_utilization": "num?", "samples": "int?",
    "refused": "list-",
}  # fmt: skip
_VLLM_MODEL_FIELDS = {
    "model_name": "str", "engine": "str?", "kv_cache_usage": "num?", "kv_cache_metric": "str?",
    "requests_running": "int?", "requests_waiting": "int?", "requests_swapped": "int?",
    "preemptions_total": "int?", "prefix_cache_hits": "int?", "prefix_cache_queries": "int?",
    "prefix_cache_metrics": "list-", "gpu_prefix_cache_hit_rate": "num?", "cpu_cache_usage": "num?",
}  # fmt: skip
_ENGINE_FIELDS = {
    "t": "time", "url": "str?", "kind": "str?", "status": "str?", "available": "bool?", "kv_usage": "num?",
    "kv_tokens_used": "int?", "kv_tokens_total": "int?", "running": "int?", "waiting": "int?",
    "loads": "list-", "slots": "list-",
}  # fmt: skip
_ENGINE_LOAD_FIELDS = {"name": "str?", "size": "num?", "size_vram": "num?", "context_length": "int?"}
_ENGINE_LOG_FIELDS = {"t": "time", "engine": "str", "stage": "str?", "devices": "list-", "ranks": "int?"}
_ENGINE_DEVICE_FIELDS = {
    "device": "str", "weights": "num?", "kv": "num?", "activations": "num?", "overhead": "num?",
}  # fmt: skip
_SKIP_FIELDS = {"t": "time", "source": "str", "path": "str", "reason": "str"}
_AGENT_META_FIELDS = {"pid": "int", "start": "int", "cmdline": "str?", "path": "str?", "hz": "num?"}
_AGENT_FIELDS = {
    "pid": "int", "start": "int", "status": "str?", "alive": "bool?", "lost": "int?", "r": "list",
    "sr": "num?",
}  # fmt: skip
_AGENT_V2_FIELDS = {"pid": "int", "start": "int", "t": "time", "dev": "int"}


_MEASURED = float(limits.MAX_MEASURED)
_LATEST = float(limits.MAX_TIMESTAMP)
_CHARS = limits.MAX_STRING_CHARS
# One test per kind, each a single call (a recording's checks run a few hundred thousand times an hour).
_KINDS = {
    "any": lambda v: True,
    "str": lambda v: type(v) is str and len(v) <= _CHARS,
    "bool": lambda v: type(v) is bool,
    "list": lambda v: type(v) is list,
    "int": lambda v: type(v) is int and -_MEASURED <= v <= _MEASURED,
    "time": lambda v: (type(v) is float or type(v) is int) and 0.0 <= v <= _LATEST,
    "num": lambda v: (type(v) is float or type(v) is int) and -_MEASURED <= v <= _MEASURED,
    "any?": lambda v: True,
    "str?": lambda v: v is None or (type(v) is str and len(v) <= _CHARS),
    "bool?": lambda v: v is None or type(v) is bool,
    "list?": lambda v: v is None or type(v) is list,
    "int?": lambda v: v is None or (type(v) is int and -_MEASURED <= v <= _MEASURED),
    "time?": lambda v: v is None or ((type(v) is float or type(v) is int) and 0.0 <= v <= _LATEST),
    "num?": lambda v: v is None or ((type(v) is float or type(v) is int) and -_MEASURED <= v <= _MEASURED),
}  # a NaN fails the comparisons; JSON gives exact int and float, never a subclass


def _fits(value: Any, kind: str) -> bool:
    return _KINDS[kind](value)


def _check_fields(obj: Any, fields: dict[str, str], where: str = "") -> None:
    if not isinstance(obj, dict):
        raise ValueError(f"{where or 'event'} is not an object")
    get = obj.get
    for name, kind in fields.items():
        if kind == "list-":
            if not isinstance(get(name, []), list):
                raise ValueError(f"{where}{name} is {repr(obj[name])[:60]}, expected a list")
            continue
        value = get(name)
        if not _KINDS[kind](value):
            shown = repr(value)[:60] if name in obj else "missing"
            raise ValueError(f"{where}{name} is {shown}, expected {kind.rstrip('?')}")


def _check_list(items: list, fields: dict[str, str], names: tuple[frozenset, frozenset], where: str) -> None:
    """Each item becomes a snapshot class's instance (cls(**item)): its fields checked, none unknown, every
    one it must hold given. `names`: (the fields it may hold, those it must), _item_names'."""
    allowed, required = names
    for item in items:
        _check_fields(item, fields, where)
        extra = set(item) - allowed
        if extra:
            raise ValueError(f"{where}has unknown field {sorted(extra)[0]!r}")
        missing = required - set(item)
        if missing:
            raise ValueError(f"{where}{sorted(missing)[0]} is missing")


def _item_names(fields: dict[str, str], defaulted: frozenset[str]) -> tuple[frozenset[str], frozenset[str]]:
    """(the fields an item may hold, those it must): those with a default in its class (`defaulted`) and the
    "list-" ones (the converters fill them in) may be left out."""
    required = frozenset(n for n, kind in fields.items() if kind != "list-" and n not in defaulted)
    return frozenset(fields), required


# The lists whose items become snapshot classes: an nvml line's devices (DeviceInfo) and their processes
# (GpuProcess), a vllm line's models (VLLMModelStats). Their fields are written out above rather than read
# from the classes, so that reading a recording never loads collectors/snapshots.py (`memsight replay
# --json`, issue 20); tests/collectors/test_recording_checks.py holds them equal to the classes' fields and
# defaults.
_DEVICE_NAMES = _item_names(_DEVICE_FIELDS, frozenset({"errors"}))
_GPU_PROCESS_NAMES = _item_names(_GPU_PROCESS_FIELDS, frozenset())
_VLLM_MODEL_NAMES = _item_names(
    _VLLM_MODEL_FIELDS, frozenset({"prefix_cache_metrics", "gpu_prefix_cache_hit_rate", "cpu_cache_usage"})
)


def _check_strings(items: list | None, where: str) -> None:
    if items and not all(isinstance(x, str) and len(x) <= limits.MAX_STRING_CHARS for x in items):
        raise ValueError(f"{where} must be a list of strings")


def _check_row(row: Any) -> None:
    if not isinstance(row, list) or not 7 <= len(row) <= 8:
        raise ValueError("os event: a process row is not a list of 7 or 8 values")
    for value, (test, kind) in zip(row, _PROC_ROW_TESTS, strict=False):
        if not test(value):
            raise ValueError(f"os event: process row value {repr(value)[:60]}, expected {kind}")


_PROC_ROW_TESTS = tuple((_KINDS[kind], kind) for kind in (*_PROC_ROW, "num"))  # the 8th: its own window


def check_event(e: dict) -> None:
    """ValueError (one line) unless event `e` holds what the readers use, with the types they expect."""
    k = e["k"]
    if not _fits(e.get("t"), "time?"):  # every kind: replay orders events by it (alert, summary, ...)
        raise ValueError(f"{k[:20]} event: t is {repr(e['t'])[:60]}, expected time")
    if k == "os":
        _check_fields(e, _OS_FIELDS, "os event: ")
        for row in e.get("procs") or ():
            _check_row(row)
    elif k == "proc":
        _check_fields(e, _PROC_FIELDS, "proc event: ")
    elif k == "nvml":
        _check_fields(e, _NVML_FIELDS, "nvml event: ")
        devices = e.get("devices") or []
        _check_list(devices, _DEVICE_FIELDS, _DEVICE_NAMES, "nvml device: ")
        for d in devices:
            _check_list(d.get("processes") or [], _GPU_PROCESS_FIELDS, _GPU_PROCESS_NAMES, "nvml process: ")
            _check_strings(d.get("unsupported"), "nvml device: unsupported")
            _check_strings(d.get("errors"), "nvml device: errors")
    elif k == "vllm":
        _check_fields(e, _VLLM_FIELDS, "vllm event: ")
        _check_strings(e.get("refused"), "vllm event: refused")
        models = e.get("models") or []
        _check_list(models, _VLLM_MODEL_FIELDS, _VLLM_MODEL_NAMES, "vllm model: ")
        for m in models:
            _check_strings(m.get("prefix_cache_metrics"), "vllm model: prefix_cache_metrics")
    elif k == "pool":
        from collectors.pool import check_pool_event  # noqa: PLC0415

        _check_fields(e, {"t": "time"}, "pool event: ")
        check_pool_event(e)
    elif k == "engine":
        _check_fields(e, _ENGINE_FIELDS, "engine event: ")
        for load in e.get("loads") or []:
            _check_fields(load, _ENGINE_LOAD_FIELDS, "engine load: ")
        for slot in e.get("slots") or []:
            _check_fields(slot, {}, "engine slot: ")
    elif k == "engine_log":
        _check_fields(e, _ENGINE_LOG_FIELDS, "engine_log event: ")
        for device in e.get("devices") or []:
            _check_fields(device, _ENGINE_DEVICE_FIELDS, "engine_log device: ")
        figures = e.get("figures", {})
        if not isinstance(figures, dict) or not all(_fits(v, "num?") for v in figures.values()):
            raise ValueError("engine_log event: figures must map names to numbers")
    elif k == "agent_meta":
        _check_fields(e, _AGENT_META_FIELDS, "agent_meta event: ")
    elif k == "skip":
        _check_fields(e, _SKIP_FIELDS, "skip event: ")
    elif k == "scope":
        own = e.get("own")
        if not isinstance(own, list) or not all(_fits(p, "int") for p in own):
            raise ValueError("scope event: own must be a list of pids")
    elif k == "agent":
        _check_fields(e, _AGENT_FIELDS, "agent event: ")
        r = e["r"]
        if len(r) != len(fmt.RECORD_FIELDS) + 1 or not all(_fits(v, "num?") for v in r[:-1]):
            raise ValueError(f"agent event: r must hold {len(fmt.RECORD_FIELDS)} numbers and a label")
        if not _fits(r[-1], "str"):
            raise ValueError("agent event: the record's label is not a string")
        recorded_record_fields(r)  # CollectorError (a ValueError) for out-of-range times and devices


def vllm_source_id(model_name: str, engine: str | None) -> str:
    """The `memsight replay --json` id of one vLLM engine: vllm:<model_name>[:<engine>]."""
    return f"vllm:{model_name}" if engine is None else f"vllm:{model_name}:{engine}"


# ------------------------------------------------------------------------------------------ summary
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

