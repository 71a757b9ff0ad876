"""The real app driven with App.run_test() and a Pilot, fed fixed MonitorStates (no clock, no live /proc)."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from rich.console import Console
from textual.widgets import DataTable, Input, Select, Static

from planner.budget import PlanInputs, make_plan
from planner.machines import MACHINES
from tests.tui.fixed_states import KV, WEIGHTS, FixedMonitor, bare_state, gb10_state
from tui.app import MemsightApp, inputs_from_fields
from tui.options import parse_count
from tui.screens.help import HelpScreen
from tui.screens.live import LiveScreen
from tui.screens.plan import PlanScreen
from tui.screens.processes import ProcessesScreen
from tui.screens.roofline import RooflineScreen
from tui.widgets.bucket_bars import BucketBars
from tui.widgets.capacity_bars import CapacityBars
from tui.widgets.gap_chart import GapChart
from tui.widgets.process_summary import ProcessSummary
from tui.widgets.process_table import ProcessTable

GIB = 2**30
SIZES = [(80, 24), (160, 48), (200, 60)]


def text_of(widget) -> str:
    """What a widget shows, as plain text (a Static's content, or what a widget's render() returns)."""
    renderable = widget.content if isinstance(widget, Static) else widget.render()
    if isinstance(renderable, str):
        return renderable
    console = Console(width=max(widget.size.width, 40), record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def static_text(app, selector: str) -> str:
    return text_of(app.screen.query_one(selector, Static))


def make_app(state=None, **kwargs) -> tuple[MemsightApp, FixedMonitor]:
    monitor = FixedMonitor(state or gb10_state())
    return MemsightApp(monitor, source_label="fixed test state", **kwargs), monitor


async def test_each_screen_and_binding():
    app, monitor = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, LiveScreen)
        assert monitor.started == 1
        chart = app.screen.query_one(GapChart)
        await pilot.press("g")
        assert chart.display is False
        await pilot.press("g")
        assert chart.display is True
        for key, screen_type in (
            ("2", PlanScreen),
            ("3", RooflineScreen),
            ("4", ProcessesScreen),
            ("1", LiveScreen),
        ):
            await pilot.press(key)
            await pilot.pause()
            assert isinstance(app.screen, screen_type), key
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        help_text = text_of(app.screen.query_one("#help-text"))
        for words in (
            "Live",
            "Plan",
            "Roofline",
            "Processes",
            "Reset",
            "Step",
            "Play/Pause",
            "Sort",
            "Filter",
        ):
            assert words in help_text
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, LiveScreen)
        await pilot.press("q")
        await pilot.pause()
    assert monitor.stopped == 1


async def test_live_screen_shows_measured_over_the_plan():
    app, _ = make_app()
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        bars = app.screen.query(BucketBars).first()
        data = bars.data
        assert data.title.startswith("NVIDIA GB10")
        assert data.measured_bytes("weights") == WEIGHTS
        assert data.measured_bytes("kv") == KV
        state = gb10_state()
        assert data.measured_bytes("free") == state.os.mem_available
        # the plan bar is the planner's plan for the same inputs on this pool; its OS reserve is the measured
        # "other" (MemTotal - MemAvailable - what the agent's process holds), the same figure as the bar above
        plan = app._plan_result.live_plans["unified"]
        assert data.planned_bytes("weights") == plan.weight_bytes
        assert data.planned_bytes("kv") == plan.kv_bytes == 8 * 8192 * 131_072
        assert data.planned_bytes("other") == data.measured_bytes("other") == plan.os_reserve_bytes
        assert 0 < plan.os_reserve_bytes < state.os.mem_total - state.os.mem_available
        shown = text_of(bars)
        assert f"{WEIGHTS / GIB:.2f}" in shown and f"{plan.weight_bytes / GIB:.2f}" in shown
        status = static_text(app, "#live-status")
        assert "NVIDIA GB10" in status and "1 agent(s)" in status
        # process table: chrome grew 2.54 GiB in 30 s (> 2 GiB): marked FAST; jupyter is NEW
        top = app.screen.query_one("#top-processes", ProcessSummary)
        flags = {cells[1]: cells[-1] for cells in top.shown}
        # named by their command lines, paths cut to their last part
        assert flags["chrome"] == "FAST" and flags["Xorg"] == ""
        assert flags["jupyter-lab --no-browser"] == "NEW"
        # largest resident first; the agent's process is the experiment's own: marked ●
        assert [cells[1] for cells in top.shown][:2] == ["● python serve.py --model", "chrome"]
        assert "FAST" in text_of(top)


async def test_only_new_states_are_rebuilt():
    app, monitor = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        count = app.refresh_count
        app.refresh_data()
        app.refresh_data()
        assert app.refresh_count == count  # the same state object: nothing recomputed
        top = app.screen.query_one("#top-processes", ProcessSummary)
        bars = app.screen.query(BucketBars).first()
        redraws = top.redraw_count
        monitor.current = replace(gb10_state(), t=gb10_state().t + 0.5)  # new state, same figures
        app.refresh_data()
        await pilot.pause()
        assert app.refresh_count == count + 1
        assert top.redraw_count == redraws  # not redrawn: what it shows did not change
        # a change below display resolution (1 MiB of MemAvailable) is kept but not redrawn
        state = gb10_state()
        nudged = replace(
            state, t=state.t + 1, os=replace(state.os, mem_available=state.os.mem_available - 2**20)
        )
        monitor.current = nudged
        assert bars.update_data(bars.data) is False
        app.refresh_data()
        assert bars.data.measured_bytes("free") == nudged.os.mem_available


def plan_for(machine: str, **changes) -> object:
    inputs = PlanInputs(
        model="llama-3.1-8b", format="bf16", kv_dtype="auto", context=8192, users=8, machine=machine
    )
    return make_plan(replace(inputs, **changes))


async def set_field(pilot, app, name: str, value: str) -> None:
    widget = app.screen.query_one(f"#plan-{name}")
    widget.value = value
    await pilot.pause()
    await pilot.pause()


async def test_plan_edits_redraw_the_bars_with_the_planners_numbers():
    app, _ = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        bars = app.screen.query_one(CapacityBars)
        shown = {b.key: b for b in bars.bars}
        assert list(shown) == ["spark", "h100", "h200", "rtx4090", "this"]
        for name in ("spark", "h100", "h200", "rtx4090"):
            plan = plan_for(name)
            assert shown[name].max_users == plan.max_users
            assert shown[name].capacity_bytes == MACHINES[name].capacity_bytes
            assert shown[name].fits == plan.fits
        # "this" is sized from the sampled state: MemTotal, with what the OS and other processes hold now
        # as the reserve (unified): the same machine as the Live screen's plan
        state = gb10_state()
        live = app._plan_result.live_plans["unified"]
        assert shown["this"].capacity_bytes == state.os.mem_total == live.capacity_bytes
        assert shown["this"].segments[0].bytes == live.os_reserve_bytes
        assert shown["this"].max_users == live.max_users
        before = text_of(bars)
        assert f"max users @ 8,192 ctx: {plan_for('h100').max_users}" in before

        await set_field(pilot, app, "context", "131072")
        shown = {b.key: b for b in app.screen.query_one(CapacityBars).bars}
        for name in ("spark", "h100", "rtx4090"):
            assert shown[name].max_users == plan_for(name, context=131072).max_users
        assert shown["rtx4090"].max_users == 0  # the lesson: the 4090 cannot hold one user at 128K
        after = text_of(app.screen.query_one(CapacityBars))
        assert after != before
        assert f"max users @ 131,072 ctx: {plan_for('h100', context=131072).max_users}" in after

        app.screen.query_one("#plan-kv_dtype", Select).value = "fp8"
        await pilot.pause()
        await pilot.pause()
        shown = {b.key: b for b in app.screen.query_one(CapacityBars).bars}
        assert shown["h100"].max_users == plan_for("h100", context=131072, kv_dtype="fp8").max_users

        # the Live screen's plan follows the same inputs
        await pilot.press("1")
        await pilot.pause()
        live_plan = app._plan_result.live_plans["unified"]
        assert live_plan.inputs.context == 131072 and live_plan.inputs.kv_dtype == "fp8"
        bars = app.screen.query(BucketBars).first()
        assert bars.data.planned_bytes("kv") == live_plan.kv_bytes


async def test_bad_plan_input_shows_the_planners_message_inline():
    app, _ = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        await set_field(pilot, app, "model", "/no/such/config.json")
        error = static_text(app, "#plan-error")
        with pytest.raises(ValueError) as planner_error:
            make_plan(PlanInputs(model="/no/such/config.json", format="bf16", users=8))
        assert error == str(planner_error.value)
        assert app.screen.query_one("#plan-error").display is True
        await set_field(pilot, app, "model", "llama-3.1-8b")
        assert app.screen.query_one("#plan-error").display is False
        # Llama 3.1 8B has 8 KV heads: tp=3 neither divides them nor is a multiple
        await set_field(pilot, app, "tp", "3")
        with pytest.raises(ValueError) as planner_error:
            make_plan(PlanInputs(model="llama-3.1-8b", format="bf16", users=8, tp=3))
        assert static_text(app, "#plan-error") == str(planner_error.value)
        # the Live screen says the same instead of a plan bar
        await pilot.press("1")
        await pilot.pause()
        assert app.screen.query(BucketBars).first().data.plan_label == str(planner_error.value)
        await pilot.press("2")
        await set_field(pilot, app, "tp", "1")
        assert app.screen.query_one("#plan-error").display is False


def test_field_parsing():
    assert parse_count("8k", "context") == 8192
    assert parse_count("128K", "context") == 131072
    with pytest.raises(ValueError, match="context"):
        parse_count("", "context")
    base = PlanInputs(model="x")
    inputs = inputs_from_fields(
        base,
        {
            "model": "qwen3-8b",
            "format": "default",
            "kv_dtype": "fp8",
            "context": "4k",
            "users": "3",
            "tp": "2",
        },
    )
    assert (inputs.model, inputs.format, inputs.kv_dtype, inputs.context, inputs.users, inputs.tp) == (
        "qwen3-8b",
        None,
        "fp8",
        4096,
        3,
        2,
    )


async def set_lab(pilot, app, intensity: str, bandwidth: str) -> None:
    app.screen.query_one("#lab-intensity", Input).value = intensity
    app.screen.query_one("#lab-bandwidth", Input).value = bandwidth
    await pilot.pause()
    await pilot.pause()


async def test_roofline_lab_figures_of_the_lessons():
    app, _ = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("3")
        await pilot.pause()
        screen = app.screen
        await pilot.press("r")
        await set_lab(pilot, app, "8", "80")
        assert screen.lab.t == 0
        assert "predicted ceiling: 640 GFLOP/s" in static_text(app, "#lab-prediction")  # before any Step
        assert "t = 0" in static_text(app, "#lab-result")
        await pilot.press("s")
        assert screen.lab.t == 1
        assert "attains 640 GFLOP/s" in static_text(app, "#lab-result")
        await pilot.press("s")
        assert screen.lab.t == 2

        await pilot.press("r")
        assert screen.lab.t == 0
        await set_lab(pilot, app, "8", "160")
        assert "predicted ceiling: 1,000 GFLOP/s" in static_text(app, "#lab-prediction")
        assert "compute-bound" in static_text(app, "#lab-prediction")
        await pilot.press("s", "s", "s")
        assert screen.lab.t == 3
        # edits keep t
        await set_lab(pilot, app, "2", "80")
        assert screen.lab.t == 3
        assert "predicted ceiling: 160 GFLOP/s" in static_text(app, "#lab-prediction")
        assert "attains 160 GFLOP/s" in static_text(app, "#lab-result")

        # Play traces the roof without changing the selected kernel
        await pilot.press("p")
        # the play timer's steps (every 0.25 s), waited for: a fixed 0.8 s could see none on a loaded machine
        deadline = time.monotonic() + 30
        while screen.lab.t <= 3 and time.monotonic() < deadline:
            await pilot.pause(0.05)
        await pilot.press("p")
        assert screen.lab.t > 3 and not screen.lab.playing
        assert (screen.lab.intensity, screen.lab.bandwidth_gbs) == (2.0, 80.0)
        figure = screen.query_one("#lab-plot").figure
        assert figure.kernel == (2.0, 160.0)
        assert len(figure.trace[0]) == screen.lab.t

        assert "cannot tell: memory capacity" in static_text(app, "#lab-cannot")
        # no GPU in the fixed GB10 state's presets with both figures: one line says so
        assert "no published peak" in static_text(app, "#lab-gpu")
        # a bad value is an inline message, the last good kernel stays
        await set_lab(pilot, app, "0", "80")
        assert "intensity I must be a positive number" in static_text(app, "#lab-error")
        assert screen.lab.intensity == 2.0


async def test_on_a_machine_without_a_gpu_the_first_sort_is_not_by_gpu_memory():
    """Issue 21, item 12: with no GPU figure anywhere, `s` went from RSS to GPU memory, an order of unknowns
    (kthreadd on top); it goes to the growth over 30 s, and clicking the sizes' headers still sorts (their
    labels now name the table's unit)."""
    app, _ = make_app(bare_state())
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("4")
        await pilot.pause()
        table = app.screen.query_one(ProcessTable)
        await pilot.press("s")
        assert table.sort_key == "growth"
        await pilot.press("s", "s", "s")  # pid, name, back to RSS: never GPU
        assert table.sort_key == "rss"
        labels = [str(c.label) for c in table.columns.values()]
        assert labels[3:6] == ["RSS MiB", "GPU MiB", "Δ30s MiB"]  # 48 MiB, the largest process here
        growth = list(table.columns.values())[5]
        app.screen._header(DataTable.HeaderSelected(table, growth.key, 5, growth.label))
        assert table.sort_key == "growth"
        await pilot.press("q")


