"""Tensor/pipeline topology: vLLM's KV-head partition/replication rules, layer splits, weights per rank."""

from __future__ import annotations

import json

import pytest

from planner.errors import PlannerError
from planner.formats import weight_bytes
from planner.kv import kv_bytes_per_token
from planner.params import count_params
from planner.spec import load_spec
from planner.topology import even_split, make_topology, stage_kv_bytes_per_token, stage_weight_bytes
from tests.conftest import SHARED_CONFIGS, needs_shared


def llama_like(heads: int, kv_heads: int, layers: int = 4) -> dict:
    return {
        "model_type": "llama",
        "hidden_size": heads * 64,
        "intermediate_size": 4 * heads * 64,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "vocab_size": 1000,
        "torch_dtype": "bfloat16",
    }


def test_eight_kv_heads_on_sixteen_ranks_are_replicated():
    spec = load_spec("llama-3.1-70b")  # 64 query heads, 8 KV heads, 80 layers, head_dim 128
    topo = make_topology(spec, tp=16)
    assert (topo.kv_heads_total, topo.kv_heads_per_rank, topo.kv_replicas) == (8, 1, 2)
    per_rank = stage_kv_bytes_per_token(spec, "auto", topo, 0)
    assert per_rank == 80 * 2 * 1 * 128 * 2  # one resident head, not half a head
    unreplicated = kv_bytes_per_token(spec)
    assert unreplicated == 327_680
    assert per_rank * 16 == 2 * unreplicated  # aggregate is twice the payload
    assert any("replicated on 2 ranks" in note for note in topo.notes)


def test_kv_heads_partition_when_tp_divides_them():
    spec = load_spec("llama-3.1-70b")
    topo = make_topology(spec, tp=4)
    assert (topo.kv_heads_per_rank, topo.kv_replicas) == (2, 1)
    assert stage_kv_bytes_per_token(spec, "auto", topo, 0) * 4 == kv_bytes_per_token(spec)


def test_divisibility_errors_name_the_problem():
    with pytest.raises(PlannerError, match="32 attention heads"):
        make_topology(load_spec("llama-3.1-8b"), tp=3)
    with pytest.raises(PlannerError, match="12"):  # 12 KV heads cannot be partitioned over 8 ranks
        make_topology(load_spec(llama_like(heads=48, kv_heads=12)), tp=8)
    with pytest.raises(PlannerError, match="4"):  # 6 ranks cannot replicate 4 KV heads evenly
        make_topology(load_spec(llama_like(heads=24, kv_heads=4)), tp=6)
    with pytest.raises(PlannerError, match="at least 1"):
        make_topology(load_spec("llama-3.1-8b"), tp=0)


def test_even_split_follows_vllm_get_pp_indices():
    assert even_split(32, 2) == (16, 16)
    assert even_split(32, 3) == (11, 11, 10)  # the remainder goes before the last stage
    assert even_split(80, 3) == (27, 27, 26)
    assert even_split(10, 4) == (2, 3, 3, 2)
    topo = make_topology(load_spec("llama-3.1-8b"), pp=3)
    assert [len(s) for s in topo.stage_layers] == [11, 11, 10]
    assert topo.stage_layers[1][0] == 11 and topo.stage_layers[2][-1] == 31


def test_explicit_uneven_split_and_its_errors():
    spec = load_spec("llama-3.1-8b")
    topo = make_topology(spec, pp=2, pp_layers=(20, 12))
    assert topo.stage_layers[0] == tuple(range(20))
    with pytest.raises(PlannerError, match="sums to 31"):
        make_topology(spec, pp=2, pp_layers=(20, 11))
    with pytest.raises(PlannerError, match="3 entries but pp=2"):
        make_topology(spec, pp=2, pp_layers=(10, 11, 11))
    with pytest.raises(PlannerError, match="at least one layer"):
        make_topology(spec, pp=2, pp_layers=(32, 0))
    with pytest.raises(PlannerError, match="exceeds"):
        make_topology(spec, pp=33)


