"""What a Live-screen tick costs the widgets (issue 20): the bucket bars redraw only the rows that changed,
the lines that did not change reused, with the strips Textual's own path (a Rich Group through RichVisual)
makes; plotext is imported only when the lab's roofline plot is drawn (the gap chart draws its own
braille)."""

from __future__ import annotations

from dataclasses import replace

from rich.console import Group
from textual.geometry import Region

from tests.tui.fixed_states import gb10_state
from tests.tui.test_snapshots import app_on
from tui.widgets.bucket_bars import BucketBars
from tui.widgets.data import Segment
from tui.widgets.lines import LinePicture


def _lines(widget) -> list[tuple]:
    widget._styles_cache.clear()
    widget.refresh()
    rendered = widget.render_lines(Region(0, 0, widget.size.width, widget.size.height))
    return [tuple((s.text, s.style) for s in strip) for strip in rendered]


async def test_bucket_bars_draw_as_a_group_would_and_redraw_only_the_changed_lines(monkeypatch):
    app = app_on(gb10_state())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        bars = app.screen.query_one(BucketBars)
        picture = bars.render()
        assert isinstance(picture, LinePicture) and len(picture.lines) >= 10
        drawn = _lines(bars)
        new_render = BucketBars.render
        monkeypatch.setattr(BucketBars, "render", lambda self: Group(*new_render(self).lines))
        assert _lines(bars) == drawn  # the same strips as the Group of the same lines through RichVisual
        monkeypatch.setattr(BucketBars, "render", new_render)
        _lines(bars)
        before = dict(bars._lines.strips)
        data = bars.data
        first = data.measured[0]
        grown = Segment(first.key, (first.bytes or 0) + 3 * 2**30)
        changed = replace(data, measured=(grown, *data.measured[1:]))
        assert bars.update_data(changed)
        # only the rows whose line changed are marked for redrawing (Textual composites those alone)
        dirty = bars._styles_cache._dirty_lines
        assert 0 < len(dirty) < len(picture.lines) // 2  # the scale, the two bars and a table row
        _lines(bars)
        after = bars._lines.strips
        kept = [key for key in after if key in before]
        assert kept and all(after[key] is before[key] for key in kept)  # not drawn again: the same strips
        assert 0 < len(after) - len(kept) < len(after) // 2  # the changed lines only


PLOTEXT_ON_DEMAND = """
import asyncio, sys
from tests.tui.fixed_states import gb10_state
from tests.tui.test_snapshots import _lab_8_80, app_on
from tui.widgets.gap_chart import GapChart

async def main():
    app = app_on(gb10_state())
    async with app.run_test(size=(160, 48)) as pilot:  # the Live screen's chart drawn, with its data
        await pilot.pause()
        live = "plotext" in sys.modules
        assert "PyTorch allocated" in app.screen.query_one(GapChart).render().plain
        await _lab_8_80(pilot)  # the lab's roofline plot
        await pilot.pause()
        roofline = "plotext" in sys.modules
    print(live, roofline)

asyncio.run(main())
"""


def _printed_by_a_fresh_interpreter(script: str) -> list[str]:
    """What `script` prints, run in an interpreter of its own (its sys.modules untouched by other tests)."""
    import pathlib  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    repo = pathlib.Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", script], cwd=repo, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


def test_plotext_is_imported_by_the_roofline_plot_and_never_by_the_live_screens_chart():
    assert _printed_by_a_fresh_interpreter(PLOTEXT_ON_DEMAND) == ["False", "True"]


async def test_the_line_naming_what_is_below_the_fold_matches_no_selector_against_the_screen(monkeypatch):
    # it runs after every tick: DOM queries matched each section's selector against every node of the screen
    # (by cProfile a fifth of the main thread); the screen holds its sections since it mounted them
    import textual.css.query  # noqa: PLC0415

    app = app_on(gb10_state())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.pause(0.2)
        matched = []
        match = textual.css.query.match
        monkeypatch.setattr(textual.css.query, "match", lambda *args: matched.append(args) or match(*args))
        assert app.screen.sections_below() == ["processes", "alerts (3)"]
        assert matched == []


AGENTS_TABLE_ON_DEMAND = """
import asyncio, sys
from tests.tui.fixed_states import bare_state, gb10_state
from tests.tui.test_snapshots import app_on

async def main():
    app = app_on(bare_state())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        before = "textual.widgets._data_table" in sys.modules
        app.monitor.current = gb10_state()  # an agent shows: its table mounted under the note, over the chart
        app.refresh_data()
        await pilot.pause()
        left = [child.id for child in app.screen.query_one("#live-left").children]
        at = left.index("agents")
        table = app.screen.query_one("#agents")
        after = "textual.widgets._data_table" in sys.modules
        print(before, left[at - 1], left[at + 1], table.display, table.row_count, after)

asyncio.run(main())
"""


def test_the_agents_table_mounts_when_an_agent_shows_and_brings_no_datatable():
    # Textual's DataTable is 0.37 MiB of modules, plus render caches, for a few rows nobody selects; the
    # Processes screen (4) still imports it, the Live screen never does
    printed = _printed_by_a_fresh_interpreter(AGENTS_TABLE_ON_DEMAND)
    assert printed == ["False", "agents-missing", "gap-chart", "True", "1", "False"]


async def test_the_plans_kept_stay_few_while_this_machine_changes_every_resample():
    """"This machine" is sampled again every THIS_MACHINE_RESAMPLE_S with what is in use now, a new machine
    and a new plan each time: the memo keeps the PLAN_MEMO_SIZE used last (it kept up to 256, cleared only
    when full: the Live screen's resident memory grew on a machine whose processes came and went), and the
    Live screen plans the machine as sampled last."""
    from tui.app import PLAN_MEMO_SIZE  # noqa: PLC0415
    from tui.screens.live_buckets import THIS_MACHINE_RESAMPLE_S  # noqa: PLC0415

    state = gb10_state()
    app = app_on(state)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        for i in range(1, 3 * PLAN_MEMO_SIZE):  # another 64 MiB in use at each re-sample
            os_snap = replace(state.os, t=state.os.t + i * THIS_MACHINE_RESAMPLE_S,
                              mem_available=state.os.mem_available - i * 64 * 2**20)  # fmt: skip
            app.monitor.current = replace(state, t=state.t + i * THIS_MACHINE_RESAMPLE_S, os=os_snap)
            app.refresh_data()
        await pilot.pause()
        kept = len(app._plan_memo)
        planned = [plan.machine for plan in app._plan_result.live_plans.values()]
        this = app._this
        await pilot.press("q")
    assert 0 < kept <= PLAN_MEMO_SIZE
    assert planned and all(m.os_reserve_bytes == this.os_reserve_bytes for m in planned)
    assert this.os_reserve_bytes > (3 * PLAN_MEMO_SIZE - 2) * 64 * 2**20  # the last sample's reserve
