"""Time until headroom runs out: a robust trend of headroom over the last minute, and who grows.

The trend is the Theil–Sen slope (the median of the slopes between every pair of samples), which a few wild
samples cannot drag, with two checks before it is believed:
* direction: at least RUNWAY_AGREEMENT of the pairwise slopes fall (a flat series that only jitters has about
  half of them falling, half rising, whatever the size of the jitter);
* size: the fall over the window is above the series' own noise (RUNWAY_NOISE_FACTOR times the median
  absolute deviation of the residuals about the trend) and above AlertOptions.runway_min_bytes.
Then the time left is (headroom − the critical threshold) / the rate; an alert when it is under
runway_warning_s (10 min: ten windows of AlertOptions.runway_window_s, 60 s; critical under runway_critical_s,
2 min), naming the rate and the process whose resident plus GPU memory grew most over the same window.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from collectors.snapshots import Alert, MonitorState, held_bytes

if TYPE_CHECKING:
    from collectors.alerts import AlertOptions

GiB = 2**30
RUNWAY_MIN_POINTS = 6  # fewer samples than this in the window: no trend
RUNWAY_MIN_SPAN = 0.5  # ... nor when they cover less than this share of the window
RUNWAY_MAX_POINTS = 40  # the pairwise slopes are O(n²): an evenly thinned series beyond this
RUNWAY_AGREEMENT = 0.75  # share of the pairwise slopes that must fall
RUNWAY_NOISE_FACTOR = 4.0  # the fall must exceed this many MADs of the residuals


def _median(values: Iterable[float]) -> float:
    """statistics.median's value (the middle one; of two, their mean), without importing the statistics
    module, which the monitor would hold for this alone (issue 20: the Live screen's resident memory)."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median of no values")
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def theil_sen(points: Sequence[tuple[float, float]]) -> tuple[float, float, float]:
    """(slope, intercept, share of pairwise slopes that are negative) of (t, y) points; slope in y per t."""
    slopes = []
    for i, (t0, y0) in enumerate(points):
        for t1, y1 in points[i + 1 :]:
            if t1 != t0:
                slopes.append((y1 - y0) / (t1 - t0))
    if not slopes:
        return 0.0, points[0][1] if points else 0.0, 0.0
    slope = _median(slopes)
    intercept = _median(y - slope * t for t, y in points)
    falling = sum(1 for s in slopes if s < 0) / len(slopes)
    return slope, intercept, falling


def _samples(history: Sequence[MonitorState], window_s: float) -> list[tuple[float, float]]:
    """(t, headroom) once per new OS or NVML snapshot within the window (the builder builds more often than
    the sources sample: repeated builds of one sample are not more evidence)."""
    now = history[-1]
    seen: set = set()
    out = []
    for s in history:
        if s.headroom_bytes is None or now.t - s.t > window_s:
            continue
        key = (s.os.t if s.os is not None else None, s.nvml.t)
        if key in seen:
            continue
        seen.add(key)
        out.append((s.t, float(s.headroom_bytes)))
    if len(out) > RUNWAY_MAX_POINTS:
        step = len(out) / RUNWAY_MAX_POINTS
        out = [out[int(i * step)] for i in range(RUNWAY_MAX_POINTS - 1)] + [out[-1]]
    return out


def falling_trend(points: Sequence[tuple[float, float]], window_s: float, min_bytes: int) -> float | None:
    """The rate (bytes/s, > 0) at which headroom falls, when the series shows a real fall; else None."""
    if len(points) < RUNWAY_MIN_POINTS or points[-1][0] - points[0][0] < RUNWAY_MIN_SPAN * window_s:
        return None
    slope, intercept, falling = theil_sen(points)
    if slope >= 0 or falling < RUNWAY_AGREEMENT:
        return None
    residuals = [y - (slope * t + intercept) for t, y in points]
    mad = _median(abs(r - _median(residuals)) for r in residuals)
    fall = -slope * (points[-1][0] - points[0][0])
    if fall < max(RUNWAY_NOISE_FACTOR * mad, min_bytes):
        return None
    return -slope


def _grower(history: Sequence[MonitorState], window_s: float) -> tuple[object, float] | None:
    """(the process whose RSS + GPU bytes grew most within the window, its growth in bytes/s)."""
    now = history[-1]
    base = next((s for s in history if s.os is not None and now.t - s.t <= window_s), None)
    if now.os is None or base is None or base is now or now.t <= base.t:
        return None
    before = base.bytes_by_process()
    best = None
    for p in now.os.processes:
        # a process absent from the window's first sample was started within it (a server loading its
        # model: the likeliest grower of all): it held nothing then, so all it holds now is growth
        held_before = before.get((p.pid, p.start_ticks), 0)
        grown = held_bytes(p) - held_before
        if grown > 0 and (best is None or grown > best[1]):
            best = (p, grown)
    return None if best is None else (best[0], best[1] / (now.t - base.t))


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def headroom_runway(history: Sequence[MonitorState], o: AlertOptions) -> list[Alert]:
    """ "at +1.2 GiB/min from pid 4242 python train.py, headroom is gone in about 6 min" (see the module)."""
    now = history[-1]
    if now.headroom_bytes is None:
        return []
    left = now.headroom_bytes - o.headroom_critical_bytes
    if left <= 0:
        return []  # already under the critical line: the headroom rule says so
    window = o.runway_window_s
    rate = falling_trend(_samples(history, window), window, o.runway_min_bytes)
    if rate is None:
        return []
    seconds = left / rate
    if seconds > o.runway_warning_s:
        return []
    per_min = rate * 60 / GiB
    grower = _grower(history, window)
    if grower is None:
        source = " (no process grew: page cache, the kernel or the driver)"
    elif grower[1] >= 0.5 * rate:
        source = f" from pid {grower[0].pid} {grower[0].label}"
    else:
        source = f" (largest grower pid {grower[0].pid} {grower[0].label}: +{grower[1] * 60 / GiB:.2f}/min)"
    return [
        Alert(
            now.t,
            "headroom_runway",
            "critical" if seconds < o.runway_critical_s else "warning",
            f"at +{per_min:.2f} GiB/min{source}, headroom is gone in about {_minutes(seconds)} "
            f"({left / GiB:.2f} GiB above the {o.headroom_critical_bytes / GiB:.2f} GiB critical line, "
            f"{now.headroom_source})",
            pid=grower[0].pid if grower is not None else None,
            value=seconds,
        )
    ]
