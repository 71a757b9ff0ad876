# ruff: noqa: E501  (agent info documents laid out one field group per line)
"""The Live screen's plan follows what an agent's process loaded (tui/screens/plan_sources.py plan_sources,
weights_check, phase_line; live_buckets.py bucket_comparisons), fed with agent info documents shaped as the agent writes them
(collectors/agent.py Agent.info) and a real MonitorState built by the collectors' StateBuilder."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from collectors.agent_info import parse_info
from collectors.snapshots import AgentRecord, OSSnapshot
from collectors.state import StateBuilder
from planner import load_spec, weight_bytes
from planner.budget import PlanInputs
from tests.conftest import REPO_ROOT
from tui.app import MemsightApp
from tui.screens.live_buckets import bucket_comparisons
from tui.screens.plan_sources import plan_sources, weights_check
from tui.widgets.fmt import size

GIB = 2**30
CONFIG = json.loads((REPO_ROOT / "collectors" / "data" / "demo_transformers_config.json").read_text())
BASE = PlanInputs(model="llama-3.1-8b", format="bf16", kv_dtype="auto", context=8192, users=8)


def info_doc(pid, *, params, buffers=128, device="-1", batch=8, tokens=300, config=CONFIG, dtype="float32"):
    return {
        "version": 1, "t": 100.0, "pid": pid, "autotrack": "on",
        "hooks": {"models": "ok", "caches": "ok", "phases": "ok"}, "versions": {"transformers": "5.24.0"},
        "models": [{"class": "LlamaForCausalLM", "name": "", "dtype": dtype, "config": config, "auto": True,
                    "params_bytes": {device: params}, "buffers_bytes": {device: buffers}}],
        "caches": [{"class": "DynamicCache", "auto": True, "structure": "layers", "batch": batch,
                    "tokens": tokens, "layer_tokens": [tokens] * 4, "layers": 4,
                    "bytes": {device: 2048 * batch * tokens}}],
        "largest_cache": None,
        "phases": {"prefill": {"calls": 1, "last_tokens": 256, "peak_bytes": 12 * 2**20, "peak_t": 3600.0,
                               "unresolved_calls": 0},
                   "decode": {"calls": 299, "last_tokens": 8, "peak_bytes": 40960, "peak_t": 3661.0,
                              "unresolved_calls": 290}},
        "phase_counter": "process RSS high-water mark (ru_maxrss, never reset by memsight) above the RSS at entry",
        "untracked": ["MyCache, unknown structure"],
    }  # fmt: skip


def state_with(*docs):
    builder = StateBuilder()
    builder.update_os(
        OSSnapshot(t=100.0, mem_total=64 * GIB, mem_available=40 * GIB, cached=None, shmem=None, swap_total=0,
                   swap_free=0, psi_some_avg10=None, psi_full_avg10=None, oom_kill=None, processes=())
    )  # fmt: skip
    for doc in docs:
        pid = doc["pid"]
        builder.agent_track(pid, 1, "python generate.py", "/x", 10.0)
        weights = sum(sum(m["params_bytes"].values()) + sum(m["buffers_bytes"].values()) for m in doc["models"])
        record = AgentRecord(
            t=100.0, device=-1, cuda_state="CUDA not initialized", allocated=None, reserved=None,
            peak_allocated=None, active=None, inactive_split=None, alloc_retries=None, num_ooms=None,
            segments=None, large_pool_reserved=None, small_pool_reserved=None, cuda_free=None, cuda_total=None,
            is_integrated=None, rss=2 * GIB, weights_bytes=weights, kv_bytes=sum(doc["caches"][0]["bytes"].values()),
            step_index=0, step_label="", step_t=None, tick_cost_s=None,
        )  # fmt: skip
        builder.update_agent((pid, 1), (record,), status=None, alive=True, lost=0)
        builder.update_agent_info((pid, 1), parse_info(doc))
    return builder.build(100.0)


def planned_fp32():
    return weight_bytes(load_spec(CONFIG), "fp32").total


def comparisons(state, explicit=frozenset(), base=BASE):
    app = MemsightApp(None, plan_inputs=base, manage_monitor=False, plan_explicit=explicit)
    result = app._plans(state)
    return bucket_comparisons(state, result.live_plans, result.live_errors, result.sources)


def test_plan_follows_the_loaded_model_and_its_cache_and_says_where_each_input_came_from():
    state = state_with(info_doc(4121, params=planned_fp32(), tokens=4096, batch=8))
    (source,) = plan_sources(state, BASE, frozenset())
    assert (source.inputs.format, source.inputs.context, source.inputs.users) == ("fp32", 4096, 8)
    (c,) = comparisons(state)
    assert c.plan_label.startswith("pid 4121's LlamaForCausalLM fp32, KV fp32, 4,096 ctx × 8 users")
    assert c.notes[0].startswith("model: from pid 4121's loaded model · context: from its cache, 4,096 tokens")
    assert "context: from its cache, 4,096 tokens" in c.notes[0]
    # the plan's KV is the planner's per-token figure x tokens x batch for the loaded config
    assert c.planned_bytes("kv") == 2048 * 4096 * 8
    # a CPU-only program: its RSS is its total, the rest of it drawn as the rest of the process, not "other"
    assert c.measured_bytes("other") == 24 * GIB - 2 * GIB
    assert c.measured_bytes("process") == 2 * GIB - planned_fp32() - 128 - 2048 * 4096 * 8
    assert any(n.startswith("activations: prefill peak 12.0 MiB at 01:00:00, decode peak 40.0 KiB at 01:01:01")
               for n in c.notes)  # fmt: skip
    assert "untracked: MyCache, unknown structure" in c.notes


def test_a_cpu_program_is_explained_as_one():
    """Issue 21, items 2 and 3, on a CPU-only program (no GPU, no NVML): the activation bucket holds the
    largest phase peak the agent measured (it read `—` while the notes said `prefill peak 12.0 MiB`), and the
    run summary keeps its peak, as `replay --json` reports it; the RSS beyond the tracked weights and KV
    (interpreter, libtorch) is the rest of the process, not "untracked tensors" (which read as a leak); the
    plan has no 1.5 GiB CUDA context for a program without CUDA, so its free headroom is not off by it."""
    from collectors.summary import SummaryAccumulator, summary_to_json  # noqa: PLC0415
    from tests.tui.test_widgets import plain  # noqa: PLC0415
    from tui.widgets.bucket_bars import BucketBars  # noqa: PLC0415

    state = state_with(info_doc(4121, params=planned_fp32(), tokens=4096, batch=8))
    (c,) = comparisons(state)
    assert c.measured_bytes("activations") == 12 * 2**20  # the prefill peak; the decode peak was 40 KiB
    assert c.measured_bytes("tensors") is None
    assert c.measured_bytes("process") == 2 * GIB - planned_fp32() - 128 - 2048 * 4096 * 8
    assert c.planned_bytes("overhead") == 0
    assert c.plan_label.endswith("; overhead 0: no GPU, no CUDA context")
    used = sum(c.planned_bytes(k) for k in ("other", "weights", "kv", "activations", "overhead"))
    assert c.planned_bytes("free") == 64 * GIB - used
    table = plain(BucketBars(c)._table(c))
    assert "rest of process RSS" in table and "untracked tensors" not in table
    summary = summary_to_json(SummaryAccumulator().add(state, []))
    assert summary["peaks"]["activations"]["bytes"] == 12 * 2**20


def test_a_sliding_window_models_plan_context_is_the_sequence_not_the_window():
    """Issue 21, item 7: the cache of a sliding-window model holds its window (63 tokens) while the sequence
    reached 231: the plan's context is the sequence's length (the planner keeps the window itself)."""
    doc = info_doc(4121, params=planned_fp32(), tokens=63, batch=2)
    doc["caches"][0]["seq_tokens"] = 231
    (source,) = plan_sources(state_with(doc), BASE, frozenset())
    assert source.inputs.context == 231
    assert "context: from its cache, 231 tokens (63 held: a sliding window)" in source.provenance
    del doc["caches"][0]["seq_tokens"]  # an agent from before: its tokens, as it said
    (source,) = plan_sources(state_with(doc), BASE, frozenset())
    assert source.inputs.context == 63


def test_a_draft_beside_its_target_is_planned_and_checked_with_it():
    """Issue 21, item 8: two models in one process (a draft and its target) are both tracked, but the plan
    followed only the larger and the weights line said "as planned" while the bucket held both. The plan now
    fits around the draft's weights too (each model planned from its own config and dtype), and the check
    compares the bucket with both."""
    small = dict(CONFIG, num_hidden_layers=2)
    draft_planned = weight_bytes(load_spec(small), "fp32").total
    doc = info_doc(4121, params=planned_fp32(), tokens=300, batch=1)
    draft = dict(doc["models"][0], config=small, params_bytes={"-1": draft_planned}, buffers_bytes={"-1": 64})
    doc["models"].append(draft)
    (c,) = comparisons(state_with(doc))
    assert c.measured_bytes("weights") == planned_fp32() + 128 + draft_planned + 64
    assert c.planned_bytes("weights") == planned_fp32() + draft_planned
    both = size(planned_fp32() + draft_planned)
    assert f"weights: 2 models (LlamaForCausalLM + LlamaForCausalLM), measured = planned {both} + buffers " \
        "192 B: as planned" in c.notes  # fmt: skip
    assert c.plan_label.startswith(f"pid 4121's LlamaForCausalLM + {size(draft_planned)} of other models' weights")
    assert f"+ a LlamaForCausalLM ({size(draft_planned)} of weights planned)" in c.notes[0]
    # the same plan with one model less fits more users: the draft's weights are fitted around
    alone = comparisons(state_with(info_doc(4121, params=planned_fp32(), tokens=300, batch=1)))[0]
    assert alone.planned_bytes("free") - c.planned_bytes("free") == draft_planned
    # a draft loaded twice (or upcast) is no longer "as planned"
    doc["models"][1] = dict(draft, params_bytes={"-1": 2 * draft_planned})
    (c,) = comparisons(state_with(doc))
    assert not any(n.endswith("as planned") for n in c.notes)
    assert any(n.startswith("weights: 2 models") and f"{draft_planned:+,} B" in n for n in c.notes)


def test_the_kv_cache_is_planned_in_the_dtype_the_model_was_built_in():
    """Seen with MiB figures on a run of collectors/lab/tiny_llama.json (its config says bfloat16, the script
    built it in float32): KV measured 0.350 MiB against 0.188 planned, since KV "auto" read the config's
    dtype. The cache holds the dtype the model computes in: the plan follows it, and says so."""
    bf16 = dict(CONFIG, torch_dtype="bfloat16")
    doc = info_doc(4121, params=planned_fp32(), tokens=320, batch=4, config=bf16, dtype="float32")
    (c,) = comparisons(state_with(doc))
    assert c.plan_label.startswith("pid 4121's LlamaForCausalLM fp32, KV fp32, 320 ctx × 4 users")
    assert c.planned_bytes("kv") == c.measured_bytes("kv") == 2048 * 4 * 320  # 2,048 B/token in fp32
    assert "KV fp32 as loaded" in c.notes[0]
    # a given KV dtype (a flag, the config file, a Plan screen edit) still wins
    (c,) = comparisons(state_with(doc), explicit=frozenset({"kv_dtype"}), base=replace(BASE, kv_dtype="bf16"))
    assert "KV bf16" in c.plan_label and c.planned_bytes("kv") * 2 == c.measured_bytes("kv")


def test_flags_and_the_config_file_still_win():
    state = state_with(info_doc(4121, params=planned_fp32(), tokens=4096, batch=8))
    (c,) = comparisons(state, explicit=frozenset({"model", "context"}))
    assert c.plan_label.startswith("llama-3.1-8b bf16, KV auto, 8,192 ctx × 8 users")
    assert "model: llama-3.1-8b (given; pid 4121 loaded a LlamaForCausalLM)" in c.notes[0]


def test_several_agents_each_get_their_own_plan():
    small = dict(CONFIG, num_hidden_layers=2)
    state = state_with(
        info_doc(4121, params=planned_fp32(), tokens=4096, batch=8),
        info_doc(5000, params=weight_bytes(load_spec(small), "fp32").total, tokens=112, batch=1, config=small),
    )
    a, b = comparisons(state)
    assert a.title.endswith("pid 4121") and b.title.endswith("pid 5000")
    assert a.planned_bytes("kv") == 2048 * 4096 * 8 and b.planned_bytes("kv") == 1024 * 112 * 1
    assert a.planned_bytes("weights") == planned_fp32() != b.planned_bytes("weights")


@pytest.mark.parametrize(
    ("params", "device", "expected"),
    [
        ("planned", "-1", "as planned"),
        ("double", "-1", "weights duplicated"),
        ("more", "-1", "a tensor upcast"),
        ("offload", "-1", "kept off this device"),
    ],
)
def test_weights_check_names_the_likely_cause(params, device, expected):
    planned = planned_fp32()
    doc = info_doc(1, params={"planned": planned, "double": 2 * planned, "more": planned + 4096}.get(params, 0))
    if params == "offload":
        doc["models"][0]["params_bytes"] = {"0": planned // 2, "-1": planned - planned // 2}
        device = "0"
    info = parse_info(doc)
    line = weights_check(info, planned, int(device))
    assert expected in line


def test_demo_transformers_recording_shows_the_automatic_buckets_and_the_plan_it_implies():
    import argparse  # noqa: PLC0415

    from tui import cmd_watch  # noqa: PLC0415

    parser = argparse.ArgumentParser()
    cmd_watch.add_arguments(parser, "demo")
    monitor, options = cmd_watch.app_arguments(parser.parse_args(["--recording", "transformers"]), "demo")
    assert "demo_transformers_generate.jsonl" in options["source_label"]
    script = (REPO_ROOT / "collectors" / "data" / "demo_transformers_generate.py").read_text()
    assert "collectors" not in script.split('"""', 2)[2]  # no memsight import in the recorded script
    # in the middle of generation: weights, a growing cache, both phases seen
    state = monitor.advance_to(monitor.duration_s * 0.6)
    (view,) = [v for v in state.agents if v.info is not None]
    (c,) = comparisons(state, base=options["plan_inputs"])
    assert c.measured_bytes("weights") == planned_fp32() + 128
    assert c.planned_bytes("weights") == planned_fp32()
    assert "weights: measured = planned 18.6 MiB + buffers 128 B: as planned" in c.notes
    cache = view.info.caches[0]
    assert c.plan_label.startswith(f"pid {view.pid}'s LlamaForCausalLM fp32, KV fp32, {cache.tokens:,} ctx × 8 users")
    # 200 decode steps so far, 3 of them set a new RSS high, none above its own entry level: said in words
    # (issue 21, item 9: the line read "decode peak 0 KiB", as if measured)
    (line,) = [n for n in c.notes if n.startswith("activations: prefill peak")]
    assert "decode: no call set a new high above its entry level (200 calls)" in line and "peak 0" not in line
