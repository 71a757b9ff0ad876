"""Time until headroom runs out (collectors/runway.py): fires on a growing series with the rate and the
process that grows; stays quiet on a flat noisy series, on a one-off drop and on a single wild sample."""

from __future__ import annotations

import random
from dataclasses import replace

from collectors.alerts import AlertOptions
from collectors.runway import falling_trend, theil_sen
from collectors.snapshots import ProcessInfo
from collectors.state import StateBuilder
from tests.collectors.builders import os_snapshot

GiB = 2**30
MiB = 2**20


def _train(rss: int) -> ProcessInfo:
    return ProcessInfo(4242, "python", "python train.py --epochs 3", "me", rss, None, False, start_ticks=7)


def _play(available: list[int], rss: list[int] | None = None, hz: float = 2.0, options=None):
    """Feed one OS sample per tick into the monitor's own StateBuilder; every alert raised, in order."""
    builder = StateBuilder(alert_options=options or AlertOptions())
    for i, free in enumerate(available):
        procs = (_train(rss[i]),) if rss is not None else ()
        builder.update_os(os_snapshot(1000.0 + i / hz, free, procs))
        builder.build(1000.0 + i / hz)
    return list(builder.alerts)


def _runway(alerts):
    return [a for a in alerts if a.kind == "headroom_runway"]


def test_growing_series_names_the_rate_the_process_and_the_time_left():
    # 20 MiB/s = 1.17 GiB/min taken by pid 4242, with ±40 MiB of jitter, from 10 GiB available, 2 samples/s
    rng = random.Random(19)
    n = 600  # 5 minutes: from 10 GiB to 4.1 GiB
    rss = [2 * GiB + 20 * MiB * i // 2 for i in range(n)]
    available = [10 * GiB - 20 * MiB * i // 2 + rng.randint(-40, 40) * MiB for i in range(n)]
    alerts = _runway(_play(available, rss))
    assert alerts, "a steady fall of 20 MiB/s toward the critical line must be announced"
    first = alerts[0]
    # the first alert once the 60 s window holds enough samples (RUNWAY_MIN_SPAN: half of it, 30 s in)
    assert 1030.0 <= first.t <= 1031.0
    assert first.pid == 4242
    assert first.message.startswith("at +1.1") or first.message.startswith("at +1.2")
    assert "GiB/min from pid 4242 python train.py --epochs, headroom is gone in about" in first.message
    # left / rate: (available - 2 GiB) / 20 MiB/s, within the jitter's effect on the fitted slope
    available_then = 10 * GiB - 20 * MiB * round((first.t - 1000.0) * 2) // 2
    expected_s = (available_then - 2 * GiB) / (20 * MiB)
    assert abs(first.value - expected_s) / expected_s < 0.15
    assert first.severity == "warning"  # over 2 minutes left
    # closer to the line it turns critical (under runway_critical_s = 120 s)
    assert any(a.severity == "critical" for a in alerts)


def test_flat_noisy_series_stays_quiet():
    # 10 GiB ± 600 MiB for 5 minutes, and a process whose RSS jitters as much: no trend, no alert
    rng = random.Random(7)
    n = 600
    available = [10 * GiB + rng.randint(-600, 600) * MiB for _ in range(n)]
    rss = [2 * GiB + rng.randint(-600, 600) * MiB for _ in range(n)]
    assert _runway(_play(available, rss)) == []


def test_a_one_off_drop_and_a_wild_sample_are_no_trend():
    step = [12 * GiB] * 40 + [9 * GiB] * 40  # something took 3 GiB once, then nothing moved
    assert _runway(_play(step)) == []
    wild = [10 * GiB] * 80
    wild[50] = 3 * GiB  # one sample misread
    assert _runway(_play(wild)) == []


def test_slow_fall_beyond_the_horizon_is_quiet_and_the_horizon_is_an_option():
    # 1 MiB/s from 40 GiB: 10 hours to the critical line, far beyond the 15 min default
    available = [40 * GiB - MiB * i // 2 for i in range(120)]
    assert _runway(_play(available)) == []
    # a 1 MiB/s fall over 30 s is 30 MiB: under runway_min_bytes (256 MiB), no trend whatever the horizon
    options = AlertOptions(runway_warning_s=1e9)
    assert _runway(_play(available, options=options)) == []
    options = AlertOptions(runway_warning_s=1e9, runway_min_bytes=16 * MiB)
    assert _runway(_play(available, options=options))


def test_theil_sen_ignores_outliers_and_the_checks_refuse_noise():
    line = [(float(t), 100.0 - 2.0 * t) for t in range(20)]
    line[3] = (3.0, 1e6)  # one wild point
    slope, intercept, falling = theil_sen(line)
    assert slope == -2.0 and intercept == 100.0
    assert falling > 0.85
    rng = random.Random(3)
    noise = [(float(t), rng.uniform(-1e9, 1e9)) for t in range(40)]
    assert falling_trend(noise, 20.0, 1) is None


def test_a_process_started_within_the_window_is_the_grower_it_is():
    """A server started mid-window that loads 2.8 GiB/min is named, not an older process growing slowly
    (a process absent from the window's first sample held nothing then)."""
    builder = StateBuilder(alert_options=AlertOptions())
    old = ProcessInfo(1491, "python", "python -m pytest", "me", 400 * MiB, None, False, start_ticks=3)
    alerts = []
    for i in range(240):  # 2 minutes at 2 Hz
        t = 1000.0 + i / 2
        growing_old = replace(old, rss=old.rss + i * MiB // 4)  # +0.03 GiB/min
        procs = [growing_old]
        if i >= 40:  # the server starts 20 s in and loads 25 MiB each tick (2.9 GiB/min)
            rss, new = (i - 40) * 25 * MiB, i == 40
            procs.append(ProcessInfo(1545, "python", "python grow.py", "me", rss, None, new, start_ticks=900))
        available = 8 * GiB - max(0, i - 40) * 25 * MiB
        builder.update_os(os_snapshot(t, available, tuple(procs)))
        builder.build(t)
    alerts = _runway(builder.alerts)
    assert alerts and all(a.pid == 1545 for a in alerts), [a.message for a in alerts]
    assert "from pid 1545 python grow.py" in alerts[0].message


def test_the_runway_median_is_the_statistics_modules():
    # runway.py takes its medians without importing statistics (issue 20): the same values, odd and even n
    import statistics  # noqa: PLC0415

    from collectors.runway import _median  # noqa: PLC0415

    rng = random.Random(20)
    for n in (1, 2, 3, 4, 7, 10, 101):
        values = [rng.uniform(-5e9, 5e9) for _ in range(n)]
        assert _median(values) == statistics.median(values)
        assert _median(iter(values)) == statistics.median(values)  # a generator, as theil_sen passes
    assert _median([3, 1, 2, 2]) == 2.0 and _median([5]) == 5
