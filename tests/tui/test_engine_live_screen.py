"""The Live screen under `memsight run` for SGLang and Ollama: the engine's buckets from its own (real,
published) log fill the bucket table beside its own model's plan for the same model, with NVML's per-process
figure and what lies outside the engine's accounting. The app is the real Textual app; the child is a real
process; the monitor state is fixed (no GPU here: NVML's per-process figure is set in the state)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

from textual.widgets import Static

from collectors.engine_log_follow import EngineLogFollower
from collectors.snapshots import GpuProcess
from tests.conftest import REPO_ROOT
from tests.tui.fixed_states import FixedMonitor, two_rank_state
from tui import cmd_run
from tui.app import MemsightApp
from tui.screens.engine_live import ENGINE_OTHER_NOTE
from tui.widgets.bucket_bars import comparison_rows

DATA = REPO_ROOT / "tests" / "data"
GIB = 2**30


def _followed(path):
    follower = EngineLogFollower(path)
    followed = follower.poll()
    assert followed is not None
    return followed


async def _live(tmp_path, log_path, nvml_gib: float, engine=None, **app_kwargs):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state = two_rank_state()
        device = replace(
            state.nvml.devices[0], processes=(GpuProcess(proc.pid, round(nvml_gib * GIB), "compute"),)
        )
        state = replace(
            state,
            nvml=replace(state.nvml, devices=(device, *state.nvml.devices[1:])),
            engine_log=_followed(log_path),
            engine=engine,
        )
        child = cmd_run.RunChild(proc, "python -m sglang.launch_server ...", None)
        app = MemsightApp(FixedMonitor(state), source_label="t", child=child, **app_kwargs)
        async with app.run_test(size=(200, 48)) as pilot:
            app.refresh_data()
            await pilot.pause()
            line = str(app.screen.query_one("#live-vllm_log", Static).content)
            comparisons = app.live_view.comparisons
            await pilot.press("q")
    finally:
        proc.kill()
        proc.wait()
    return line, comparisons


async def test_sglang_buckets_fill_the_table_with_outside_accounting(tmp_path):
    log = DATA / "sglang_logs" / "llmsinclouds_v0.4.3.post4_qwq32b_tp4_l4.log"
    line, comparisons = await _live(tmp_path, log, nvml_gib=21.0)
    (c,) = [c for c in comparisons if " · SGLang (pid " in c.title]
    assert c.title.startswith("GPU 0 · ")
    weights, kv = round(15.54 * GIB), 2 * round(1.42 * GIB)
    assert (c.measured_bytes("weights"), c.measured_bytes("kv")) == (weights, kv)
    # the log's model (Qwen/QwQ-32B) is no catalog name: the plan says so, the buckets stay the log's
    assert c.planned is None and "give memsight run --model" in c.plan_label
    assert line.startswith("SGLang (from SGLang's log; per rank, 4 ranks): weights 15.54 · KV 2.84")
    assert "use now: give memsight run --engine-url URL" in c.notes[-1]
    outside = next(n for n in c.notes if n.startswith("non-PyTorch bar: "))
    # the rank's own accounting: weights + K/V + graphs and what the pool's creation took (the log's figures)
    assert outside.endswith(
        "outside SGLang's accounting 0.530 GiB (NVML per-process 21.00 - SGLang's own 20.47)"
    )
    assert c.measured_bytes("nonpytorch") == round(21.0 * GIB) - weights - kv


async def test_the_plan_row_is_sglangs_own_model_for_the_given_model(tmp_path):
    log = DATA / "sglang_logs" / "llmsinclouds_v0.4.3.post4_qwq32b_tp4_l4.log"
    probe = MemsightApp(FixedMonitor(two_rank_state()), source_label="t")
    inputs = replace(probe.plan_inputs, model="qwen2.5-32b")
    line, comparisons = await _live(
        tmp_path, log, nvml_gib=20.0, plan_inputs=inputs, plan_explicit=frozenset({"model"})
    )
    (c,) = [c for c in comparisons if " · SGLang (pid " in c.title]
    from planner.engines.sglang.explain import explain  # noqa: PLC0415
    from planner.engines.sglang.log import parse_log  # noqa: PLC0415

    sheet = explain(parse_log(log.read_text()), {"model": "qwen2.5-32b"})
    terms = {t.name: t.bytes for t in sheet.terms}
    assert (c.planned_bytes("weights"), c.planned_bytes("kv")) == (terms["weights"], terms["KV pool"])
    # the engine's model is of its own process: the rest of the GPU is planned as measured (no diff)
    assert c.planned_bytes("other") == c.measured_bytes("other") is not None
    assert c.other_planned_as_measured and ENGINE_OTHER_NOTE in c.notes  # shown as no diff, and why
    rows = {key: diff for key, _, _, diff in comparison_rows(c)}
    assert rows["other"] is None
    assert c.plan_label == "SGLang's own model (planner/engines/sglang): qwen2.5-32b"
    assert "| plan, same model/args: weights 15.32 · KV 3.07 GiB PREDICTED" in line


async def test_ollama_per_device_figures_and_the_model_it_needs(tmp_path):
    from collectors.engine_metrics import snapshot_from_ps  # noqa: PLC0415

    log = DATA / "ollama_logs" / "howtorun_a10_qwen3-30b-a3b-q8_0_ctx32k.log"
    ps = (DATA / "engine_metrics" / "ollama_api_ps.json").read_text()  # Ollama's docs' own /api/ps body
    snap = snapshot_from_ps(ps, url="http://127.0.0.1:11434/api/ps", t=1.0)
    line, comparisons = await _live(tmp_path, log, nvml_gib=21.0, engine=snap)
    (c,) = [c for c in comparisons if " · Ollama (pid " in c.title]
    assert (c.measured_bytes("weights"), c.measured_bytes("kv"), c.measured_bytes("activations")) == (
        round(18.5 * GIB),
        round(1.9 * GIB),
        round(190.5 * 2**20),
    )  # CUDA0's, the GPU this pool is
    assert "give memsight run --model" in c.plan_label  # Ollama's log names its model by sha256 only
    assert c.notes[-1].startswith("use now (ollama, http://127.0.0.1:11434/api/ps): mistral:latest: ")
    # one unit for the line, three significant digits each
    assert line.startswith(
        "Ollama (from Ollama's log): weights 18.50 · KV 1.90 · activations 0.186 · overhead — GiB"
    )
