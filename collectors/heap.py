"""Giving the C heap's free pages back to the OS, once a minute: a monitor left open all day should not hold
more than it uses.

Everything larger than pymalloc's 512-byte blocks (a chart's 600-point tuples rebuilt at each state, a screen
line's segments, a process table) comes from glibc's malloc, in one heap per thread. Freed, its pages stay in
the process: glibc gives back only the top of a heap, and the churn of a 2 Hz screen leaves free chunks
between live ones. In the Live screen the free part of those heaps grew from 0.4 MiB at one minute to 1.7 MiB
at nine (mallinfo2's fordblks, bench/live_rss_trend.py's creep), resident all the while. glibc's
malloc_trim(0) walks every heap and hands the whole free pages back (madvise DONTNEED): 0.6 MiB of the Live
screen's resident size at two minutes, for 0.1-0.2 ms of CPU a call on a 2-vCPU VM.

Only where the C library has malloc_trim (glibc); elsewhere (musl, macOS) `available` is False and nothing is
called. ctypes is loaded anyway on Linux (the NVML probe, pynvml).
"""

from __future__ import annotations

import time
from collections.abc import Callable

TRIM_EVERY_S = 60.0


def glibc_malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim(pad) -> 1 when memory was given back, 0 when none; None without glibc."""
    import ctypes  # noqa: PLC0415  (loaded already on Linux: nvml_collector's probe, pynvml)

    try:
        libc = ctypes.CDLL(None)  # this process's own symbols, its C library's among them
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


class HeapTrimmer:
    """`maybe_trim()` from a loop that already runs (the monitor's local tick): at most once every `every_s`
    seconds it calls malloc_trim(0); no thread of its own."""

    def __init__(
        self,
        every_s: float = TRIM_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        trim: Callable[[int], int] | None = None,
    ) -> None:
        self.every_s = every_s
        self._clock = clock
        self._trim = trim  # found at the first minute's call: nothing loaded before the first frame
        self._looked_up = trim is not None
        self._next = clock() + every_s
        self.calls = 0
        self.released = 0  # calls that gave memory back

    @property
    def available(self) -> bool:
        """Whether this C library can trim (looked up now if no minute has come yet)."""
        if not self._looked_up:
            self._trim, self._looked_up = glibc_malloc_trim(), True
        return self._trim is not None

    def maybe_trim(self) -> bool:
        """True when this call trimmed (its minute had come)."""
        now = self._clock()
        if now < self._next or not self.available:
            return False
        self._next = now + self.every_s
        self.calls += 1
        if self._trim(0):
            self.released += 1
        return True
