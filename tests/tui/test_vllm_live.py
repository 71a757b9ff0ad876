"""Live: vLLM's own numbers read from the `memsight run` child's log as it streams. The child is a real
process that prints a real vLLM startup log (tests/data/vllm_logs) line by line; the Live screen's vLLM line
fills in from it, next to the plan for the same model/args and NVML's per-process figure."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace

from textual.widgets import Static

from collectors.snapshots import GpuProcess
from collectors.vllm_log_follow import VLLMLogFollower, log_buckets
from planner.engines.vllm.log import parse_log
from tests.conftest import REPO_ROOT
from tests.tui.fixed_states import FixedMonitor, two_rank_state
from tui import cmd_run
from tui.app import MemsightApp

LOGS = REPO_ROOT / "tests" / "data" / "vllm_logs"
GIB = 2**30
PRINTER = (
    "import os, sys, time\n"
    "for line in open(sys.argv[1], encoding='utf-8'):\n"
    "    print(line, end='', flush=True)\n"
    "    time.sleep(0.03)\n"
    "while not os.path.exists(sys.argv[2]): time.sleep(0.05)\n"
)


def test_follower_reads_appended_bytes_only_and_loses_no_line(tmp_path):
    text = (LOGS / "pr14447_v0.8_tp4_workers_24gb.log").read_text(encoding="utf-8")
    path = tmp_path / "vllm.log"
    path.write_text("")
    follower = VLLMLogFollower(path, max_read_bytes=100)  # far less than one line per poll
    assert not follower.poll().is_vllm
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
    for _ in range(len(text) // 100 + 2):
        result = follower.poll()
    assert result == parse_log(text)
    assert follower.poll() is result  # nothing new: the same object
    path.write_text("")  # truncated: starts over
    assert not follower.poll().is_vllm
    assert VLLMLogFollower(tmp_path / "missing.log").poll().figures == {}


def test_follower_keeps_multibyte_characters_cut_by_the_read_limit(tmp_path):
    path = LOGS / "onecat237_journald_v100x4.log"
    text = path.read_text(encoding="utf-8")
    for limit in (1, 2, 3, 5, 7):
        follower = VLLMLogFollower(path, max_read_bytes=limit)
        for _ in range(len(text.encode()) // limit + 2):
            result = follower.poll()
        assert result == parse_log(text), limit


def test_log_buckets_from_the_smallest_pool_rank():
    log = parse_log((LOGS / "issue14452_v0.8.5dev_qwq32b-bnb_pp2_rtx5090.log").read_text(encoding="utf-8"))
    b = log_buckets(log)
    assert (b.weights, b.kv_pool, b.activation, b.overhead) == (
        round(10.30 * GIB), round(14.26 * GIB), round(1.77 * GIB), round(0.33 * GIB))  # fmt: skip
    assert b.ranks == 2 and b.total == sum((b.weights, b.kv_pool, b.activation, b.overhead))


async def _live_line(
    tmp_path, log_name: str, nvml_gib: float | None, edit=None, **app_kwargs
) -> tuple[str, MemsightApp]:
    """Stream a real log from a real child under the app; `edit(state, pid)` changes the fixed state once the
    child's pid is known (an agent of its own, a /metrics scrape)."""
    log = tmp_path / "child.log"
    go = tmp_path / "exit-now"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-u", "-c", PRINTER, str(LOGS / log_name), str(go)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    state = two_rank_state()
    if nvml_gib is not None:  # NVML sees the child (the vLLM process) on GPU 0
        seen_by_nvml = (GpuProcess(proc.pid, round(nvml_gib * GIB), "compute"),)
        device = replace(state.nvml.devices[0], processes=seen_by_nvml)
        state = replace(state, nvml=replace(state.nvml, devices=(device, *state.nvml.devices[1:])))
    if edit is not None:
        state = edit(state, proc.pid)
    child = cmd_run.RunChild(proc, "vllm serve ...", log)
    app = MemsightApp(FixedMonitor(state), source_label="t", child=child, **app_kwargs)
    expected = parse_log((LOGS / log_name).read_text(encoding="utf-8"))
    text = ""
    try:
        async with app.run_test(size=(200, 48)) as pilot:
            seen = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                app.refresh_data()
                await pilot.pause(0.05)
                line = app.screen.query_one("#live-vllm_log", Static)
                text = str(line.content) if line.display else ""
                if text and text not in seen:
                    seen.append(text)
                if app._vllm_follow.poll() == expected:
                    app.refresh_data()
                    await pilot.pause()
                    text = str(app.screen.query_one("#live-vllm_log", Static).content)
                    break
            assert app._vllm_follow.poll() == expected
            go.touch()
            proc.wait(timeout=20)
            await pilot.press("q")
    finally:
        go.touch()
        if proc.poll() is None:
            proc.kill()
    return text, app


