"""The Live table's "other procs / OS" row (issue 23 item 9): by default the plan reserves the OS and other
processes' memory as measured now, so comparing the two compared a figure with itself and always read ±0.00.
The row now shows no difference there and says why; a reserve the user gives (--os-reserve-gib) is
compared."""

from __future__ import annotations

import pytest

from planner.budget import PlanInputs
from tests.tui.fixed_states import bare_state, gb10_state
from tests.tui.test_app import make_app, text_of
from tui.screens.live_buckets import RESERVE_MEASURED_NOTE
from tui.widgets.bucket_bars import BucketBars, comparison_rows

GIB = 2**30
INPUTS = PlanInputs(model="llama-3.2-1b", users=4)


def _other_line(bars) -> str:
    """The table row (the note above the table names the row too)."""
    (line,) = [x for x in text_of(bars).splitlines() if x.startswith("▒ other procs / OS ")]
    return line


@pytest.mark.parametrize("state_of", [gb10_state, bare_state])  # a GB10's unified pool; host RAM, no GPU
async def test_a_measured_reserve_is_not_compared_with_itself(state_of):
    app, _ = make_app(state_of(), plan_inputs=INPUTS)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        bars = app.screen.query(BucketBars).first()
        rows = {key: (m, p, d) for key, m, p, d in comparison_rows(bars.data)}
        measured, planned, diff = rows["other"]
        assert measured is not None and planned is not None and diff is None
        assert RESERVE_MEASURED_NOTE in bars.data.notes
        line = _other_line(bars)
        assert line.split()[-1] == "—" and "±" not in line
        await pilot.press("q")


@pytest.mark.parametrize("state_of", [gb10_state, bare_state])
async def test_a_given_reserve_is_compared_with_what_is_measured(state_of):
    app, _ = make_app(state_of(), plan_inputs=INPUTS, unified_os_reserve_bytes=3 * GIB)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        bars = app.screen.query(BucketBars).first()
        rows = {key: (m, p, d) for key, m, p, d in comparison_rows(bars.data)}
        measured, planned, diff = rows["other"]
        assert planned == 3 * GIB and diff == measured - 3 * GIB != 0
        assert RESERVE_MEASURED_NOTE not in bars.data.notes
        assert _other_line(bars).split()[-1] == f"{diff / GIB:+.2f}"
        await pilot.press("q")
