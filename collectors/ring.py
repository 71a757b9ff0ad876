"""Sample values and their time order.

Two kinds of "no number" are kept apart:
* unknown (`float("nan")`, or None at the API edge): the read failed or the source did not say;
* UNSUPPORTED: a NaN with its own payload bit pattern, for "the device answered NOT_SUPPORTED".
Both survive `array('d')`, `struct` and copying unchanged (they are never used in arithmetic).

A TimeGate keeps a source's samples in time order: one older than the last accepted is refused and counted,
never hidden. The history the screens draw is the last samples of each series (collectors/state.py); the day
of every source the monitor once kept beside it in a two-tier ring was never read, and grew its resident
memory by 1.8 MiB (1,914,016 bytes) for the OS and headroom and 1.1 MiB per agent device by the end of a
day (issue 20), so it is gone.
"""

from __future__ import annotations

import math
import struct

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
    """An API value (None = unknown) as a stored value (NaN: unknown)."""
    return UNKNOWN if value is None else float(value)


def to_int(x: float) -> int | None:
    """A stored value as bytes/count: None for unknown or unsupported."""
    return None if x != x else int(x)


class TimeGate:
    """A source's samples in time order, without keeping them: it accepts a sample no older than the last it
    accepted and counts the others (older, or a NaN time) in `dropped`."""

    __slots__ = ("_last_t", "dropped")

    def __init__(self) -> None:
        self._last_t = -math.inf
        self.dropped = 0

    def append(self, t: float) -> bool:
        if not t >= self._last_t:  # also refuses a NaN time
            self.dropped += 1
            return False
        self._last_t = t
        return True

    def copy(self) -> TimeGate:
        other = TimeGate()
        other._last_t, other.dropped = self._last_t, self.dropped
        return other