async def test_processes_screen_sorts_and_filters():
    app, _ = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("4")
        await pilot.pause()
        table = app.screen.query_one(ProcessTable)
        assert table.row_count == len(gb10_state().os.processes)
        assert table.get_row_at(0)[1].plain == "● python serve.py --model"  # largest RSS first
        await pilot.press("s")  # rss -> gpu
        assert table.sort_key == "gpu"
        assert table.get_row_at(0)[1].plain == "● python serve.py --model"
        await pilot.press("s")  # gpu -> growth
        assert table.sort_key == "growth"
        assert table.get_row_at(0)[1].plain == "chrome"
        await pilot.press("slash")
        await pilot.press(*"xorg")
        await pilot.pause()
        assert table.row_count == 1 and table.get_row_at(0)[1].plain == "Xorg"
        assert "1 of 6 processes" in static_text(app, "#proc-status")
        await pilot.press("enter")
        await pilot.press("1")  # the filter field gave focus back: digits switch screens again
        await pilot.pause()
        assert isinstance(app.screen, LiveScreen)


async def test_no_gpu_no_nvml_no_agents_every_screen_says_what_is_missing():
    app, _ = make_app(bare_state())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        status = static_text(app, "#live-status")
        assert "no GPU: no NVML library" in status and "no agents" in status
        bars = app.screen.query(BucketBars).first()
        assert "host RAM (no GPU)" in bars.data.title
        assert "no memsight agent attached" in bars.data.missing
        assert bars.data.planned is not None  # the plan is still made for the host's RAM
        assert "no memsight agent found" in static_text(app, "#agents-missing")
        chart = app.screen.query_one(GapChart)
        assert "no PyTorch agent" in chart.data.missing
        await pilot.press("2")
        await pilot.pause()
        assert {b.key for b in app.screen.query_one(CapacityBars).bars} >= {"spark", "this"}
        await pilot.press("3")
        await pilot.pause()
        assert "no GPU found" in static_text(app, "#lab-gpu")
        await pilot.press("4")
        await pilot.pause()
        assert "GPU memory per process unknown" in static_text(app, "#proc-status")