async def test_live_line_fills_from_a_streaming_real_log_with_nvml_outside(tmp_path):
    text, _ = await _live_line(tmp_path, "pr10511_v0.6.5dev_llama3-8b_h100_tp1.log", nvml_gib=72.0)
    assert text.startswith("vLLM (from vLLM's log): weights 14.96 · KV pool 53.29 · activation peak 1.26 · "
                           "non-torch+graphs 1.79 GiB")  # fmt: skip
    # NVML's 72.00 GiB for the process minus vLLM's own 71.30 GiB (the four logged buckets)
    assert "outside vLLM's accounting 0.70 GiB (NVML 72.00 - vLLM 71.30)" in text
    assert "plan: the log's model 'meta-llama/Meta-Llama-3-8B' is not in the local cache" in text


async def test_live_line_shows_the_plan_for_the_same_model_and_args(tmp_path):
    text, _ = await _live_line(tmp_path, "myoceane_v0.19.0_gpt-oss-20b_a100.log", nvml_gib=None)
    assert text.startswith("vLLM 0.19.0 (from vLLM's log): weights 13.72 · KV pool 36.56 · activation peak —")
    assert "| plan, same model/args: KV pool " in text and "GiB PREDICTED" in text
    assert "outside vLLM's accounting" not in text  # NVML does not list the process


def _vllm_comparison(app: MemsightApp):
    (found,) = [c for c in app.live_view.comparisons if " · vLLM" in c.title]
    return found


async def test_vllm_buckets_from_the_streaming_log_fill_the_bucket_table_with_outside_accounting(tmp_path):
    _, app = await _live_line(tmp_path, "pr10511_v0.6.5dev_llama3-8b_h100_tp1.log", nvml_gib=72.0)
    c = _vllm_comparison(app)
    assert c.title.startswith("GPU 0 · NVIDIA H100 80GB HBM3 · vLLM (pid ")  # the pool NVML lists it on
    # exactly the logged figures (GiB, 2 decimals) as bytes; non-torch + graphs drawn as non-PyTorch
    assert (c.measured_bytes("weights"), c.measured_bytes("kv"), c.measured_bytes("activations"),
            c.measured_bytes("nonpytorch")) == (round(14.96 * GIB), round(53.29 * GIB), round(1.26 * GIB),
                                                round(1.79 * GIB))  # fmt: skip
    assert c.measured_bytes("tensors") is None and c.measured_bytes("gap") is None  # no agent: not measured
    device = app.state.nvml.devices[0]
    assert c.measured_bytes("free") == device.free
    # what the device holds besides vLLM's process (NVML's 72 GiB for it)
    assert c.measured_bytes("other") == max(0, device.used - 72 * GIB)
    assert c.notes[0] == ("sources: vLLM's log: weights, KV pool, activation peak, non-torch+graphs as "
                          "non-PyTorch · NVML: other, free")  # fmt: skip
    assert "outside vLLM's accounting 0.70 GiB (NVML per-process 72.00 - vLLM's own 71.30)" in c.notes
    assert c.planned is None  # the log's model is not here (and it names no version): said, not guessed
    assert c.plan_label.startswith(
        "vLLM's model of its memory: the log's model 'meta-llama/Meta-Llama-3-8B' is not in the local cache"
    )
    # the other GPU keeps its own comparison
    assert [x.title for x in app.live_view.comparisons][1].startswith("GPU 1 · ")


