"""Alerts firing from a replayed record: a recording written with the collectors' Recorder, played back by
ReplayMonitor (the same StateBuilder and alert rules as the live monitor), shown in the Live screen's log."""

from __future__ import annotations

import shutil
import threading
import time

from collectors.alerts import AlertOptions
from collectors.recorder import Recorder
from collectors.replay import ReplayMonitor
from collectors.snapshots import NVMLSnapshot, OSSnapshot, ProcessInfo
from tui.app import MemsightApp
from tui.widgets.alert_log import AlertLog
from tui.widgets.headroom import HeadroomGauge

GIB = 2**30
MIB = 2**20
T0 = 5_000.0


async def press_replay_jump(pilot, app, key: str) -> None:
    """Press `a` (next alert) or `p` (peak) and wait for the jump: it waits for the replay's scan of the whole
    recording, on a thread of its own, and the app's tick makes it (MemsightApp._jump_when_scanned)."""
    await pilot.press(key)
    deadline = time.monotonic() + 60
    while app._pending_jump is not None and time.monotonic() < deadline:
        await pilot.pause(0.05)
        app._tick()
    assert app._pending_jump is None, app.replay_note
    await pilot.pause()


def os_at(k: int) -> OSSnapshot:
    """Sample k (2 s apart): 'leaky' grows 120 MiB a sample (3.5 GiB in 30 s); 'loader' appears at k=10 with
    1.5 GiB; MemAvailable falls from 12 GiB to 1.5 GiB."""
    t = T0 + 2.0 * k
    procs = [
        ProcessInfo(
            777, "leaky", "python leaky.py", "lab", 512 * MIB + k * 240 * MIB, None, False, None, 4242
        ),
        ProcessInfo(1, "init", "/sbin/init", "root", 12 * MIB, 0, False, None, 1),
    ]
    if k >= 10:
        procs.append(
            ProcessInfo(888, "loader", "python load.py", "lab", 3 * GIB // 2, None, True, None, 9999)
        )
    available = 12 * GIB - k * (GIB // 2)
    return OSSnapshot(
        t, 32 * GIB, max(available, 3 * GIB // 2), 2 * GIB, 0, 0, 0, None, None, 0, tuple(procs)
    )


def write_recording(path) -> None:
    recorder = Recorder(path, hz=0.5)
    no_gpu = NVMLSnapshot(
        status="no NVML library: recorded on a machine without one", available=False, devices=()
    )
    recorder.nvml(no_gpu)
    for k in range(22):
        recorder.os(os_at(k))
    recorder.close()


async def test_alerts_fire_from_a_replayed_recording(tmp_path):
    path = tmp_path / "leak.jsonl"
    write_recording(path)
    monitor = ReplayMonitor(path)
    app = MemsightApp(
        monitor, source_label=f"replay: {monitor.describe()}", thresholds=AlertOptions(), manage_monitor=False
    )
    async with app.run_test(size=(160, 48)) as pilot:
        log = app.screen.query_one(AlertLog)
        for k in range(22):
            monitor.advance_to(2.0 * k)
            app.refresh_data()
            await pilot.pause()
        kinds = {a.kind for a in monitor.state().alerts}
        assert {"process_growth", "new_process", "headroom"} <= kinds
        written = " ".join(" ".join(line.text for line in log.lines).split())  # wrapped lines, rejoined
        for alert in monitor.state().alerts:
            assert " ".join(alert.message.split()) in written  # in full, never cut off
        assert len(log.shown) == len(monitor.state().alerts)
        gauge = app.screen.query_one(HeadroomGauge)
        assert gauge.data.headroom_bytes == 3 * GIB // 2 and "CRITICAL" in gauge.render().plain


async def test_thresholds_are_options(tmp_path):
    """The same recording with a growth threshold above what 'leaky' grew: no growth alert."""
    path = tmp_path / "leak.jsonl"
    write_recording(path)
    monitor = ReplayMonitor(path)
    options = AlertOptions(
        growth_bytes=10 * GIB, headroom_warning_bytes=GIB, headroom_critical_bytes=GIB // 2
    )
    app = MemsightApp(monitor, source_label="replay", thresholds=options, manage_monitor=False)
    async with app.run_test(size=(120, 36)) as pilot:
        for k in range(22):
            monitor.advance_to(2.0 * k)
            app.refresh_data()
            await pilot.pause()
        kinds = {a.kind for a in monitor.state().alerts}
        assert "process_growth" not in kinds and "headroom" not in kinds
        assert "new_process" in kinds


async def test_a_replay_ends_as_a_run_does_and_its_notes_follow_the_position(tmp_path):
    """Issue 21, item 10: a replay played to its end showed neither the "ended" banner nor the summary a live
    run shows when its command ends; "no alert after this point" stuck after seeking away; the recording's
    name was on two lines (the header and the status line)."""
    from textual.widgets import Static  # noqa: PLC0415

    from collectors.replay import bundled_recording  # noqa: PLC0415

    monitor = ReplayMonitor(bundled_recording("transformers"))
    label = f"replay: {monitor.describe()}"
    app = MemsightApp(monitor, source_label=label, manage_monitor=False)
    async with app.run_test(size=(160, 48)) as pilot:
        monitor.advance_to(monitor.duration_s / 2)
        app.refresh_data()
        await pilot.pause()
        assert app.live_view.banner == "" and app.live_view.summary == ()
        assert monitor.describe() not in app.live_view.status  # the header has it
        assert app.sub_title == label
        monitor.advance_to(monitor.duration_s + 1)
        assert monitor.at_end
        app.refresh_data()
        await pilot.pause()
        view = app.live_view
        banner = str(app.screen.query_one("#live-banner", Static).content)
        summary = str(app.screen.query_one("#live-summary", Static).content)
        assert banner.startswith("end of the recording: its last figures, ended at ")
        assert summary.startswith("run summary: ") and "peak " in summary
        assert all(c.title.endswith(view.ended) for c in view.comparisons) and view.ended
        await press_replay_jump(pilot, app, "a")  # no alert after the end
        assert "no alert after this point" in app.live_view.status
        await pilot.press("home")
        await pilot.pause()
        assert "no alert after this point" not in app.live_view.status
        assert app.live_view.banner == "" and not app.screen.query_one("#live-banner", Static).display
        await pilot.press("q")


class ScanHeldReplay(ReplayMonitor):
    """A replay whose scan walks only once the test sets scan_may_walk: the bundled recording's scan takes
    a fraction of a second, so on a fast machine it had ended before the first tick (CI, stop 31)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.scan_may_walk = threading.Event()

    def _scan_walk(self) -> None:
        if not self.scan_may_walk.wait(timeout=60):
            raise TimeoutError("the test never let the scan walk")
        super()._scan_walk()


async def test_the_jump_keys_wait_for_the_scan_without_freezing_the_screen(tmp_path):
    """`a` and `p` need the whole recording walked once (ReplayMonitor.scan): 12 s of CPU an hour recorded,
    minutes for a day's, which froze the screen at the first press. The walk now runs on a thread of its own:
    the status line says how far it has read, the replay goes on playing, and the jump comes when it is done;
    a seek of the user's own drops it; a recording that cannot be read again is said, not a crash."""
    from collectors.replay import bundled_recording  # noqa: PLC0415

    monitor = ScanHeldReplay(bundled_recording("manual"))
    app = MemsightApp(monitor, source_label="replay", manage_monitor=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("a")
        waiting = app.replay_note
        assert app._pending_jump == "alert" and monitor.offset_s == 0.0
        monitor.advance_to(5.0)  # the screen goes on meanwhile (the player thread's part here)
        app._tick()
        await pilot.pause()
        assert app._pending_jump == "alert" and monitor.offset_s == 5.0
        await pilot.press("right")  # the user's own seek: the jump that waited is dropped
        assert app._pending_jump is None
        monitor.scan_may_walk.set()
        await press_replay_jump(pilot, app, "p")
        peak = monitor.scan().peak("system_used")
        status = app.live_view.status
        await pilot.press("q")
    assert waiting.startswith("reading the recording for its alerts and peaks: ")
    assert waiting.endswith("; then to the next alert")
    assert monitor.offset_s == peak.t - monitor.start_t and "at the peak system used" in status

    copy = tmp_path / "gone.jsonl"
    shutil.copy(bundled_recording("manual"), copy)
    gone = ReplayMonitor(copy)
    copy.unlink()  # its reader holds the file open; the scan's walker opens it again
    app = MemsightApp(gone, source_label="replay", manage_monitor=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await press_replay_jump(pilot, app, "a")
        note = app.replay_note
        await pilot.press("q")
    assert note.startswith("cannot read the recording for its alerts and peaks: ") and "gone.jsonl" in note
    gone.close()
