"""The monitor gives its C heap's free pages back to the OS once a minute (collectors/heap.py): a Live
screen left open all day held the free chunks its 2 Hz churn left in glibc's heaps
(bench/live_rss_trend.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

from collectors.heap import HeapTrimmer, glibc_malloc_trim
from collectors.monitor import Monitor

needs_glibc = pytest.mark.skipif(
    sys.platform != "linux" or glibc_malloc_trim() is None,
    reason="malloc_trim is glibc's: this C library has none",
)


class CountingTrim:
    def __init__(self, gives_back: bool = True) -> None:
        self.pads: list[int] = []
        self.gives_back = gives_back

    def __call__(self, pad: int) -> int:
        self.pads.append(pad)
        return int(self.gives_back)


def test_trims_once_a_minute_at_most():
    now = [1000.0]
    trim = CountingTrim()
    heap = HeapTrimmer(clock=lambda: now[0], trim=trim)
    assert heap.maybe_trim() is False  # its first minute has not come
    now[0] += 59.9
    assert heap.maybe_trim() is False and trim.pads == []
    now[0] += 0.1
    assert heap.maybe_trim() is True and trim.pads == [0]
    now[0] += 30.0
    assert heap.maybe_trim() is False
    now[0] += 30.0
    assert heap.maybe_trim() is True and trim.pads == [0, 0]
    assert (heap.calls, heap.released) == (2, 2)


def test_a_trim_that_gave_nothing_back_is_counted_apart():
    now = [0.0]
    heap = HeapTrimmer(every_s=1.0, clock=lambda: now[0], trim=CountingTrim(gives_back=False))
    now[0] = 1.0
    assert heap.maybe_trim() is True
    assert (heap.calls, heap.released) == (1, 0)


@needs_glibc
def test_freed_heap_pages_go_back_to_the_os():
    """300 chunks of 100 kB (glibc's heap, below its mmap threshold), each followed by one of the same size
    that stays (a smaller one fits in older holes of the heap instead): freed, they cannot merge into the
    heap's top, so glibc keeps their 30 MB resident; the trimmer's call gives their pages back. In a fresh
    process, so that the figure is this test's alone."""
    script = textwrap.dedent("""
        import json, psutil
        from collectors.heap import HeapTrimmer
        rss = lambda: psutil.Process().memory_info().rss
        now = [0.0]
        heap = HeapTrimmer(clock=lambda: now[0])
        chunks, pin = [], []
        for _ in range(300):
            chunks.append(b"x" * 100_000)
            pin.append(b"y" * 100_000)  # live between the chunks: freed, they stay holes in the heap
        held = rss()
        del chunks
        freed = rss()
        now[0] = 60.0
        trimmed = heap.maybe_trim()
        print(json.dumps({"held": held, "freed": freed, "after": rss(), "trimmed": trimmed,
                          "released": heap.released, "pin": len(pin)}))
    """)
    command = [sys.executable, "-c", script]
    out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=60)
    got = json.loads(out.stdout)
    mb = 1_000_000
    assert got["freed"] > got["held"] - 5 * mb  # free() alone left them resident
    assert got["trimmed"] is True and got["released"] == 1
    assert got["after"] < got["freed"] - 25 * mb  # 30 MB of pages given back


def test_the_monitors_local_tick_trims(tmp_path):
    """Monitor._tick_local calls its trimmer after each build; the minute is the trimmer's."""
    trim = CountingTrim()
    monitor = Monitor(hz=20, agent_dir=str(tmp_path))
    monitor.heap = HeapTrimmer(every_s=0.05, trim=trim)
    monitor.start()
    try:
        deadline = time.monotonic() + 30
        while len(trim.pads) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        monitor.stop()
    assert len(trim.pads) >= 2 and monitor.heap.calls == len(trim.pads)
