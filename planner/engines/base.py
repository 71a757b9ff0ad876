"""The small interface every serving engine implements, so `memsight explain`, `memsight plan --engine` and
the Live screen treat vLLM, llama.cpp, SGLang and Ollama alike:

- recognizes(text): whether a start-up log is this engine's (a line only it writes);
- read_log(text): the log read into the terms the engine logged (its figures, each with its line);
- log_problem(log): one line saying why a log cannot be explained (not this engine's, or cut short);
- explain(log, options): the shared worksheet (planner.engines.worksheet) of logged vs predicted;
- predict(spec, arguments, plan): the engine's own memory terms from a model spec and the engine's arguments,
  before launch (what `memsight plan --engine NAME` prints).

Each engine is one package under planner/engines/ and registers in planner/engines/__init__.py.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from planner import limits
from planner.errors import PlannerError
from planner.units import GiB

MiB = 2**20


@dataclass(frozen=True, slots=True)
class Figure:
    """One number an engine logged, with where it was read."""

    name: str
    value: float  # in the unit of `unit`
    unit: str  # "GiB" | "GB" | "MiB" | "tokens" | "blocks" | "cells" | "x" | "" (a ratio)
    text: str  # the number as printed ("53.29")
    line: int  # 1-based line number in the log
    rank: str  # "" or who logged it: a worker prefix ("Worker_TP1"), a device ("CUDA0")

    @property
    def bytes(self) -> int:
        """Memory figures as bytes (int); others raise. "GB" is what vLLM < 0.8.5 printed for a 2**30-based
        figure, so it counts as GiB."""
        if self.unit in ("GiB", "GB"):
            return round(self.value * GiB)
        if self.unit == "MiB":
            return round(self.value * MiB)
        raise ValueError(f"{self.name} is not a memory figure")



class FigureLookups:
    """The lookups every engine's parsed log shares; the log's `figures` maps a stable name to every
    occurrence, first one first (a mixin of the frozen, slotted log dataclasses: no state of its own)."""

    __slots__ = ()
    figures: Mapping[str, tuple[Figure, ...]]

    def first(self, name: str) -> Figure | None:
        found = self.figures.get(name)
        return found[0] if found else None

    def smallest(self, name: str) -> Figure | None:
        found = self.figures.get(name)
        return min(found, key=lambda f: f.value) if found else None

def setting_number(text: str, name: str, where: str, lo: float, hi: float, *, integer: bool = True) -> float:
    """An engine setting read from a log or a flag ("4", "0.9", "8192.0") within [lo, hi], as an int when
    `integer`; anything else (inf, nan, 1e999, a run of digits, -1, 0.5 GPUs) is a PlannerError naming it:
    a log can say what it likes, the arithmetic after this takes only plausible numbers."""
    value = limits.logged_number(str(text))
    if value is None or not lo <= value <= hi or (integer and not value.is_integer()):
        if integer:
            wanted = f"a whole number in [{limits.human(int(lo))}, {limits.human(int(hi))}]"
        else:
            wanted = f"a number in [{lo:g}, {hi:g}]"
        raise PlannerError(f"{name}={str(text)[:40]!r} ({where}) is not {wanted}")
    return int(value) if integer else value


_UNIT_BYTES = {"GiB": GiB, "GB": GiB, "MiB": 2**20, "KiB": 2**10}


def plausible(value: float, unit: str) -> bool:
    """Whether a number read from a log can be a measurement: a memory size or a count, so at least 0, finite,
    and as bytes (or as a count) within the int64 range every measured figure keeps to
    (planner.limits.MAX_MEASURED). A log line damaged into "99999...9 GiB" or "-5.00 MiB" is then not read,
    rather than overflowing or subtracting where it is used."""
    from planner.limits import finite  # noqa: PLC0415

    return finite(value, 0) and finite(value * _UNIT_BYTES.get(unit, 1), 0)


class Engine(ABC):
    """One serving engine. Implementations import their heavy parts inside the methods, so that reading the
    registry costs nothing."""

    name: ClassVar[str]  # the registry key and the --engine value ("vllm", "llamacpp")
    title: ClassVar[str]  # how a person names it ("vLLM", "llama.cpp")

    @abstractmethod
    def recognizes(self, text: str) -> bool:
        """Whether `text` (a start-up log, or its first part) was written by this engine."""

    @abstractmethod
    def read_log(self, text: str) -> Any:
        """The log read into the figures the engine logged (the engine's own log type)."""

    @abstractmethod
    def log_problem(self, log: Any) -> str | None:
        """One line naming what was recognized when the log cannot be explained, else None."""

    @abstractmethod
    def explain(self, log: Any, options: Mapping[str, Any]) -> Any:
        """The worksheet (planner.engines.worksheet.Worksheet) for a log; `options` are the user's flags."""

    @abstractmethod
    def predict(self, spec: Any, arguments: Any, plan: Any = None) -> Any:
        """The engine's own memory terms for a model spec and the engine's arguments, before launch."""

    @abstractmethod
    def new_reader(self) -> Any:
        """An incremental reader of this engine's log (a LineReader): feed_text(chunk) as it streams, flush()
        at its end, result() at any time."""

    def live_buckets(self, log: Any) -> LiveBuckets | None:
        """What each device holds by the engine's own log (None: this engine gives none)."""
        return None

    def planned_buckets(self, sheet: Any) -> DeviceBuckets | None:
        """The buckets the engine's own model predicts for the log's model and arguments (the Live screen's
        plan row): the worksheet's predicted "weights" and "KV pool" / "KV cache" terms."""
        terms = {t.name: t for t in sheet.terms if t.how == "PREDICTED"}
        kv = terms.get("KV pool") or terms.get("KV cache")
        weights = terms.get("weights")
        if kv is None and weights is None:
            return None
        return DeviceBuckets("planned", weights.bytes if weights else None, kv.bytes if kv else None)


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # terminal colour codes a captured log keeps


class LineReader:
    """An engine log reader fed text in chunks of any size (a followed file delivers lines in pieces): each
    whole line goes to feed(line) when its newline arrives; flush() hands on a last line without one. A line
    over limits.MAX_LOG_LINE is not read (counted in skipped_lines), whole or in pieces alike, and its pieces
    are not kept: a stream without newlines costs bounded memory and time."""

    _parts: list[str] | None = None  # the current line's pieces so far (None: none)
    _parts_len = 0
    _skipping = False  # inside a line over MAX_LOG_LINE: dropped up to its newline
    skipped_lines = 0

    def feed(self, raw: str) -> None:
        raise NotImplementedError

    def feed_text(self, chunk: str) -> None:
        *complete, tail = chunk.split("\n")
        for piece in complete:
            self._end_line(piece)
        if tail:
            self._add_piece(tail)

    def _add_piece(self, piece: str) -> None:
        if self._skipping:
            return
        if self._parts_len + len(piece) > limits.MAX_LOG_LINE:
            self._parts, self._parts_len, self._skipping = None, 0, True
            self.skipped_lines += 1
            return
        if self._parts is None:
            self._parts = []
        self._parts.append(piece)
        self._parts_len += len(piece)

    def _end_line(self, piece: str) -> None:
        if self._skipping:  # its newline: the next piece starts a line
            self._skipping = False
            return
        if self._parts:
            piece = "".join(self._parts) + piece
            self._parts, self._parts_len = None, 0
        if len(piece) > limits.MAX_LOG_LINE:
            self.skipped_lines += 1
            return
        self.feed(piece)

    def flush(self) -> None:
        if self._parts and not self._skipping:
            line = "".join(self._parts)
            self._parts, self._parts_len = None, 0
            self.feed(line)
        self._parts, self._parts_len, self._skipping = None, 0, False


def read_all(reader: Any, text: str | Iterable[str]) -> Any:
    """A whole log (one string, or its lines) through `reader`; its result()."""
    if isinstance(text, str):
        reader.feed_text(text)
        reader.flush()
    else:
        for line in text:
            reader.feed(line)
    return reader.result()


# ---- what a followed log says each device holds (the Live screen's buckets, the recording's figures) ----
@dataclass(frozen=True, slots=True)
class DeviceBuckets:
    """One device's share of an engine process, as the engine's log states it (bytes; None: not logged)."""

    device: str  # "GPU" (one rank of the job), "CUDA0", "CPU"
    weights: int | None = None
    kv: int | None = None
    activations: int | None = None  # the activation / compute buffers
    overhead: int | None = None  # everything else the engine accounts for (CUDA graphs, request tables, ...)

    @property
    def total(self) -> int | None:
        parts = [p for p in (self.weights, self.kv, self.activations, self.overhead) if p is not None]
        return sum(parts) if parts else None


@dataclass(frozen=True, slots=True)
class LiveBuckets:
    """An engine's own accounting from its log so far: per device, what each bucket came from, and every
    figure by name for the recording."""

    engine: str
    stage: str
    devices: tuple[DeviceBuckets, ...]  # GPU devices first, then the host
    sources: tuple[str, ...]  # "weights: 'Load weight end' mem usage (line 12)", ...
    figures: tuple[tuple[str, float], ...]  # (name, value) in bytes for memory figures, else counts
    ranks: int = 1  # ranks of the job whose figures these are (each rank the same)
    # why the log has no memory figure though the engine is up (a log level that leaves them out), else ""
    silent: str = ""

    def device(self, name: str) -> DeviceBuckets | None:
        return next((d for d in self.devices if d.device == name), None)

    @property
    def gpu(self) -> DeviceBuckets | None:
        return next((d for d in self.devices if d.device != "CPU"), None)

    @property
    def accounted(self) -> int | None:
        """What the engine accounts for in all: every device's total, times the ranks."""
        totals = [d.total for d in self.devices if d.total is not None]
        return sum(totals) * self.ranks if totals else None
