"""What the Live screen's process keeps resident (issue 20): no pynvml where NVML's library cannot load, and
a state builder whose memory does not grow with the samples once its chart history is full."""

from __future__ import annotations

import sys

import pytest

import collectors.nvml_collector as nvml_collector
from collectors.nvml_collector import LIBRARY_NOT_FOUND, NVMLCollector, describe_error


def test_no_nvml_library_gives_pynvmls_status_without_importing_pynvml(monkeypatch):
    monkeypatch.setattr(nvml_collector, "NVML_LIBRARY", "libmemsight-no-such-nvml.so.1")
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    collector = NVMLCollector()
    assert "pynvml" not in sys.modules
    snap = collector.sample()
    assert not snap.available and not collector.active
    said = "no NVML library: NVMLError_LibraryNotFound (code 12): NVML Shared Library Not Found"
    assert snap.status == said


def test_the_probes_words_are_pynvmls_own():
    pynvml = pytest.importorskip("pynvml")
    assert describe_error(pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)) == LIBRARY_NOT_FOUND


def test_a_library_that_loads_goes_on_to_pynvml(monkeypatch):
    # a shared library every Linux has stands in for NVML's: the probe passes, so pynvml is imported and its
    # own load decides (on this GPU-less machine it fails the same way; with a GPU it initialises)
    pytest.importorskip("pynvml")
    monkeypatch.setattr(nvml_collector, "NVML_LIBRARY", "libc.so.6")
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    collector = NVMLCollector()
    assert "pynvml" in sys.modules
    assert collector.status == "ok" or collector.status.startswith(("no NVML library", "NVML init failed"))


def test_the_builders_memory_stops_growing_once_its_chart_history_is_full():
    """A day of the live monitor is a day of samples: past the chart's history_points and the alert window,
    what the builder holds must not grow (a day of each source in a ring once grew it 1.8 MiB a day)."""
    import gc  # noqa: PLC0415
    import tracemalloc  # noqa: PLC0415
    from dataclasses import replace  # noqa: PLC0415

    from collectors.state import StateBuilder  # noqa: PLC0415
    from tests.collectors.builders import os_snapshot  # noqa: PLC0415

    builder = StateBuilder(history_points=600, alert_window_s=60.0)
    base = os_snapshot(0.0, 20 * 2**30)

    def run(start: int, stop: int) -> None:
        for k in range(start, stop):  # 2 Hz, the headroom moving a little at every sample
            builder.update_os(replace(base, t=k / 2, mem_available=base.mem_available - k % 7 * 4096))
            builder.build(k / 2)

    tracemalloc.start()  # from the first sample: what replaces an older value is then no growth
    try:
        run(0, 1_000)  # the chart's 600 points and the minute of states (120) are full from here
        gc.collect()  # what is reachable: a collection yet to come made 0.1 MiB of difference either way
        before = tracemalloc.get_traced_memory()[0]
        run(1_000, 4_000)  # 3,000 samples more: 25 minutes at 2 Hz (648 bytes grown when measured)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert builder.state.history["available"][0][-1] == 3_999 / 2
    # one 8-byte value kept a sample would be 24 KB here; a ring kept 10 floats a sample, 240 KB
    assert grown < 16 * 1024, grown