def test_weights_per_rank_shard_matrices_and_keep_norms_whole():
    spec = load_spec("llama-3.1-8b")
    params, weights = count_params(spec), weight_bytes(spec, "bf16")
    topo = make_topology(spec, tp=2)
    got = stage_weight_bytes(spec, params, weights, topo, 0)
    per_layer = 218_112_000  # params; 8,192 of them are the two RMSNorms, replicated
    expected_layer = ((per_layer - 8192) // 2 + 8192) * 2
    assert got.layers == 32 * expected_layer
    assert got.embed == 128256 * 4096 // 2 * 2
    assert got.head == 128256 * 4096 // 2 * 2 + 4096 * 2
    assert got.total == 8_030_527_488
    assert got.total > weights.total // 2  # never the total divided by the ranks


def test_pipeline_stages_hold_embeddings_first_and_head_last():
    spec = load_spec("llama-3.1-8b")
    params, weights = count_params(spec), weight_bytes(spec, "bf16")
    topo = make_topology(spec, pp=2)
    first = stage_weight_bytes(spec, params, weights, topo, 0)
    last = stage_weight_bytes(spec, params, weights, topo, 1)
    assert first.embed == weights.embed and first.head == 0
    assert last.embed == 0 and last.head == weights.head + weights.final_norm
    assert first.total + last.total == weights.total


def test_tied_embeddings_need_a_head_copy_on_the_last_stage():
    spec = load_spec("llama-3.2-1b")  # tie_word_embeddings: true
    params, weights = count_params(spec), weight_bytes(spec, "bf16")
    assert weights.head == 0
    one = stage_weight_bytes(spec, params, weights, make_topology(spec), 0)
    assert one.total == weights.total
    topo = make_topology(spec, pp=2)
    last = stage_weight_bytes(spec, params, weights, topo, 1)
    assert last.head == weights.embed + weights.final_norm


def test_replicated_kv_projections_cost_extra_weights():
    spec = load_spec("llama-3.1-70b")
    params, weights = count_params(spec), weight_bytes(spec, "bf16")
    layer_params = 855_654_400  # q, k, v, o + gate, up, down + two norms (80 of them + embeddings = 70.55B)
    norms = 2 * 8192
    assert params.per_layer[0] == layer_params and params.per_layer_replicated[0] == norms
    tp8 = stage_weight_bytes(spec, params, weights, make_topology(spec, tp=8), 0)
    tp16 = stage_weight_bytes(spec, params, weights, make_topology(spec, tp=16), 0)
    assert tp8.layers == 80 * ((layer_params - norms) * 2 // 8 + norms * 2)
    # at tp=16 each rank holds one whole K and V head (1/8 of the K/V projections), not half a head
    one_head_kv_proj = 8192 * (128 + 128) * 2  # bytes
    extra = one_head_kv_proj - one_head_kv_proj * 8 // 16
    assert tp16.layers == 80 * ((layer_params - norms) * 2 // 16 + norms * 2 + extra)


@needs_shared
def test_stage_kv_per_token_matches_measured_figures_for_every_shared_config():
    # EXPECTED.json measured bf16 caches
    expected = json.loads((SHARED_CONFIGS / "EXPECTED.json").read_text())["models"]
    checked = 0
    for name, figures in expected.items():
        spec = load_spec(SHARED_CONFIGS / figures["config"])
        one = make_topology(spec)
        assert stage_kv_bytes_per_token(spec, "bf16", one, 0) == figures["kv_bytes_per_token"], name
        # two pipeline stages together hold exactly what one stage holds
        if spec.num_layers >= 2:
            two = make_topology(spec, pp=2)
            split = sum(stage_kv_bytes_per_token(spec, "bf16", two, s) for s in range(2))
            assert split == figures["kv_bytes_per_token"], name
        checked += 1
    assert checked >= 15
