"""Reading a recording (collectors/recorder.py writes it and describes the format), in one pass.

RecordingReader streams a file line by line: memory does not grow with its length. Each line is checked
against what the readers use (check_event) and format 2's changes are resolved into format 1's complete
events, so summarize(), the replay and the tests read one shape whatever the file's version. A line that
is not JSON, over MAX_RECORDING_LINE, or an event with a missing or wrong-typed field is skipped and
counted (bad_lines, first_bad), never raised later. What each event must hold is in
collectors/recording_checks.py; the `memsight replay --json` document, folded in the same single pass, in
collectors/recording_summary.py.
"""

from __future__ import annotations

import os
from collections import namedtuple
from collections.abc import Iterator

from collectors.errors import CollectorError
from collectors.recording_checks import (
    _AGENT_FIELDS,
    _AGENT_V2_FIELDS,
    _CHARS,
    _HEADER_FIELDS,
    _LATEST,
    _MEASURED,
    _OS_FIELDS,
    _check_fields,
    _check_row,
    _fits,
    check_event,
)
from collectors.recording_format import (
    AGENT_CARRIED,
    OS_SCALARS,
    READ_VERSIONS,
    apply_proc_delta,
    with_window,
)
from planner import limits  # a stdlib-only leaf: the limits every reader shares

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: replay --json does not pay for it
if TYPE_CHECKING:
    from typing import Any


# header (dict); events: every line after the header, in file order (format 1's complete events); bad_lines:
# unreadable lines skipped (a truncated last line included); truncated_tail; first_bad: why the first skipped
# line was skipped (line number and reason). (collections' namedtuple: typing's costs replay --json 5 ms)
Recording = namedtuple("Recording", "header events bad_lines truncated_tail first_bad", defaults=("",))


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


# where a RecordingReader was (its position()): the file offset, the line number, a copy of its Decoder,
# bad_lines, first_bad and whether the tail was cut
ReaderPosition = namedtuple("ReaderPosition", "offset line_number decoder bad_lines first_bad tail")


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
