"""Automatic tracking (collectors/autotrack.py): an unmodified transformers script under the agent's
bootstrap, real torch and transformers on the CPU, real processes and files. The cache classes checked are
those of the transformers installed by the dev extra (asserted to be the version the info file names)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from collectors import agent_format as fmt
from collectors.agent import Agent
from collectors.agent_reader import AgentReader, discover
from tests.conftest import REPO_ROOT

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SCRIPT = REPO_ROOT / "collectors" / "data" / "demo_transformers_generate.py"
CONFIG = REPO_ROOT / "collectors" / "data" / "demo_transformers_config.json"


def agent_env(directory, **extra) -> dict:
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1",  # see test_autotrack_run.py
        MEMSIGHT_AGENT="1",
        MEMSIGHT_AGENT_DIR=str(directory),
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "collectors" / "bootstrap"), str(REPO_ROOT)]),
        **extra,
    )
    return env


def wait_for_info(directory, child, until, timeout_s=120.0) -> tuple[dict, str]:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        for path in discover(str(directory)).values():
            try:
                with open(fmt.info_file_path(path), encoding="utf-8") as f:
                    last = json.load(f), path
            except (OSError, ValueError):
                continue
            if until(last[0]):
                return last
        if child.poll() is not None:
            break
        time.sleep(0.1)
    raise AssertionError(f"info never satisfied the condition; last: {last and last[0]}")


def test_unmodified_generate_script_is_tracked_without_any_memsight_call(tmp_path):
    child = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--batch", "2", "--prompt", "16", "--new", "64", "--hold", "30"],
        env=agent_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        def done(i):
            return i["phases"].get("decode", {}).get("calls", 0) >= 63 and i["caches"] == []

        info, ring = wait_for_info(tmp_path, child, done)
        assert info["hooks"] == {"models": "ok", "caches": "ok", "phases": "ok"}
        assert info["versions"]["transformers"] == transformers.__version__
        assert info["autotrack"] == "on"
        (model,) = info["models"]
        assert model["class"] == "LlamaForCausalLM" and model["dtype"] == "float32" and model["auto"]
        config = json.loads(CONFIG.read_text())
        for key in ("hidden_size", "num_hidden_layers", "num_key_value_heads", "vocab_size", "head_dim"):
            assert model["config"][key] == config[key]
        # the same model built here: its parameter and buffer bytes, exactly
        built = transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(**config))
        params = sum(p.numel() * p.element_size() for p in built.parameters())
        buffers = sum(b.numel() * b.element_size() for b in built.buffers())
        assert model["params_bytes"] == {"-1": params}
        assert model["buffers_bytes"] == {"-1": buffers}
        # one prefill (2 x 16 prompt tokens), 63 decode steps (the last token is never fed back), labelled
        assert info["phases"]["prefill"]["calls"] == 1 and info["phases"]["prefill"]["last_tokens"] == 32
        assert info["phases"]["decode"]["calls"] == 63 and info["phases"]["decode"]["last_tokens"] == 2
        # a prefill this small (2 x 16 tokens) may stay under the RSS high that building the model set: then
        # it is counted as unresolved, never given a made-up figure
        prefill = info["phases"]["prefill"]
        assert (prefill["peak_bytes"] or 0) > 0 or prefill["unresolved_calls"] == 1
        assert "ru_maxrss" in info["phase_counter"]
        # the ring: weights on the CPU (device -1) == parameters + buffers; the cache is gone after generate
        reader = AgentReader(ring)
        records = reader.read_new().records
        reader.close()
        host = [r for r in records if r.device == -1 and r.weights_bytes is not None]
        assert host and host[-1].weights_bytes == params + buffers
        assert host[-1].kv_bytes == 0  # generate's DynamicCache died with the call: nothing held
        assert max(r.kv_bytes or 0 for r in host) <= 2 * 4 * 2 * 2 * 32 * 4 * (16 + 63)
        assert oct(os.stat(fmt.info_file_path(ring)).st_mode & 0o777) == "0o600"
    finally:
        child.kill()
        child.wait()


def test_autotrack_off_by_environment(tmp_path):
    child = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--batch", "1", "--prompt", "4", "--new", "4", "--hold", "30"],
        env=agent_env(tmp_path, MEMSIGHT_AUTOTRACK="0"),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().startswith("model:")
        deadline = time.monotonic() + 30
        while not discover(str(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.1)
        (ring,) = discover(str(tmp_path)).values()
        time.sleep(1.0)
        # nothing tracked, no hooks: no info file at all, and the ring has no weights
        assert not os.path.exists(fmt.info_file_path(ring))
        reader = AgentReader(ring)
        assert all(r.weights_bytes is None for r in reader.read_new().records)
        reader.close()
    finally:
        child.kill()
        child.wait()


def test_explicit_and_automatic_tracking_count_each_tensor_once(tmp_path):
    inner = torch.nn.Linear(64, 64)
    outer = torch.nn.Sequential(inner, torch.nn.Linear(64, 8))
    expected = sum(p.numel() * 4 for p in outer.parameters())
    agent = Agent(hz=10, directory=str(tmp_path), weights_refresh_s=0.0, kv_refresh_s=0.0)
    agent.open()
    agent.track_model(inner, auto=True)  # built first (a transformers sub-model's post_init)
    agent.track_model(outer, auto=True)
    agent.mark_nested(inner)
    agent.track_model(outer)  # and the user's explicit one-liner on top
    cache = [(torch.zeros(2, 4, 10, 8), torch.zeros(2, 4, 10, 8))]
    agent.track_kv(cache, auto=True)
    agent.track_kv(cache)
    (record,) = agent.collect()
    assert record["weights_bytes"] == expected
    assert record["kv_bytes"] == 2 * 2 * 4 * 10 * 8 * 4
    info = agent.info()
    assert [m["class"] for m in info["models"]] == ["Sequential"]  # the nested one is not listed on its own
    assert info["models"][0]["params_bytes"] == {"-1": expected}
    assert info["models"][0]["auto"] is False  # the user asked for it explicitly too
    agent.stop()


def test_cache_of_unknown_structure_is_named_once_and_never_raises(tmp_path):
    class MyCache:
        def __init__(self):
            self.blob = object()

    agent = Agent(hz=10, directory=str(tmp_path), kv_refresh_s=0.0)
    agent.open()
    agent.track_kv(MyCache_instance := MyCache())
    agent.collect()
    agent.collect()
    assert agent.info()["untracked"] == ["MyCache, unknown structure"]
    assert MyCache_instance is not None
    agent.stop()


def test_a_hook_that_cannot_install_disables_itself_and_says_which(tmp_path):
    import types  # noqa: PLC0415

    from collectors.autotrack import AutoTracker  # noqa: PLC0415

    agent = Agent(hz=10, directory=str(tmp_path))
    agent.open()
    tracker = AutoTracker(agent)
    # a transformers whose modules lack the classes this memsight patches (other internals)
    tracker.patch("transformers.modeling_utils", types.ModuleType("transformers.modeling_utils"))
    tracker.patch("transformers.cache_utils", types.ModuleType("transformers.cache_utils"))
    assert tracker.status["models"].startswith("failed: AttributeError")
    assert tracker.status["caches"].startswith("failed: AttributeError: transformers.cache_utils has no")
    agent.autotrack = tracker
    assert agent.info()["hooks"]["phases"].startswith("failed")
    tracker.close()
    agent.stop()


def test_a_sliding_window_cache_says_the_sequence_length_it_has_seen():
    """Issue 21, item 7: a sliding-window model's cache holds its window (15 tokens here) while the sequence
    grows past it (49); the agent published the window as the cache's tokens, so the plan's context stayed at
    the window. It now publishes both: `tokens` (held) and `seq_tokens` (seen), read from transformers'
    cumulative_length (an int on the dynamic layer: reading it waits for no device)."""
    from collectors.agent import _cache_json, cache_summary  # noqa: PLC0415

    config = transformers.MistralConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, vocab_size=1000, sliding_window=16, max_position_embeddings=512,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.MistralForCausalLM(config).eval()
    ids = torch.randint(0, 1000, (2, 20))
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
        for _ in range(29):
            step = model(ids[:, :1], past_key_values=cache, use_cache=True)
            cache = step.past_key_values
    summary = cache_summary(cache)
    assert summary["layer_tokens"] == [15, 15] and summary["seq_tokens"] == [49, 49]
    published = _cache_json(dict(summary, **{"class": "DynamicCache", "auto": True}))
    assert (published["tokens"], published["seq_tokens"], published["batch"]) == (15, 49, 2)
    # a cache without a window: what it holds is what it has seen
    full = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{k: v for k, v in config.to_dict().items()
                                                                      if k != "sliding_window"}))  # fmt: skip
    with torch.no_grad():
        held = full.eval()(ids, use_cache=True).past_key_values
    assert cache_summary(held)["seq_tokens"] == cache_summary(held)["layer_tokens"] == [20, 20]
