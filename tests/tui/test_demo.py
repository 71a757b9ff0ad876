"""`memsight demo`: the same app over the bundled real recording (collectors/data/), labelled with where and
how it was made. The replay is stepped by the test (no wall clock)."""

from __future__ import annotations

import argparse
import json

from textual.widgets import Static

from collectors.replay import bundled_recording
from tui import cmd_watch
from tui.app import MemsightApp
from tui.widgets.bucket_bars import BucketBars
from tui.widgets.gap_chart import GapChart
from tui.widgets.process_summary import ProcessSummary


def demo_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cmd_watch.add_arguments(parser, "demo")
    return parser.parse_args(list(argv))


async def test_demo_replays_the_bundled_recording_and_says_where_it_was_made():
    monitor, options = cmd_watch.app_arguments(demo_args(), "demo")
    about = json.loads(bundled_recording().with_suffix(".json").read_text())
    assert options["title"] == "memsight demo"
    assert "demo_cpu_generate.jsonl" in options["source_label"]
    assert about["where"] in options["source_detail"] and about["made_with"] in options["source_detail"]
    app = MemsightApp(monitor, manage_monitor=False, **options)
    async with app.run_test(size=(160, 48)) as pilot:
        step = 5.0
        offset = 0.0
        while offset <= monitor.duration_s + step:
            monitor.advance_to(offset)
            app.refresh_data()
            await pilot.pause()
            offset += step
        state = monitor.state()
        assert state.replay
        detail = app.screen.query_one("#live-source", Static)
        assert detail.display and about["made_with"] in str(detail.content)
        bars = app.screen.query(BucketBars).first()
        assert bars.data.title.startswith("recorded machine")
        # the agent's tracked weights as recorded, exactly (the sidecar states the byte count)
        recorded = [b.weights_bytes for b in state.buckets if b.weights_bytes is not None]
        assert recorded and bars.data.measured_bytes("weights") == sum(recorded)
        assert f"{sum(recorded):,}" in about["workload"]
        assert app.screen.query_one(ProcessSummary).shown
        # the recorded agent never initialized CUDA: the gap chart says so in one line
        assert "CUDA not initialized" in app.screen.query_one(GapChart).data.missing


def test_demo_speed_must_be_positive(capsys):
    assert cmd_watch.main(demo_args("--speed", "0"), "demo") == 2
    assert "--speed must be positive" in capsys.readouterr().err


def test_demo_plans_the_recorded_model_in_fp32_and_its_weights_match_the_measured_bytes():
    """The sidecar's plan is the workload's own config (the file demo_workload.py builds its layers from):
    the planner's fp32 weights for it equal the agent's measured weights exactly, 622,923,776 bytes
    (155,730,944 parameters x 4 bytes): the model has no non-parameter buffers to make a difference."""
    from planner.budget import make_plan

    monitor, options = cmd_watch.app_arguments(demo_args(), "demo")
    inputs = options["plan_inputs"]
    config = bundled_recording().parent / "demo_model_config.json"
    assert inputs.model == str(config) and inputs.format == "fp32"
    assert (inputs.users, inputs.context) == (4, 512 + 64)  # the recording's largest round
    plan = make_plan(inputs)
    assert plan.params.total == 155_730_944
    assert plan.weight_bytes == 622_923_776
    monitor.advance_to(monitor.duration_s)
    measured = sum(b.weights_bytes for b in monitor.state().buckets if b.weights_bytes is not None)
    assert measured == plan.weight_bytes
    # the workload reads the same file (no second copy of the numbers to drift)
    workload = (bundled_recording().parent / "demo_workload.py").read_text()
    assert "demo_model_config.json" in workload and "1024, 8, 16" not in workload


def test_demo_model_config_is_what_the_workload_builds():
    """demo_workload.py's module constants come from the config (imported without running the workload)."""
    import importlib.util

    import pytest

    pytest.importorskip("torch")
    path = bundled_recording().parent / "demo_workload.py"
    spec = importlib.util.spec_from_file_location("demo_workload_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.Model()
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    total += sum(b.numel() * b.element_size() for b in model.buffers())
    assert total == 622_923_776