@pytest.mark.parametrize("size", SIZES)
async def test_every_screen_at_each_size_and_resizing(size):
    app, _ = make_app()
    async with app.run_test(size=size) as pilot:
        for key in ("1", "2", "3", "4", "1"):
            await pilot.press(key)
            await pilot.pause()
            assert app.screen.size.width == size[0]
        live = app.screen
        assert live.query_one("#live-body").has_class("wide") == (size[0] >= 140)
        for new_size in ((80, 24), (200, 60), (100, 30), size):
            await pilot.resize_terminal(*new_size)
            await pilot.pause()
            assert live.query_one("#live-body").has_class("wide") == (new_size[0] >= 140)
        await pilot.press("2")
        await pilot.pause()
        capacity = app.screen.query_one(CapacityBars)
        assert capacity.bar_rows == (1 if size[1] < 40 else (2 if size[1] < 55 else 3))  # uses the room
        assert app.screen.query_one("#plan-fields").has_class("narrow") == (size[0] < 120)
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert capacity.bars and capacity.bar_rows == 1


async def test_two_ranks_one_row_each_busiest_marked_and_per_rank_plan():
    from tests.tui.fixed_states import H100_TOTAL, two_rank_state
    from tui.widgets.agents_table import AgentsTable

    state = two_rank_state()
    app, _ = make_app(state, plan_inputs=PlanInputs(model="llama-3.1-8b", format="bf16", users=8, tp=2))
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        table = app.screen.query_one(AgentsTable)
        assert table.row_count == 2
        marks = [table.get_row_at(i)[0].plain[0] for i in range(2)]
        assert marks == [" ", "★"]  # rank 1 reserves 3 GiB more (the mark leads its pid cell)
        bars = list(app.screen.query(BucketBars))
        assert [b.data.title for b in bars] == [
            "GPU 0 · NVIDIA H100 80GB HBM3",
            "GPU 1 · NVIDIA H100 80GB HBM3",
        ]
        plan = app._plan_result.live_plans["gpu0"]
        assert plan.capacity_bytes == H100_TOTAL and len(plan.ranks) == 2
        for index, bar in enumerate(bars):
            assert bar.data.planned_bytes("weights") == plan.ranks[index].weight_bytes
            assert bar.data.planned_bytes("kv") == plan.ranks[index].kv_bytes
            device = state.nvml.devices[index]
            assert bar.data.measured_bytes("free") == device.free
        headroom = app.screen.query_one("#headroom").data
        assert (
            headroom.source == "device free (NVML)" and headroom.headroom_bytes == state.nvml.devices[1].free
        )
        # a real second roof is offered for an H100 (its preset has bandwidth and peak)
        await pilot.press("3")
        await pilot.pause()
        assert "second roof: NVIDIA H100 80GB HBM3" in static_text(app, "#lab-gpu")
        await pilot.press("o")
        await pilot.pause()
        figure = app.screen.query_one("#lab-plot").figure
        assert figure.second_roof is not None
        assert figure.second_roof[1][-1] == MACHINES["h100"].peak_tflops_bf16 * 1000.0