async def test_the_vllm_plan_follows_the_logs_model_and_args_and_flags_win(tmp_path):
    from planner.engines.vllm.explain import explain  # noqa: PLC0415

    name = "myoceane_v0.19.0_gpt-oss-20b_a100.log"
    log = parse_log((LOGS / name).read_text(encoding="utf-8"))
    _, app = await _live_line(tmp_path, name, nvml_gib=40.0)
    c = _vllm_comparison(app)
    total = app.state.nvml.devices[0].total
    pool = explain(log, total_bytes=total).pool
    assert (c.planned_bytes("weights"), c.planned_bytes("kv"), c.planned_bytes("activations"),
            c.planned_bytes("overhead")) == (pool.weights_bytes, pool.pool_bytes, pool.activation_bytes,
                                             pool.non_torch_bytes + pool.cudagraph_bytes)  # fmt: skip
    assert pool.max_model_len == 131_072  # the log's
    head = f"KV pool {pool.pool_bytes / GIB:,.2f} GiB = {pool.kv_cache_tokens:,} tokens"
    assert c.plan_label.startswith(head)
    assert ("PREDICTED by vLLM 0.19.0 V1's model (planner/vllm_explain): openai/gpt-oss-20b, mxfp4, "
            "max_model_len 131,072, TP/PP 1/1, util 0.65") in c.plan_label  # fmt: skip
    provenance = next(n for n in c.notes if n.startswith("plan follows vLLM's log: "))
    assert "model openai/gpt-oss-20b (what vLLM loaded, log)" in provenance
    assert "max_model_len 131072 (log)" in provenance and "gpu_memory_utilization 0.65 (log)" in provenance
    assert c.notes[1] == "KV pool 36.56 GiB (vLLM's log) · use now: give --vllm-url URL (vLLM's /metrics)"

    # a context and a model given as flags (or in the config file) win over the log's, and say so
    inputs = replace(app.plan_inputs, model="llama-3.1-8b", context=8192)
    _, app = await _live_line(tmp_path, name, nvml_gib=40.0, plan_inputs=inputs,
                              plan_explicit=frozenset({"model", "context"}))  # fmt: skip
    c = _vllm_comparison(app)
    given = explain(log, model="llama-3.1-8b", total_bytes=total, given={"max_model_len": "8192"}).pool
    assert c.planned_bytes("kv") == given.pool_bytes and given.max_model_len == 8192
    assert "V1's model (planner/vllm_explain): llama-3.1-8b, bf16, max_model_len 8,192," in c.plan_label
    provenance = next(n for n in c.notes if n.startswith("plan follows vLLM's log: "))
    assert "model llama-3.1-8b (given: flag or config file, wins over the log)" in provenance
    assert "max_model_len 8192 (given: flag or config file)" in provenance


