"""Exact parameter counts: EXPECTED.json for every shared config, hand counts, TP-replicated parts."""

from __future__ import annotations

import json

import pytest

from planner.params import count_params, model_tensors
from planner.spec import load_spec
from tests.conftest import SHARED_CONFIGS, needs_shared


def _expected() -> dict:
    return json.loads((SHARED_CONFIGS / "EXPECTED.json").read_text())["models"]


@needs_shared
def test_params_equal_expected_for_every_shared_config():
    models = _expected()
    assert len(models) == 15
    for name, expected in models.items():
        params = count_params(load_spec(SHARED_CONFIGS / expected["config"]))
        assert params.total == expected["params_total"], name
        assert dict(params.by_component) == expected["params_breakdown"], name
        if "params_active_per_token_derived" in expected:
            assert params.active_per_token == expected["params_active_per_token_derived"], name
        else:
            assert params.active_per_token == params.total, name
        if expected["tied_embeddings"]:
            assert params.head == 0, name


def test_tiny_llama_counted_by_hand():
    spec = load_spec({
        "model_type": "llama", "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 10, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    })  # fmt: skip
    params = count_params(spec)
    # per layer: q 8x8 + k 4x8 + v 4x8 + o 8x8 = 192; gate/up/down 3 x 8x16 = 384; two RMSNorms 16
    assert params.per_layer == (592, 592)
    assert (params.embed, params.head, params.final_norm) == (80, 0, 8)
    assert params.total == 80 + 8 + 2 * 592
    assert dict(params.by_component) == {"attention": 384, "embed_tokens": 80, "mlp": 768, "norm": 40}
    assert params.per_layer_replicated == (16, 16)


def test_gpt2_biases_layernorms_and_positions():
    params = count_params(load_spec("gpt2"))
    h = 768
    per_layer = (h * 3 * h + 3 * h) + (h * h + h) + (h * 4 * h + 4 * h) + (4 * h * h + h) + 4 * h
    assert params.per_layer == (per_layer,) * 12
    assert params.embed == 50257 * h + 1024 * h and params.head == 0
    assert params.final_norm == 2 * h
    # LayerNorm weights and biases, plus the biases of the two row-parallel projections (c_proj)
    assert params.per_layer_replicated == (4 * h + 2 * h,) * 12


def test_replicated_parts_under_tensor_parallelism():
    llama = count_params(load_spec("llama-3.1-8b"))
    assert set(llama.per_layer_replicated) == {2 * 4096}
    qwen_moe = count_params(load_spec("qwen3-30b-a3b"))  # norms + q/k norms + router
    assert set(qwen_moe.per_layer_replicated) == {2 * 2048 + 2 * 128 + 128 * 2048}
    gpt_oss = count_params(load_spec("gpt-oss-20b"))
    # norms, o_proj bias, router weight + bias, the experts' down_proj biases (sinks are split with the heads)
    assert set(gpt_oss.per_layer_replicated) == {2 * 2880 + 2880 + (32 * 2880 + 32) + 32 * 2880}
    deepseek = count_params(load_spec("deepseek-v2-lite"))
    # norms + kv_a_proj_with_mqa (ReplicatedLinear in vLLM) + kv_a_layernorm; MoE layers add the router
    dense = 2 * 2048 + (512 + 64) * 2048 + 512
    assert deepseek.per_layer_replicated[0] == dense
    assert deepseek.per_layer_replicated[1] == dense + 64 * 2048


def test_active_parameters_of_moe():
    params = count_params(load_spec("mixtral-8x7b"))
    per_expert = 3 * 4096 * 14336
    assert params.active_per_token == params.total - 32 * 6 * per_expert
    dense = count_params(load_spec("qwen3-8b"))
    assert dense.active_per_token == dense.total


def test_tensor_names_follow_the_checkpoints():
    names = {g.name for g in model_tensors(load_spec("llama-3.2-1b")).all()}
    assert "model.layers.0.self_attn.q_proj.weight" in names and "model.norm.weight" in names
    assert "lm_head.weight" not in names  # tied
    gpt_oss = {g.name for g in model_tensors(load_spec("gpt-oss-20b")).all()}
    assert {"model.layers.0.mlp.router.weight", "model.layers.0.self_attn.sinks",
            "model.layers.0.mlp.experts.gate_up_proj"} <= gpt_oss  # fmt: skip
    nemotron = {g.name for g in model_tensors(load_spec("nemotron-h-8b")).all()}
    assert {"backbone.embeddings.weight", "backbone.layers.0.mixer.in_proj.weight",
            "backbone.layers.7.mixer.q_proj.weight",
            "backbone.layers.1.mixer.up_proj.weight"} <= nemotron  # fmt: skip


def test_mtp_layers_are_not_counted_and_say_so():
    spec = load_spec("deepseek-v3")
    assert any("num_nextn_predict_layers" in a for a in spec.assumptions)
    assert len(count_params(spec).per_layer) == 61


@pytest.mark.parametrize("name", ["qwen3-next-80b-a3b", "qwen3.5-35b-a3b"])
def test_gated_deltanet_layer_by_hand(name):
    spec = load_spec(name)
    params = count_params(spec)
    h = spec.hidden_size
    key_dim, value_dim, v_heads = 16 * 128, 32 * 128, 32
    linear = (h * (2 * key_dim + 2 * value_dim) + h * 2 * v_heads + (2 * key_dim + value_dim) * 4
              + 2 * v_heads + 128 + value_dim * h)  # fmt: skip
    linear_layers = sum(1 for layer in spec.layers if layer.attention.kind == "linear")
    assert params.by_component["linear_attention"] == linear_layers * linear