async def test_headroom_read_from_the_agents_is_out_of_their_devices_total_not_host_memory():
    """No NVML (a container without its library) on two discrete GPUs: the headroom is the agents' smallest
    cuda free (mem_get_info), and its gauge reads it out of that device's total; it read "70.0 GiB of
    23.5 GiB" (host MemTotal) and drew the bar full."""
    from collectors.snapshots import NVMLSnapshot  # noqa: PLC0415
    from collectors.state import headroom_of  # noqa: PLC0415
    from tests.tui.fixed_states import H100_TOTAL, two_rank_state  # noqa: PLC0415

    state = two_rank_state()
    agents = tuple(
        replace(view, latest=(replace(view.latest[0], cuda_free=free, cuda_total=H100_TOTAL),))
        for view, free in zip(state.agents, (30 * GIB, 20 * GIB), strict=True)
    )
    nvml = NVMLSnapshot(status="no NVML library: libnvidia-ml.so.1 not found", available=False, devices=())
    free, total, source = headroom_of(state.os, nvml, agents, unified=False)
    headroom = {"headroom_bytes": free, "headroom_total_bytes": total, "headroom_source": source}
    state = replace(state, nvml=nvml, agents=agents, **headroom)
    assert state.os.mem_total != H100_TOTAL
    app, _ = make_app(state)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        gauge = app.screen.query_one("#headroom")
        assert (gauge.data.headroom_bytes, gauge.data.total_bytes) == (20 * GIB, H100_TOTAL)
        assert gauge.data.source == "device free (agent)"
        assert "20.0 GiB of 79.6 GiB" in text_of(gauge)


