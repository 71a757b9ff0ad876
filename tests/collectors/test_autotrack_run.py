"""The issue's acceptance run: an unmodified transformers generate script (collectors/data/
demo_transformers_generate.py: no memsight code in it) under `memsight run --headless --record`, and what
the recording says, checked against the planner for the same config.json (transformers installed by the dev
extra, torch on the CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from collectors.agent_info import parse_info
from collectors.recorder import record_from_values
from collectors.recording import read_recording
from planner import load_spec, weight_bytes
from planner.kv import kv_bytes_per_token
from tests.conftest import REPO_ROOT

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
# every test reads the module's one recording: they run on one pytest-xdist worker (scripts/test.sh's --dist
# loadgroup), so that the run is made once, not once on each worker
pytestmark = pytest.mark.xdist_group("autotrack_run_recording")

SCRIPT = REPO_ROOT / "collectors" / "data" / "demo_transformers_generate.py"
CONFIG = json.loads((REPO_ROOT / "collectors" / "data" / "demo_transformers_config.json").read_text())
BATCH, PROMPT, NEW = 8, 32, 240


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("autotrack_run")
    path = tmp / "run.jsonl"
    # one torch thread: on a shared 2-core CI machine, OpenMP threads spinning against other jobs made this
    # generate() a hundred times slower
    # and a streaming reader that takes 10 ms a token, so that on a fast, quiet machine generation still
    # lasts longer (>= 2.4 s) than several of the agent's publishing intervals (0.2 s)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "run", "--headless", "--record", str(path), "--hz", "5",
         "--agent-dir", str(tmp / "agents"), "--", sys.executable, str(SCRIPT),
         "--batch", str(BATCH), "--prompt", str(PROMPT), "--new", str(NEW), "--hold", "1",
         "--token-delay", "0.01"],
        cwd=tmp, capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "memsight" not in SCRIPT.read_text().split('"""', 2)[2]  # the script's code names no memsight
    return read_recording(path)


def infos(recording):
    return [parse_info(e["info"]) for e in recording.events if e["k"] == "agent_info"]


def host_records(recording):
    return [record_from_values(e["r"]) for e in recording.events if e["k"] == "agent" and e["r"][1] == -1]


def test_weights_equal_the_planners_bytes_plus_the_rotary_buffers_exactly(recording):
    spec = load_spec(CONFIG)
    planned = weight_bytes(spec, "fp32").total
    last = infos(recording)[-1]
    (model,) = last.models
    # the two rotary tables (inv_freq, original_inv_freq): head_dim / 2 fp32 values each, what the planner
    # leaves out (they are not parameters)
    rotary = 2 * (CONFIG["head_dim"] // 2) * 4
    assert model.params_bytes == {-1: planned}
    assert model.buffers_bytes == {-1: rotary}
    weights = {r.weights_bytes for r in host_records(recording) if r.weights_bytes is not None}
    assert weights == {planned + rotary}


def test_kv_bytes_equal_the_planners_per_token_figure_times_tokens_held(recording):
    per_token = kv_bytes_per_token(load_spec(CONFIG), "auto")
    c = CONFIG
    assert per_token == c["num_hidden_layers"] * 2 * c["num_key_value_heads"] * c["head_dim"] * 4
    points = set()
    for info in infos(recording):
        for cache in info.caches:
            if cache.settled:  # not read between two layers' updates of one forward
                assert cache.cls == "DynamicCache" and cache.batch == BATCH
                assert cache.bytes == {-1: per_token * BATCH * cache.tokens}
                points.add(cache.tokens)
    assert len(points) >= 3, points  # several points while generating
    assert min(points) >= PROMPT and max(points) <= PROMPT + NEW - 1
    # the ring's KV figure, sampled on its own (possibly between two layers' updates), never exceeds the
    # longest sequence's bytes, and grows while generating
    kv = [r.kv_bytes for r in host_records(recording) if r.kv_bytes]
    assert len(set(kv)) >= 3
    assert max(kv) <= per_token * BATCH * (PROMPT + NEW) and kv[-1] > kv[0]


def test_prefill_and_decode_peaks_are_recorded_and_labelled(recording):
    last = infos(recording)[-1]
    prefill, decode = last.phase("prefill"), last.phase("decode")
    assert prefill.calls == 1 and prefill.last_tokens == BATCH * PROMPT
    assert decode.calls == NEW - 1 and decode.last_tokens == BATCH
    assert prefill.peak_bytes > 0 and prefill.peak_t is not None
    # decode steps that set a new high of the RSS high-water mark (the cache grows) have a figure; the rest
    # stayed under an earlier high and are counted, not guessed
    assert decode.peak_bytes is not None and decode.peak_t > prefill.peak_t
    assert decode.unresolved_calls < decode.calls
    assert "ru_maxrss" in last.phase_counter and last.hooks["phases"] == "ok"


def test_published_plan_inputs_match_the_scripts_model_and_cache(recording):
    last = infos(recording)[-1]
    (model,) = last.models
    assert model.cls == "LlamaForCausalLM" and model.dtype == "float32" and model.auto
    assert load_spec(dict(model.config)) == load_spec(CONFIG) or all(
        model.config[k] == v
        for k, v in CONFIG.items()
        if k not in ("torch_dtype", "rope_theta", "architectures")
    )
    # the largest cache the agent saw (it samples every 0.1 s, publishes at most every 0.2 s, the monitor
    # reads at 5 Hz: the last steps before the cache was freed may be missed)
    seen = [c.tokens for i in infos(recording) for c in i.caches if c.tokens]
    assert last.largest_cache.batch == BATCH
    assert PROMPT + NEW // 2 < max(seen) <= last.largest_cache.tokens <= PROMPT + NEW - 1
    assert last.versions["transformers"] == transformers.__version__
    assert last.hooks == {"models": "ok", "caches": "ok", "phases": "ok"}


def test_replay_restores_the_published_info(recording, tmp_path):
    from collectors.replay import ReplayMonitor  # noqa: PLC0415

    path = tmp_path / "copy.jsonl"
    lines = [json.dumps(recording.header)] + [json.dumps(e) for e in recording.events]
    path.write_text("\n".join(lines) + "\n")
    replay = ReplayMonitor(path)
    state = replay.advance_to(replay.duration_s)
    (view,) = [v for v in state.agents if v.info is not None]
    assert view.info.models[0].cls == "LlamaForCausalLM"
    assert view.info.phase("decode").calls == NEW - 1
