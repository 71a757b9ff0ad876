"""alert_options reach Monitor and ReplayMonitor (through seeks, loops); severity is part of de-duplication"""

from __future__ import annotations

import time

from collectors.alerts import AlertOptions
from collectors.monitor import Monitor
from collectors.recorder import Recorder
from collectors.replay import ReplayMonitor
from tests.collectors.builders import os_snapshot

GiB = 2**30



def _record_falling_headroom(path) -> None:
    """No GPU in the recording, so headroom is MemAvailable: 20 GiB, then 10 GiB, then 3 GiB."""
    rec = Recorder(path, hz=1.0)
    for t, available in ((1000.0, 20 * GiB), (1001.0, 10 * GiB), (1002.0, 3 * GiB)):
        rec.os(os_snapshot(t, available))
    rec.close()


def _play_tick_by_tick(replay: ReplayMonitor) -> None:
    while not replay.at_end:
        replay.step()  # one recorded OS tick, one built state, as the live monitor builds them


def _headroom(state) -> list[tuple[float, str, int]]:
    return [(a.t, a.severity, int(a.value)) for a in state.alerts if a.kind == "headroom"]


def test_replayed_headroom_warning_then_critical_both_appear(tmp_path):
    path = tmp_path / "fall.jsonl"
    _record_falling_headroom(path)
    options = AlertOptions(headroom_warning_bytes=16 * GiB, headroom_critical_bytes=4 * GiB)
    replay = ReplayMonitor(path, alert_options=options)
    _play_tick_by_tick(replay)
    expected = [(1001.0, "warning", 10 * GiB), (1002.0, "critical", 3 * GiB)]
    assert _headroom(replay.state()) == expected
    # seeking back rebuilds the StateBuilder: the options must survive it (looping uses the same reset)
    replay.advance_to(0.0)
    assert _headroom(replay.state()) == []
    _play_tick_by_tick(replay)
    assert _headroom(replay.state()) == expected
    # the default thresholds (8 / 2 GiB) see only one warning in the same recording
    default = ReplayMonitor(path)
    _play_tick_by_tick(default)
    assert _headroom(default.state()) == [(1002.0, "warning", 3 * GiB)]


def test_replay_loop_keeps_alert_options(tmp_path):
    path = tmp_path / "fall.jsonl"
    _record_falling_headroom(path)
    options = AlertOptions(headroom_warning_bytes=16 * GiB, headroom_critical_bytes=4 * GiB)
    replay = ReplayMonitor(path, speed=50.0, loop=True, alert_options=options)
    first_builder = replay.builder
    replay.start()
    try:
        deadline = time.monotonic() + 5.0
        while replay.builder is first_builder and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        replay.stop()
    assert replay.builder is not first_builder, "the replay did not loop within 5 s"
    assert replay.builder.alert_options is options


def test_live_monitor_uses_alert_options_on_real_proc():
    # thresholds above any real machine's MemAvailable: this host's own /proc/meminfo must raise a critical
    huge = 2**62
    monitor = Monitor(alert_options=AlertOptions(headroom_warning_bytes=huge, headroom_critical_bytes=huge))
    state = monitor.sample_once()
    assert state.headroom_source == "MemAvailable"
    assert [a.severity for a in state.alerts if a.kind == "headroom"] == ["critical"]
    # the default thresholds judge the same real figure by their own 8 / 2 GiB (compared, not assumed)
    plain = Monitor().sample_once()
    h = plain.headroom_bytes
    expected = [] if h >= 8 * GiB else ["warning" if h >= 2 * GiB else "critical"]
    assert [a.severity for a in plain.alerts if a.kind == "headroom"] == expected