async def test_the_lessons_things_to_try_on_the_plan_screen():
    """'Putting it together' (seeds/003): each edit redraws the figure with the planner's numbers, which are
    the lesson's: 8B BF16 8K x 8 -> Spark ~100, H100 ~62, 4090 6 and misses by ~1.4 GiB; 128K -> 4090 none,
    H100 3; 70B Q4_K_M at 32K -> Spark ~7, H100 ~3."""
    app, _ = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("2")
        await pilot.pause()

        def shown() -> dict[str, object]:
            return {b.key: b for b in app.screen.query_one(CapacityBars).bars}

        bars = shown()
        assert (bars["spark"].max_users, bars["h100"].max_users, bars["rtx4090"].max_users) == (100, 62, 6)
        text = text_of(app.screen.query_one(CapacityBars))
        assert "RTX 4090 (24.0 GiB)  does not fit ✗" in text and "over by 1.36 GiB" in text
        await set_field(pilot, app, "context", "128k")
        bars = shown()
        assert (bars["rtx4090"].max_users, bars["h100"].max_users) == (0, 3)
        await set_field(pilot, app, "model", "llama-3.1-70b")
        app.screen.query_one("#plan-format", Select).value = "q4_k_m"
        await set_field(pilot, app, "context", "32k")
        bars = shown()
        assert (bars["spark"].max_users, bars["h100"].max_users, bars["rtx4090"].max_users) == (7, 3, 0)
        for name in ("spark", "h100", "rtx4090"):
            plan = plan_for(name, model="llama-3.1-70b", format="q4_k_m", context=32768)
            assert bars[name].max_users == plan.max_users


