"""Samples and fixed-capacity rings.

A Sample is a timestamp, a source id and named numeric fields. Two kinds of "no number" are kept apart:
* unknown (`float("nan")`, or None at the API edge): the read failed or the source did not say;
* UNSUPPORTED: a NaN with its own payload bit pattern, for "the device answered NOT_SUPPORTED".
Both survive `array('d')`, `struct` and copying unchanged (they are never used in arithmetic).

A Ring keeps one source's samples in `array('d')` storage, in two tiers:
* fine: the last `capacity` samples at full rate;
* coarse: one entry per `coarse_step_s` seconds holding the min and max of every field over that step,
  `coarse_capacity` entries long. The defaults (4,096 fine, 8,640 coarse at 10 s) keep a day of history
  at any sampling rate in at most `bytes_for(n_fields)` bytes (for 10 fields: 1.8 MiB).
The storage grows with the samples until a tier is full, then each new entry overwrites the oldest: a monitor
open for a minute holds a minute of history, not a day's worth of zeros (`held_bytes`; issue 20).

Writers: one thread per ring appends; `append` never blocks, and allocates only while a tier is filling.
Readers: `snapshot()` copies without taking a lock and discards whatever the writer overwrote during the
copy (it checks the write counter before and after), so readers never block writers.
Dropped: samples refused (time going backwards, wrong width) are counted in `dropped`, never hidden.
"""

from __future__ import annotations

import math
import struct
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_UNSUPPORTED_BITS = 0x7FF8_0000_0000_0A11  # a quiet NaN with a payload nothing computes by accident
UNSUPPORTED: float = struct.unpack("<d", struct.pack("<Q", _UNSUPPORTED_BITS))[0]
UNKNOWN: float = float("nan")


def _bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def is_unsupported(x: float | None) -> bool:
    """True only for the UNSUPPORTED marker (not for a plain NaN, not for None)."""
    return isinstance(x, float) and x != x and _bits(x) == _UNSUPPORTED_BITS


def is_unknown(x: float | None) -> bool:
    """True for None and for a NaN that is not the UNSUPPORTED marker."""
    return x is None or (isinstance(x, float) and x != x and _bits(x) != _UNSUPPORTED_BITS)


def to_float(value: int | float | None) -> float:
    """An API value (None = unknown) as a ring value."""
    return UNKNOWN if value is None else float(value)


def to_int(x: float) -> int | None:
    """A ring value as bytes/count: None for unknown or unsupported."""
    return None if x != x else int(x)


@dataclass(frozen=True, slots=True)
class Sample:
    """One timestamped, flat record of numbers from one source."""

    t: float
    source: str
    values: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class RingSnapshot:
    """A reader's copy: times, and one tuple of values per field, oldest first."""

    fields: tuple[str, ...]
    times: tuple[float, ...]
    columns: tuple[tuple[float, ...], ...]  # columns[i] belongs to fields[i]
    coarse_times: tuple[float, ...]
    coarse_min: tuple[tuple[float, ...], ...]
    coarse_max: tuple[tuple[float, ...], ...]
    appended: int  # samples accepted since creation
    dropped: int  # samples refused (backwards time, wrong width)

    def column(self, name: str) -> tuple[float, ...]:
        return self.columns[self.fields.index(name)]

    def last(self, name: str) -> float:
        col = self.column(name)
        return col[-1] if col else UNKNOWN


class TimeGate:
    """What a Ring does with a sample's time, without keeping the sample: it accepts one no older than the
    last it accepted and counts the others in `dropped`. A replay's builder uses these (nothing reads a
    ring's history, and a replay's checkpoints copy its builder)."""

    __slots__ = ("_last_t", "dropped")

    def __init__(self) -> None:
        self._last_t = -math.inf
        self.dropped = 0

    def append(self, t: float, values: object = None) -> bool:
        if not t >= self._last_t:  # also refuses a NaN time
            self.dropped += 1
            return False
        self._last_t = t
        return True

    def copy(self) -> TimeGate:
        other = TimeGate()
        other._last_t, other.dropped = self._last_t, self.dropped
        return other