async def test_an_agent_and_the_log_each_give_their_buckets_once_with_the_pool_use_from_metrics(tmp_path):
    from collectors.vllm_metrics import vllm_snapshot_from_text  # noqa: PLC0415
    from tests.collectors.test_vllm_metrics import V1_TWO_ENGINES  # noqa: PLC0415

    logged_w, logged_kv, logged_act = round(14.96 * GIB), round(53.29 * GIB), round(1.26 * GIB)
    allocated = logged_w + logged_kv + 300 * 2**20  # what the allocator holds: vLLM's weights + pool + rest
    reserved = allocated + 2 * GIB
    non_torch = 600 * 2**20

    def edit(state, pid):
        """The vLLM process (the child) runs this run's agent on GPU 0: allocator counters, no tracked
        model or cache (vLLM's tensors are not transformers objects); /metrics scraped with --vllm-url."""
        b = replace(state.buckets[0], pid=pid, weights_bytes=None, kv_bytes=None, activations_bytes=None,
                    other_allocated_bytes=allocated, allocated=allocated, reserved=reserved,
                    allocator_gap_bytes=reserved - allocated, non_torch_bytes=non_torch,
                    driver_used_bytes=reserved + non_torch)  # fmt: skip
        agent = replace(state.agents[0], pid=pid)
        scrape = vllm_snapshot_from_text(V1_TWO_ENGINES, url="http://127.0.0.1:8000/metrics", t=state.t)
        return replace(state, buckets=(b,), agents=(agent,), vllm=scrape)

    _, app = await _live_line(tmp_path, "pr10511_v0.6.5dev_llama3-8b_h100_tp1.log", nvml_gib=72.0, edit=edit)
    c = _vllm_comparison(app)
    assert (c.measured_bytes("weights"), c.measured_bytes("kv"), c.measured_bytes("activations")) == (
        logged_w, logged_kv, logged_act)  # fmt: skip
    # the agent's untracked tensors lose the log's weights and pool (not counted twice) ...
    assert c.measured_bytes("tensors") == 300 * 2**20
    # ... its cached gap the logged activation peak; its own non-PyTorch figure wins over the log's
    assert c.measured_bytes("gap") == 2 * GIB - logged_act
    assert c.measured_bytes("nonpytorch") == non_torch
    assert c.notes[0] == (
        "sources: vLLM's log: weights, KV pool, activation peak · agent: non-torch+graphs, untracked tensors "
        "(less the log's weights + KV), gap (less the log's activation peak) · NVML: other, free"
    )
    # the pool: its size from the log, its use now from /metrics (engine 0 of the scrape; this log states
    # no token count, so the capacity in tokens is the scrape's num_gpu_blocks x block_size)
    assert c.notes[1] == (
        "KV pool 53.29 GiB (vLLM's log) · in use 87.5% ≈ 46.63 GiB, 380,142 of 434,448 tokens (/metrics) · "
        "running 7 / waiting 3 · preemptions 12"
    )


async def test_what_the_log_does_not_say_comes_from_memsight_run_flags(tmp_path):
    from planner.engines.vllm.explain import explain  # noqa: PLC0415

    name = "pr10511_v0.6.5dev_llama3-8b_h100_tp1.log"  # names no version; its model is not in the cache
    config = str(LOGS / "configs" / "Meta-Llama-3-8B.json")
    inputs = replace(MemsightApp(FixedMonitor(two_rank_state())).plan_inputs, model=config)
    explicit = frozenset({"model"})
    _, app = await _live_line(tmp_path, name, nvml_gib=None, plan_inputs=inputs, plan_explicit=explicit,
                              vllm_hints={"version": "0.6.5"})  # fmt: skip
    c = _vllm_comparison(app)
    log = parse_log((LOGS / name).read_text(encoding="utf-8"))
    pool = explain(log, model=config, version="0.6.5", total_bytes=app.state.nvml.devices[0].total).pool
    assert c.planned_bytes("kv") == pool.pool_bytes and c.planned_bytes("weights") == pool.weights_bytes
    assert "vLLM 0.6.5 V0's model (planner/vllm_explain): Meta-Llama-3-8B.json, bf16, " in c.plan_label
    provenance = next(n for n in c.notes if n.startswith("plan follows vLLM's log: "))
    assert "vLLM version 0.6.5 (given: flag)" in provenance
    # without the flag, the screen names memsight run's flag (not `memsight explain`'s)
    _, app = await _live_line(tmp_path, name, nvml_gib=None, plan_inputs=inputs,
                              plan_explicit=frozenset({"model"}))  # fmt: skip
    assert "give memsight run --vllm-version" in _vllm_comparison(app).plan_label