async def test_an_unknown_format_from_the_command_line_is_the_planners_error_not_a_crash():
    inputs = PlanInputs(model="llama-3.1-8b", format="fp3", users=8)
    app, _ = make_app(plan_inputs=inputs)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        assert app.screen.query_one("#plan-format", Select).value == "fp3"
        with pytest.raises(ValueError) as planner_error:
            make_plan(replace(inputs, machine="spark"))
        assert static_text(app, "#plan-error") == str(planner_error.value)
        app.screen.query_one("#plan-format", Select).value = "bf16"
        await pilot.pause()
        await pilot.pause()
        assert app.screen.query_one("#plan-error").display is False


async def test_an_agent_held_below_its_asked_rate_shows_both_rates():
    """An agent whose CPU budget holds a 100 Hz request to 25 Hz says so in its row; one on its asked rate
    does not clutter the row."""
    from tui.widgets.agents_table import AgentsTable

    state = gb10_state()
    agent = state.agents[0]
    record = agent.latest[0]
    held_history = tuple(replace(record, t=record.t - 0.04 * k) for k in range(64, -1, -1))
    rows = {}
    for asked, history in ((100.0, held_history), (25.0, held_history), (100.0, ())):
        held = replace(state, agents=(replace(agent, hz=asked, history=history),))
        app, _ = make_app(held)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            table = app.screen.query_one(AgentsTable)
            rows[(asked, len(history))] = " ".join(str(c) for c in table.get_row_at(0))
    assert held.agents[0].sampled_hz is None  # no history yet: nothing to say
    assert "· 25/100 Hz" in rows[(100.0, 65)]
    assert " Hz" not in rows[(25.0, 65)] and " Hz" not in rows[(100.0, 0)]


