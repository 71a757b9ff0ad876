"""Snapshot tests of the main screens fed fixed recorded data (pytest-textual-snapshot's `snap_compare`).

Deterministic by construction: the monitor is a FixedMonitor over a fixed MonitorState (no clock, hostname or
live /proc). Update the stored SVGs with `pytest tests/tui/test_snapshots.py --snapshot-update` after looking
at the difference report.
"""

from __future__ import annotations

from tests.tui.fixed_states import FixedMonitor, bare_state, gb10_state
from tui.app import MemsightApp


def app_on(state) -> MemsightApp:
    return MemsightApp(FixedMonitor(state), source_label="fixed GB10 state (tests/tui/fixed_states.py)")


async def _lab_8_80(pilot) -> None:
    await pilot.press("3")
    await pilot.pause()
    pilot.app.screen.query_one("#lab-intensity").value = "8"
    pilot.app.screen.query_one("#lab-bandwidth").value = "80"
    await pilot.pause()
    await pilot.press("s")
    await pilot.pause()


def test_live_160x48(snap_compare):
    assert snap_compare(app_on(gb10_state()), terminal_size=(160, 48))


def test_live_80x24(snap_compare):
    assert snap_compare(app_on(gb10_state()), terminal_size=(80, 24))


def test_live_bare_machine(snap_compare):
    assert snap_compare(app_on(bare_state()), terminal_size=(120, 36))


def test_plan_160x48(snap_compare):
    assert snap_compare(app_on(gb10_state()), press=["2"], terminal_size=(160, 48))


def test_roofline_lab_8_80(snap_compare):
    assert snap_compare(app_on(gb10_state()), run_before=_lab_8_80, terminal_size=(160, 48))


def test_processes(snap_compare):
    assert snap_compare(app_on(gb10_state()), press=["4"], terminal_size=(120, 30))
