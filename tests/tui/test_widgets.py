"""Widgets fed plain data: exact cells, exact figures, and no redraw when nothing changed."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text
from textual.app import App, ComposeResult

from tui.widgets.alert_log import AlertLog
from tui.widgets.bucket_bars import BucketBars, comparison_rows, stacked_bar
from tui.widgets.data import AlertRow, BucketComparison, HeadroomData, ProcessRow, Segment
from tui.widgets.fmt import GIB_UNIT, KIB_UNIT, MIB_UNIT, figure, signed_figure, size, split_cells, unit_for
from tui.widgets.headroom import HeadroomGauge, headroom_level
from tui.widgets.process_rows import filter_rows, sort_rows
from tui.widgets.process_table import ProcessTable

GIB = 2**30


def plain(renderable, width: int = 120) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_split_cells_is_proportional_and_exact():
    assert split_cells([50, 25, 25], 40, 100) == [20, 10, 10]
    # a small but present bucket still gets a cell; the total never exceeds the budget
    cells = split_cells([1, 99], 10, 100)
    assert cells[0] == 1 and sum(cells) == 10
    assert split_cells([10, 10], 20, 100) == [2, 2]  # 20% of the scale -> 4 of 20 cells
    assert split_cells([0, 0], 20, 0) == [0, 0]


def test_formatting_labels_units():
    assert size(3 * GIB // 2) == "1.50 GiB" and size(None) == "n/a"
    assert size(15_930_000) == "15.2 MiB" and size(640 * 1024) == "640 KiB"
    assert size(64) == "64 B" and size(128 * GIB) == "128 GiB"
    # one unit per table: the largest in which its largest figure reads at least 1
    assert unit_for([GIB // 2, 3 * GIB]) == GIB_UNIT and unit_for([16 * 2**20, 172 * 2**10]) == MIB_UNIT
    assert unit_for([512, None]) == KIB_UNIT and unit_for([None, 0]) == GIB_UNIT  # nothing to size it by
    # every figure carries at least three significant digits: two decimals from 1 on, none from 1,000 on
    mib = MIB_UNIT
    assert [figure(n, mib) for n in (16_700_000, 176_128, 1_836_000_000, 0, None)] == [
        "15.93", "0.168", "1,751", "0.00", "—"]  # fmt: skip
    assert figure(64, mib) == "<0.0001"  # not zero, and not written as one
    assert signed_figure(GIB // 2, GIB_UNIT, 2) == "+0.50" and signed_figure(-GIB, GIB_UNIT, 1) == "-1.0"
    assert signed_figure(0, GIB_UNIT, 2) == "±0.00" and signed_figure(-3 * 2**20, mib, 3) == "-3.000"


def test_a_tiny_models_table_is_in_mib_with_three_significant_digits():
    """Issue 21, item 5: a 16 MiB model read `weights 0.02 / 0.02 / ±0.00` and `KV cache 0.00` in a GiB table:
    measured against planned could not be checked. Its table now takes MiB (chosen by the model's rows, not
    the machine's), each figure with three significant digits, the difference at the figures' decimals."""
    weights, kv = 16_680_192, 172_032
    measured = (Segment("other", 1_836_000_000), Segment("weights", weights + 64), Segment("kv", kv),
                Segment("tensors", 356_000_000), Segment("activations", 5_452_595), Segment("gap", None),
                Segment("nonpytorch", None), Segment("free", 22 * GIB))  # fmt: skip
    planned = (Segment("other", 1_830_000_000), Segment("weights", weights), Segment("kv", kv),
               Segment("activations", 9_000_000), Segment("overhead", 0),
               Segment("free", 21 * GIB))  # fmt: skip
    data = BucketComparison("host", 24 * GIB, measured, planned, "tiny")
    table = plain(BucketBars(data)._table(data))
    lines = {line[2:19].strip(): line[20:].split() for line in table.splitlines()[1:]}
    assert table.splitlines()[0].split() == ["bucket", "measured", "MiB", "plan", "MiB", "diff", "MiB"]
    assert lines["weights"] == ["15.91", "15.91", "±0.00"]  # 64 B of buffers: below the figures' decimals
    assert lines["KV cache"] == ["0.164", "0.164", "±0.000"]
    assert lines["activations"] == ["5.20", "8.58", "-3.38"]
    assert lines["other procs / OS"] == ["1,751", "1,745", "+6"]
    assert lines["free headroom"] == ["22,528", "21,504", "+1,024"]


def test_measured_and_plan_bars_share_one_scale():
    measured = (Segment("weights", 40 * GIB), Segment("free", 40 * GIB))
    planned = (Segment("weights", 20 * GIB), Segment("free", 60 * GIB))
    m = stacked_bar(measured, 80, 80 * GIB)
    p = stacked_bar(planned, 80, 80 * GIB)
    assert m.cell_len == p.cell_len == 80
    # the weights span is 40 cells above and 20 below: same bytes per cell
    assert m.spans[0].end - m.spans[0].start == 40
    assert p.spans[0].end - p.spans[0].start == 20


def _comparison(gap: int = 2 * GIB) -> BucketComparison:
    measured = (
        Segment("other", 11 * GIB),
        Segment("weights", 15 * GIB),
        Segment("kv", 8 * GIB),
        Segment("tensors", 0),
        Segment("activations", GIB),
        Segment("gap", gap),
        Segment("nonpytorch", GIB),
        Segment("free", 60 * GIB),
    )
    planned = (
        Segment("other", 10 * GIB),
        Segment("weights", 15 * GIB),
        Segment("kv", 8 * GIB),
        Segment("activations", 2 * GIB),
        Segment("overhead", GIB + GIB // 2),
        Segment("free", 63 * GIB),
    )
    return BucketComparison("GPU 0", 100 * GIB, measured, planned, "plan label")


def test_comparison_rows_difference_per_bucket():
    rows = {key: (m, p, d) for key, m, p, d in comparison_rows(_comparison())}
    assert rows["other"] == (11 * GIB, 10 * GIB, GIB)
    assert rows["weights"][2] == 0
    assert rows["activations"][2] == -GIB
    # the plan's overhead is compared with gap + non-PyTorch together
    assert rows["overhead"] == (3 * GIB, GIB + GIB // 2, GIB + GIB // 2)
    assert rows["free"][2] == -3 * GIB


def test_headroom_levels_follow_thresholds():
    def data(free):
        return HeadroomData(free, 100 * GIB, "MemAvailable", 8 * GIB, 2 * GIB)

    assert headroom_level(data(50 * GIB)) == "ok"
    assert headroom_level(data(5 * GIB)) == "warning"
    assert headroom_level(data(GIB)) == "critical"
    assert headroom_level(data(None)) == "unknown"


def _procs() -> tuple[ProcessRow, ...]:
    return (
        ProcessRow(10, "python", "lab", 30 * GIB, 20 * GIB, GIB, False, False, "python serve.py"),
        ProcessRow(20, "chrome", "lab", 2 * GIB, None, 3 * GIB, True, True, "chrome"),
        ProcessRow(5, "Xorg", "root", GIB // 4, GIB // 8, 0, False, False, "/usr/lib/xorg/Xorg"),
        ProcessRow(7, "jupyter", "lab", GIB, None, None, True, False, "jupyter-lab"),
    )


def test_sort_and_filter_processes():
    rows = _procs()
    assert [r.pid for r in sort_rows(rows, "rss")] == [10, 20, 7, 5]
    assert [r.pid for r in sort_rows(rows, "gpu")] == [10, 5, 7, 20]  # unknown GPU bytes last, ties by pid
    assert [r.pid for r in sort_rows(rows, "growth")] == [20, 10, 5, 7]  # new (no growth yet) last
    assert [r.pid for r in sort_rows(rows, "pid")] == [5, 7, 10, 20]
    assert [r.pid for r in filter_rows(list(rows), "serve")] == [10]
    assert [r.pid for r in filter_rows(list(rows), "root")] == [5]


class WidgetApp(App):
    def compose(self) -> ComposeResult:
        yield BucketBars(id="bars")
        yield HeadroomGauge(id="gauge")
        yield ProcessTable(id="procs", max_rows=3)
        yield AlertLog(id="alerts")


async def test_widgets_redraw_only_on_change():
    app = WidgetApp()
    async with app.run_test(size=(120, 60)) as pilot:
        bars = app.query_one(BucketBars)
        assert bars.update_data(_comparison()) is True
        assert bars.update_data(_comparison()) is False  # equal value: no redraw
        await pilot.pause()
        text = plain(bars.render(), 120)
        assert "measured" in text and "plan" in text
        assert "11.00" in text and "10.00" in text and "+1.00" in text  # other: measured, plan, diff
        assert bars.update_data(_comparison(gap=3 * GIB)) is True

        table = app.query_one(ProcessTable)
        assert table.update_rows(_procs()) is True
        assert table.row_count == 3  # top 3 only
        before = table.rebuild_count
        assert table.update_rows(_procs()) is False
        assert table.rebuild_count == before
        flags = [table.get_row_at(i)[-1].plain for i in range(table.row_count)]
        assert flags == ["", "FAST", "NEW"]  # chrome grew fast, jupyter is new

        log = app.query_one(AlertLog)
        rows = (AlertRow("t+1.0s", "warning", "one"), AlertRow("t+2.0s", "critical", "two"))
        assert log.update_rows(rows) is True
        assert log.update_rows(rows) is False
        assert len(log.lines) == 2
        # a bounded history drops the oldest and adds one: only the new one is written
        log.update_rows((rows[1], AlertRow("t+3.0s", "warning", "three")))
        assert len(log.lines) == 3

        gauge = app.query_one(HeadroomGauge)
        gauge.update_data(HeadroomData(5 * GIB, 100 * GIB, "MemAvailable", 8 * GIB, 2 * GIB))
        await pilot.pause()
        rendered = gauge.render().plain
        assert "5.00 GiB of 100 GiB" in rendered and "WARNING" in rendered


class AlertLogApp(App):
    def compose(self) -> ComposeResult:
        yield AlertLog(id="alerts")


async def test_the_alert_log_keeps_its_lines_and_drawn_lines_bounded():
    """A day of alerts (the monitor keeps the last 50, the log goes on after the last it wrote): the log
    keeps MAX_LINES to scroll back through and its cache of drawn lines holds at most LINE_CACHE
    (Textual's RichLog, which it was, kept 1,024, each with caches of its own: issue 20)."""
    from tui.widgets.alert_log import LINE_CACHE, MAX_LINES  # noqa: PLC0415

    app = AlertLogApp()
    async with app.run_test(size=(60, 12)) as pilot:
        log = app.query_one(AlertLog)
        rows: tuple[AlertRow, ...] = ()
        for i in range(300):
            message = f"process {i} (python gen.py) grew 2.1 GiB in 30 s: now 14.2 GiB resident"
            rows = (*rows, AlertRow(f"t+{i}.0s", "warning", message))[-50:]
            if i % 5 == 4:  # five alerts a frame
                log.update_rows(rows)
                await pilot.pause()
        lines = [strip.text for strip in log.lines]
        drawn = len(log._line_cache)  # the cache render_line draws from
        await pilot.press("q")
    assert len(lines) == MAX_LINES == 200 and "process 299 " in "".join(lines[-3:])  # the newest, last
    assert "process 299 " not in "".join(lines[:-3])
    assert 0 < drawn <= LINE_CACHE


async def test_the_alert_log_wraps_its_lines_again_at_a_new_width():
    """Lines are wrapped when written; a resize writes them again at the new width (never past the box)."""
    app = AlertLogApp()
    message = "process 4242 (python gen.py) grew 2.1 GiB in 30 s: now 14.2 GiB resident, headroom 3.0 GiB"
    rows = tuple(AlertRow(f"t+{i}.0s", "warning", message) for i in range(3))
    async with app.run_test(size=(50, 12)) as pilot:
        log = app.query_one(AlertLog)
        log.update_rows(rows)
        await pilot.pause()
        narrow, narrow_width = [s.text for s in log.lines], log.scrollable_content_region.width
        await pilot.resize_terminal(78, 12)  # (the test console is 80 wide: lines are measured against it)
        await pilot.pause()
        wide, wide_width = [s.text for s in log.lines], log.scrollable_content_region.width
        await pilot.press("q")
    assert narrow_width < 50 < wide_width
    assert len(narrow) == 9 and all(len(line) <= narrow_width for line in narrow)  # each alert on three lines
    assert len(wide) == 6 and all(len(line) <= wide_width for line in wide)  # on two
    assert all(line.rstrip().endswith("headroom 3.0 GiB") for line in wide[1::2])


class ProcessTableApp(App):
    def compose(self) -> ComposeResult:
        yield ProcessTable(id="procs", max_rows=15)


async def test_the_process_table_keeps_no_stale_renders():
    """Figures change at every tick (Δ30s above all): each changed cell is rewritten in place, and every
    render DataTable caches is then stale (keyed by its update count). They were kept until its caches
    were full: 10,000 cells, 11.3 MiB (bench/process_table_memory.py). Now what one frame draws, at most."""
    from bench.process_table_memory import rows  # noqa: PLC0415  (the bench's 15 rows changing every tick)

    app = ProcessTableApp()
    async with app.run_test(size=(160, 48)) as pilot:
        table = app.query_one(ProcessTable)
        table.update_rows(rows(0))
        await pilot.pause()
        for tick in range(1, 40):
            assert table.update_rows(rows(tick))
            await pilot.pause()
        cached = len(table._cell_render_cache)  # DataTable's own caches, as Textual names them
        shown = [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]
        await pilot.press("q")
    assert table.rebuild_count == 1 and table.cell_updates >= 39 * 15
    assert 0 < cached <= (table.row_count + 1) * len(table.columns)  # one frame's, header too; 1,000+ before
    rss = f"{(30 * GIB + 39 * 2**26) / GIB:.2f}"
    assert shown[0][0] == "100" and rss in shown[0]  # the last figures are the ones drawn


def test_decimate_keeps_every_spike_and_the_newest_sample():
    from tui.widgets.gap_chart import decimate

    t = [float(i) for i in range(1000)]
    gap = [0.0] * 1000
    gap[501] = 7.0  # one tick of fragmentation among a thousand
    headroom = [10.0] * 1000
    headroom[333] = 1.0  # one dip
    times, (gap_points,) = decimate(t, (gap,), 64)
    assert len(times) == 64 and times[-1] == 999.0
    assert max(gap_points) == 7.0 and gap_points.count(7.0) == 1
    _, (headroom_points,) = decimate(t, (headroom,), 64, min)
    assert min(headroom_points) == 1.0
    short, (same,) = decimate(t[:10], (gap[:10],), 64)
    assert short == t[:10] and same == gap[:10]


def _ramp(n: int):
    """A chart series of n samples, one a second."""
    from tui.widgets.data import ChartSeries  # noqa: PLC0415

    t = tuple(float(i) for i in range(n))
    return ChartSeries(t=t, allocated=t, reserved=tuple(2 * v for v in t), gap=t)


def _one_widget_app(widget) -> App:
    """An app showing only `widget`."""

    class OneWidgetApp(App):
        def compose(self) -> ComposeResult:
            yield widget

    return OneWidgetApp()


def _chart_app(min_redraw_s: float) -> App:
    from tui.widgets.gap_chart import GapChart  # noqa: PLC0415

    return _one_widget_app(GapChart(min_redraw_s=min_redraw_s, id="chart"))


async def test_gap_chart_redraws_at_most_once_per_interval_and_never_drops_the_latest():
    import asyncio

    from tui.widgets.gap_chart import GapChart

    series = _ramp
    app = _chart_app(0.3)
    async with app.run_test(size=(80, 20)) as pilot:
        chart = app.query_one(GapChart)
        chart.update_data(series(3))
        drawn = chart.draw_count
        chart.update_data(series(4))
        chart.update_data(series(5))
        assert chart.draw_count == drawn  # both waited for the next slot
        await asyncio.sleep(0.5)
        await pilot.pause()
        assert chart.draw_count == drawn + 1  # one redraw, with the newest data
        assert chart.data == series(5)


def test_words_and_numbers_on_the_screens():
    """Issue 21, item 11: counts with thousands separators on the screens (the CLI wrote 8,192 while the
    Plan screen wrote `max 399648 users`), "1 user" not "1 users", a new process's growth not written "new"
    beside its NEW flag, and the run summary's scope not in parentheses inside parentheses."""
    from dataclasses import replace  # noqa: PLC0415

    from collectors.summary import Peak, RunSummary  # noqa: PLC0415
    from planner.budget import PlanInputs, make_plan  # noqa: PLC0415
    from tui.screens.live_buckets import plan_label  # noqa: PLC0415
    from tui.screens.run_summary import summary_lines  # noqa: PLC0415
    from tui.widgets.capacity_bars import _machine_lines  # noqa: PLC0415
    from tui.widgets.data import MachineBar  # noqa: PLC0415
    from tui.widgets.process_rows import row_cells  # noqa: PLC0415

    bar = MachineBar("h200", "H200", 140 * GIB, (Segment("weights", GIB),), True, 399_648, 92)
    assert "max users @ 92 ctx: 399,648" in plain(_machine_lines(bar, 120)[0])
    plan = make_plan(PlanInputs(model="llama-3.1-8b", context=32_768, users=1, machine="rtx4090"))
    assert plan.max_users == 1
    assert plan_label(plan).endswith("32,768 ctx × 1 user: fits, max 1 user")
    many = make_plan(replace(plan.inputs, context=8192, users=8))
    assert plan_label(many).endswith("8,192 ctx × 8 users: does NOT fit (max 6 users)")
    new = ProcessRow(7, "jupyter", "lab", GIB, None, None, True, False, "jupyter-lab")
    assert row_cells(new)[-2:] == ("—", "NEW")  # was ("new", "NEW")
    summary = RunSummary(0.0, 60.0, (Peak("weights", 2 * 2**20, 1.0),), None, None, "unknown", (), 0,
                         scope="this run's agents only (pid 4121)")  # fmt: skip
    (peak,) = [line for line in summary_lines(summary) if line.startswith("peak MiB")]
    assert peak == "peak MiB: weights 2.00 — this run's agents only (pid 4121)"


def runs_text(rows) -> Text:
    """GapChart's runs as one Rich Text, a line per row of runs (and an empty last line, as the ANSI text of
    the plotext canvas it once drew had)."""
    lines = []
    for runs in rows:
        line = Text()
        for chars, style in runs:
            line.append(chars, style)
        lines.append(line)
    lines.append(Text())
    return Text("\n").join(lines)


async def test_the_chart_picture_is_the_strips_textual_makes_of_its_text():
    """GapChart draws its runs as strips itself (issue 20: an ANSI text, its parse and Textual's Content were
    three quarters of a redraw); the strips are exactly those of Textual's own path for the same runs as a
    Rich Text: every character, style and offset, each row the widget's width (never wider: a picture wider
    than the widget once ran into the column beside it)."""
    import math  # noqa: PLC0415

    from textual.visual import Visual, visualize  # noqa: PLC0415

    from tui.widgets.data import ChartSeries  # noqa: PLC0415
    from tui.widgets.gap_chart import GapChart  # noqa: PLC0415

    n = 300
    t = tuple(i / 2 for i in range(n))
    data = ChartSeries(
        t=t,
        allocated=tuple(2e9 + 3e8 * math.sin(i / 20) for i in range(n)),
        reserved=tuple(3e9 + 1e8 * math.cos(i / 7) for i in range(n)),
        gap=tuple(1e9 + (5e8 if i == 150 else 0) for i in range(n)),
    )

    app = _one_widget_app(GapChart(id="chart"))
    async with app.run_test(size=(90, 30)) as pilot:
        chart = app.query_one(GapChart)
        chart.update_data(data)
        await pilot.pause()
        picture = chart._build()
        width, height = chart.content_size.width, chart.content_size.height
        ours = Visual.to_strips(chart, picture, width, height, chart.visual_style)
        textuals = Visual.to_strips(chart, visualize(chart, runs_text(picture.rows)), width, height,
                                    chart.visual_style)  # fmt: skip
        assert len(ours) == len(textuals) == height
        assert [list(s) for s in ours] == [list(s) for s in textuals]
        assert "PyTorch allocated / reserved / gap" in "".join(s.text for s in ours)
        assert [sum(len(chars) for chars, _ in runs) for runs in picture.rows] == [width] * height
        colors = {style.color.name for runs in picture.rows for _, style in runs if style is not None}
        assert colors == {"blue", "green", "red"}


async def test_the_gap_chart_redraws_with_the_tick_that_ends_its_interval():
    """A tick arriving a few ms before the interval ends redraws there (one screen update with the other
    widgets), not on a timer of its own just after it; with no tick, the timer still draws the latest."""
    import asyncio  # noqa: PLC0415

    from tui.widgets.gap_chart import REDRAW_SLACK_S, GapChart  # noqa: PLC0415

    series = _ramp
    app = _chart_app(0.4)
    async with app.run_test(size=(80, 20)) as pilot:
        chart = app.query_one(GapChart)
        chart.update_data(series(3))
        drawn = chart.draw_count
        chart.update_data(series(4))  # mid-interval: waits
        assert chart.draw_count == drawn and chart._pending is not None
        await asyncio.sleep(0.4 - REDRAW_SLACK_S / 2)
        chart.update_data(series(5))  # the tick just before the interval ends: drawn now, the timer stopped
        assert chart.draw_count == drawn + 1 and chart._pending is None
        await asyncio.sleep(0.6)
        await pilot.pause()
        assert chart.draw_count == drawn + 1  # no second draw from a timer


async def test_the_pool_panel_redraws_at_display_resolution_and_lays_out_only_for_a_new_height():
    """Its bytes move at every sample; a move below its figures' 0.1 GiB and the bar's cells redraws
    nothing, a new figure repaints it in place, and only a new line count lays the screen out again."""
    from dataclasses import replace  # noqa: PLC0415

    from tui.widgets.data import PoolData  # noqa: PLC0415
    from tui.widgets.pool_parts import PoolParts  # noqa: PLC0415

    def pool(free: int, lines: tuple[str, ...]) -> PoolData:
        parts = (Segment("processes", 4 * GIB), Segment("free", free))
        return PoolData("where the pool is: host memory, 16.0 GiB (MemTotal)", 16 * GIB, parts, lines)

    app = _one_widget_app(PoolParts(id="pool"))
    async with app.run_test(size=(100, 20)) as pilot:
        panel = app.query_one(PoolParts)
        first = pool(10 * GIB, ("▓ processes (anon) 4.0 · ░ free 10.0 GiB",))
        assert panel.update_data(first) is True
        await pilot.pause()
        assert panel.size.height == 3
        nudged = replace(first, parts=(first.parts[0], Segment("free", 10 * GIB + 2**20)))
        assert panel.update_data(nudged) is False and panel.data == nudged  # kept, not redrawn
        moved = pool(9 * GIB, ("▓ processes (anon) 4.0 · ░ free 9.0 GiB",))
        assert panel.update_data(moved) is True
        assert not panel._layout_required  # the same height: repainted in place
        await pilot.pause()
        longer = replace(moved, alert_lines=("kernel log: the NVIDIA driver could not get memory",))
        assert panel.update_data(longer) is True
        assert panel._layout_required  # a line more: laid out again
        await pilot.pause()
        assert panel.size.height == 4