@pytest.mark.parametrize("state_of", [gb10_state, bare_state])
@pytest.mark.parametrize("reserve", [None, 3 * GIB])
async def test_live_and_plan_screens_agree_on_this_machine(state_of, reserve):
    """Issue 11 item 2: one "this machine" (capacity, OS reserve, so max users) on both screens, measured or
    given (--os-reserve-gib / config os_reserve_gib); on main the Live plan kept 10 GiB, the Plan row the
    measured reserve, and they disagreed (max 0 users vs 5)."""
    app, _ = make_app(
        state_of(), plan_inputs=PlanInputs(model="llama-3.2-1b", users=4), unified_os_reserve_bytes=reserve
    )
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        (key,) = app._plan_result.live_plans
        live = app._plan_result.live_plans[key]
        live_label = app.screen.query(BucketBars).first().data.plan_label
        await pilot.press("2")
        await pilot.pause()
        this = {b.key: b for b in app.screen.query_one(CapacityBars).bars}["this"]
        assert this.capacity_bytes == live.capacity_bytes
        assert this.segments[0].bytes == live.os_reserve_bytes
        assert this.max_users == live.max_users > 0
        assert f"max {live.max_users} users" in live_label
        if reserve is not None:
            assert live.os_reserve_bytes == reserve


async def test_plan_screen_fields_take_counts_as_the_cli_does():
    """Issue 11 item 6: the Plan screen reads what is typed with the CLI's parser (1.5k, 8,192, 1k users)."""
    app, _ = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        for name, typed, value in (
            ("context", "1.5k", 1536),
            ("context", "8,192", 8192),
            ("users", "1k", 1024),
        ):
            field = app.screen.query_one(f"#plan-{name}", Input)
            field.focus()
            field.value = ""
            await pilot.press(*typed)
            await pilot.press("enter")
            await pilot.pause()
            assert field.value == typed
            assert getattr(app.plan_inputs, name) == value
            assert app.screen.query_one("#plan-error").display is False


async def test_the_rooflines_x_labels_are_not_run_into_a_y_label():
    """Issue 21, item 12: the roofline's first x tick read `10.125`: a y tick (10) below the data's range was
    drawn on the x labels' row, against the x label 0.125."""
    import re  # noqa: PLC0415

    from tui.widgets.roofline_plot import RooflinePlot  # noqa: PLC0415

    app, _ = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("3")
        await pilot.pause()
        plot = app.screen.query_one(RooflinePlot)
        text = re.sub(r"\x1b\[[0-9;]*m", "", plot.plt.build())
        await pilot.press("q")
    lines = text.splitlines()
    x_labels = lines[-1].split()
    assert x_labels[:3] == ["0.125", "0.25", "0.5"], lines[-1]
    axis = next(i for i, line in enumerate(lines) if "└" in line)
    assert [line.split("┤")[0].strip() for line in lines[:axis] if "┤" in line] == ["1,000", "100", "10"]
