"""KV cache and per-sequence state: EXPECTED.json figures, windows, MLA, state layers, TP, dtypes."""

from __future__ import annotations

import json

import pytest

from planner.errors import PlannerError
from planner.kv import (
    kv_bytes_for_sequence,
    kv_bytes_per_token,
    kv_bytes_per_token_beyond_window,
    kv_dtype_bytes,
    kv_heads_per_rank,
    layer_kv_bytes,
    state_bytes_per_sequence,
)
from planner.spec import load_spec
from tests.conftest import SHARED_CONFIGS, needs_shared


@needs_shared
def test_kv_and_state_equal_expected_for_every_shared_config():
    models = json.loads((SHARED_CONFIGS / "EXPECTED.json").read_text())["models"]
    for name, expected in models.items():
        spec = load_spec(SHARED_CONFIGS / expected["config"])
        assert kv_bytes_per_token(spec, "bf16") == expected["kv_bytes_per_token"], name
        beyond = expected["kv_bytes_per_token_beyond_window"]
        assert kv_bytes_per_token_beyond_window(spec, "bf16") == beyond, name
        assert state_bytes_per_sequence(spec) == expected.get("state_bytes_per_sequence", 0), name


def test_kv_dtype_is_independent_of_weights():
    spec = load_spec("llama-3.1-8b")
    assert kv_bytes_per_token(spec) == 131_072  # auto: the model's bf16
    assert kv_bytes_per_token(spec, "fp8") == 65_536  # fp8 scales are per layer, not per token
    assert kv_bytes_per_token(spec, "fp8_e5m2") == 65_536
    assert kv_bytes_per_token(spec, "fp32") == 262_144
    assert kv_dtype_bytes("auto", load_spec("gpt2")) == 4.0  # gpt2 weights are float32
    fp8_weights = load_spec("deepseek-v3")  # fp8 weights, bf16 activations: auto KV is bf16
    assert kv_dtype_bytes("auto", fp8_weights) == 2.0
    with pytest.raises(PlannerError, match="unknown KV cache dtype 'int4'"):
        kv_bytes_per_token(spec, "int4")


def test_sliding_layers_stop_at_the_window():
    mistral = load_spec("mistral-7b")
    per_token = 32 * 2 * 8 * 128 * 2
    assert kv_bytes_for_sequence(mistral, 1000) == 1000 * per_token
    assert kv_bytes_for_sequence(mistral, 10_000) == 4096 * per_token
    gemma = load_spec("gemma-2-9b")
    layer = 2 * 8 * 256 * 2
    assert kv_bytes_for_sequence(gemma, 5000) == 21 * 5000 * layer + 21 * 4096 * layer
    gpt_oss = load_spec("gpt-oss-20b")
    assert kv_bytes_for_sequence(gpt_oss, 100_000) == 12 * 100_000 * 2048 + 12 * 128 * 2048


def test_mla_latent_is_replicated_on_every_rank():
    spec = load_spec("deepseek-v2-lite")
    assert kv_bytes_per_token(spec) == 27 * (512 + 64) * 2
    assert kv_bytes_per_token(spec, tp=2) == kv_bytes_per_token(spec, tp=1)
    v3 = load_spec("deepseek-v3")
    assert kv_bytes_per_token(v3, "auto", tp=8) == 61 * 576 * 2


def test_state_layers_hold_a_fixed_amount_per_sequence():
    spec = load_spec("qwen3.5-35b-a3b")
    # Gated DeltaNet: 32 value heads x 128 x 128 fp32 recurrent state + (2*2048 + 4096) x 4 bf16 conv window
    per_layer = 32 * 128 * 128 * 4 + (2 * 2048 + 4096) * 4 * 2
    assert state_bytes_per_sequence(spec) == 30 * per_layer
    assert kv_bytes_for_sequence(spec, 1000) == 1000 * 20_480 + 30 * per_layer
    assert kv_bytes_for_sequence(spec, 0) == 0
    assert state_bytes_per_sequence(spec, tp=2) == 30 * per_layer // 2
    nemotron = load_spec("nemotron-h-8b")
    mamba = 128 * 64 * 128 * 4 + (8192 + 2 * 8 * 128) * 4 * 2
    assert state_bytes_per_sequence(nemotron) == 24 * mamba
    assert kv_bytes_per_token(nemotron) == 4 * 2 * 8 * 128 * 2


def test_kv_heads_per_rank_follows_vllm():
    assert [kv_heads_per_rank(8, tp) for tp in (1, 2, 4, 8, 16, 32)] == [8, 4, 2, 1, 1, 1]
    assert kv_heads_per_rank(2, 8) == 1
    with pytest.raises(PlannerError, match="divisible"):
        kv_heads_per_rank(8, 3)
    with pytest.raises(PlannerError, match="divisible"):
        kv_heads_per_rank(8, 12)
    with pytest.raises(PlannerError):
        kv_heads_per_rank(8, 0)


def test_tensor_parallel_split_and_replication():
    spec = load_spec("llama-3.1-8b")
    assert kv_bytes_per_token(spec, tp=2) == 131_072 // 2
    assert kv_bytes_per_token(spec, tp=8) == 131_072 // 8
    assert kv_bytes_per_token(spec, tp=16) == 131_072 // 8  # one replicated KV head per rank
    with pytest.raises(PlannerError, match="tp=3"):
        kv_bytes_per_token(spec, tp=3)
    layer = spec.layers[0]
    assert layer_kv_bytes(layer, 100, "bf16", spec, tp=4) == 100 * 2 * 2 * 128 * 2


def test_pipeline_stage_layers():
    spec = load_spec("gemma-2-9b")
    whole = kv_bytes_for_sequence(spec, 6000)
    first = kv_bytes_for_sequence(spec, 6000, layers=range(0, 21))
    second = kv_bytes_for_sequence(spec, 6000, layers=range(21, 42))
    assert first + second == whole
    with pytest.raises(PlannerError, match="outside"):
        kv_bytes_for_sequence(spec, 10, layers=[42])
    with pytest.raises(PlannerError, match=">= 0"):
        kv_bytes_for_sequence(spec, -1)
