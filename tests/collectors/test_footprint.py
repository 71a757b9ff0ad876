"""What the Live screen's process keeps resident (issue 20): no pynvml where NVML's library cannot load, and
history rings that hold only what was sampled, with the same values out as fixed preallocated storage."""

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


def _reference(samples, capacity, coarse_capacity, step):
    """What a ring of these sizes must give back, computed the plain way: the newest `capacity` samples, and
    per closed `step`-second window the min and max of each field (NaN where the window had none)."""
    fine = samples[-capacity:]
    windows: list[tuple[float, list[list[float]]]] = []
    for t, row in samples:
        start = t - t % step
        if not windows or windows[-1][0] != start:
            windows.append((start, [[] for _ in row]))
        for i, v in enumerate(row):
            if v == v:
                windows[-1][1][i].append(v)
    closed = windows[:-1][-coarse_capacity:]  # the newest window is still being filled
    nan = float("nan")
    return (
        tuple(t for t, _ in fine),
        [tuple(row[i] for _, row in fine) for i in range(2)],
        tuple(start for start, _ in closed),
        [tuple(min(c[i]) if c[i] else nan for _, c in closed) for i in range(2)],
        [tuple(max(c[i]) if c[i] else nan for _, c in closed) for i in range(2)],
    )


def _same(a, b) -> bool:  # NaN-aware equality of float tuples (a NaN's payload kept: compare bits)
    import struct

    bits = lambda xs: [struct.pack("<d", x) for x in xs]  # noqa: E731
    return bits(a) == bits(b)


@pytest.mark.parametrize("count", [0, 1, 7, 40, 41, 200])
def test_a_ring_gives_the_same_values_while_filling_and_once_full(count):
    from collectors.ring import UNSUPPORTED, Ring

    capacity, coarse_capacity, step = 40, 6, 10.0
    ring = Ring("x", ("a", "b"), capacity=capacity, coarse_capacity=coarse_capacity, coarse_step_s=step)
    samples = []
    for k in range(count):
        t = 3.0 + 1.5 * k
        a = float("nan") if k % 11 == 3 else float((k * 37) % 101)
        b = UNSUPPORTED if k % 13 == 5 else float(2**40 + k)  # bytes past float32's exact range
        assert ring.append(t, (a, b))
        samples.append((t, (a, b)))
    snap = ring.snapshot()
    times, columns, ctimes, cmin, cmax = _reference(samples, capacity, coarse_capacity, step)
    assert snap.times == times and snap.coarse_times == ctimes
    assert all(_same(got, want) for got, want in zip(snap.columns, columns, strict=True))
    assert all(_same(got, want) for got, want in zip(snap.coarse_min, cmin, strict=True))
    assert all(_same(got, want) for got, want in zip(snap.coarse_max, cmax, strict=True))
    assert _same(ring.snapshot(last=5).columns[1], columns[1][-5:])
    assert _same(ring.copy().snapshot().columns[0], columns[0])


def test_a_ring_holds_what_it_was_given_and_never_more_than_its_bound():
    from collectors.ring import Ring

    ring = Ring("os", tuple(f"f{i}" for i in range(9)))
    assert ring.held_bytes <= 16 * 9  # an empty ring holds only its running min/max
    for i in range(120):  # a minute at 2 Hz
        ring.append(i * 0.5, [1.0] * 9)
    # 120 fine entries and 5 closed coarse windows (of 10 s): under 1% of a full ring's 1.6 MB
    assert ring.held_bytes == 8 * 120 * 10 + 8 * 5 * 19 + 16 * 9
    for i in range(120, 40_000):  # past a day (100,000 s): both tiers full, then overwritten
        ring.append(i * 2.5, [1.0] * 9)
    assert ring.held_bytes == ring.nbytes == Ring.bytes_for(9)