class Ring:
    DEFAULT_CAPACITY = 4096
    DEFAULT_COARSE_CAPACITY = 8640  # a day at 10 s
    DEFAULT_COARSE_STEP_S = 10.0

    def __init__(
        self,
        source: str,
        fields: Sequence[str],
        capacity: int = DEFAULT_CAPACITY,
        coarse_capacity: int = DEFAULT_COARSE_CAPACITY,
        coarse_step_s: float = DEFAULT_COARSE_STEP_S,
    ) -> None:
        if capacity < 1 or coarse_capacity < 1 or not coarse_step_s > 0:
            raise ValueError("a ring needs capacity >= 1, coarse_capacity >= 1 and coarse_step_s > 0")
        if len(set(fields)) != len(fields) or not fields:
            raise ValueError(f"ring {source!r}: field names must be unique and non-empty: {list(fields)}")
        self.source = source
        self.fields: tuple[str, ...] = tuple(fields)
        self._index = {name: i for i, name in enumerate(self.fields)}
        n = len(self.fields)
        self.capacity = capacity
        self.coarse_capacity = coarse_capacity
        self.coarse_step_s = coarse_step_s
        # filled in order up to `capacity` (`coarse_capacity`) entries, then in place: entry k of the tier is
        # in slot k % capacity either way
        self._times = array("d")
        self._values = array("d")
        self._ctimes = array("d")
        self._cmin = array("d")
        self._cmax = array("d")
        # the coarse bucket being filled: its start time and running min/max
        self._acc_t = UNKNOWN
        self._acc_min = array("d", [UNKNOWN] * n)
        self._acc_max = array("d", [UNKNOWN] * n)
        self.appended = 0  # written last: readers use it to know what is complete
        self.coarse_appended = 0
        self.dropped = 0
        self._last_t = -math.inf

    @property
    def last_t(self) -> float:
        """Time of the newest accepted sample (-inf before any)."""
        return self._last_t

    def copy(self) -> Ring:
        """An independent ring holding the same samples (its storage copied too)."""
        other = Ring(self.source, self.fields, self.capacity, self.coarse_capacity, self.coarse_step_s)
        for name in ("_times", "_values", "_ctimes", "_cmin", "_cmax", "_acc_min", "_acc_max"):
            setattr(other, name, array("d", getattr(self, name)))
        other._acc_t, other.appended, other.coarse_appended = self._acc_t, self.appended, self.coarse_appended
        other.dropped, other._last_t = self.dropped, self._last_t
        return other

    @staticmethod
    def bytes_for(
        n_fields: int, capacity: int = DEFAULT_CAPACITY, coarse_capacity: int = DEFAULT_COARSE_CAPACITY
    ) -> int:
        """The most storage a ring of n_fields holds (both tiers full: it never grows past this)."""
        return 8 * capacity * (1 + n_fields) + 8 * coarse_capacity * (1 + 2 * n_fields) + 16 * n_fields

    @property
    def nbytes(self) -> int:
        """The bound on this ring's storage (`bytes_for`)."""
        return self.bytes_for(len(self.fields), self.capacity, self.coarse_capacity)

    @property
    def held_bytes(self) -> int:
        """The storage this ring holds now: what it was given so far, up to `nbytes`."""
        tiers = (self._times, self._values, self._ctimes, self._cmin, self._cmax)
        return sum(8 * len(a) for a in (*tiers, self._acc_min, self._acc_max))

    def append(self, t: float, values: Mapping[str, float | int | None] | Sequence[float]) -> bool:
        """Add one sample; False (and counted in `dropped`) if refused. Missing fields are unknown."""
        n = len(self.fields)
        if not t >= self._last_t:  # also refuses a NaN time
            self.dropped += 1
            return False
        if isinstance(values, Mapping):
            row = [UNKNOWN] * n
            for name, v in values.items():
                i = self._index.get(name)
                if i is None:
                    self.dropped += 1
                    return False
                row[i] = to_float(v)
        else:
            if len(values) != n:
                self.dropped += 1
                return False
            row = [to_float(v) for v in values]
        self._last_t = t
        if self.appended < self.capacity:  # filling: the slot is the next one
            self._times.append(t)
            self._values.extend(row)
        else:
            slot = self.appended % self.capacity
            self._times[slot] = t
            self._values[slot * n : (slot + 1) * n] = array("d", row)
        self._fold_coarse(t, row)
        self.appended += 1
        return True

    def _fold_coarse(self, t: float, row: list[float]) -> None:
        n = len(self.fields)
        if self._acc_t != self._acc_t:  # first sample
            self._acc_t = t - (t % self.coarse_step_s)
        elif t >= self._acc_t + self.coarse_step_s:
            if self.coarse_appended < self.coarse_capacity:
                self._ctimes.append(self._acc_t)
                self._cmin.extend(self._acc_min)
                self._cmax.extend(self._acc_max)
            else:
                slot = self.coarse_appended % self.coarse_capacity
                self._ctimes[slot] = self._acc_t
                self._cmin[slot * n : (slot + 1) * n] = self._acc_min
                self._cmax[slot * n : (slot + 1) * n] = self._acc_max
            self.coarse_appended += 1
            self._acc_t = t - (t % self.coarse_step_s)
            for i in range(n):
                self._acc_min[i] = UNKNOWN
                self._acc_max[i] = UNKNOWN
        for i, v in enumerate(row):
            if v != v:
                continue
            lo, hi = self._acc_min[i], self._acc_max[i]
            if lo != lo or v < lo:
                self._acc_min[i] = v
            if hi != hi or v > hi:
                self._acc_max[i] = v

    def snapshot(self, last: int | None = None) -> RingSnapshot:
        """A consistent copy of the fine tier (the newest `last` samples, or all) and the coarse tier."""
        n = len(self.fields)
        for _ in range(3):
            before = self.appended
            times = self._times.tolist()
            values = self._values.tolist()
            after = self.appended
            # slots rewritten during the copy belong to samples [before, after): drop the oldest that many
            count = min(before, self.capacity - (after - before))
            if count >= 0:
                break
        else:
            count = 0
        if last is not None:
            count = min(count, last)
        order = [(before - count + k) % self.capacity for k in range(count)]
        cols = tuple(tuple(values[s * n + i] for s in order) for i in range(n))
        cb = self.coarse_appended
        cmin_all = self._cmin.tolist()
        cmax_all = self._cmax.tolist()
        ctimes_all = self._ctimes.tolist()
        ca = self.coarse_appended
        ccount = max(0, min(cb, self.coarse_capacity - (ca - cb)))
        corder = [(cb - ccount + k) % self.coarse_capacity for k in range(ccount)]
        return RingSnapshot(
            fields=self.fields,
            times=tuple(times[s] for s in order),
            columns=cols,
            coarse_times=tuple(ctimes_all[s] for s in corder),
            coarse_min=tuple(tuple(cmin_all[s * n + i] for s in corder) for i in range(n)),
            coarse_max=tuple(tuple(cmax_all[s * n + i] for s in corder) for i in range(n)),
            appended=before,
            dropped=self.dropped,
        )
