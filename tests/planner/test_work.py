"""Work and traffic: roofline (the labs' figures), causal attention work, one-read decode traffic."""

from __future__ import annotations

import pytest

from planner.errors import PlannerError
from planner.formats import weight_bytes
from planner.params import count_params
from planner.spec import load_spec
from planner.units import GiB
from planner.work import attention_prefill_flops, causal_pairs, decode_traffic, roofline_gflops


def test_roofline_lab_figures():
    # seeds/000 and seeds/002: I=8, B=80 -> 640; I=8, B=160 -> the 1000 GFLOP/s cap; I=2, B=80 -> 160
    assert roofline_gflops(8, 80) == 640
    assert roofline_gflops(8, 160) == 1000
    assert roofline_gflops(2, 80) == 160
    assert roofline_gflops(8, 160, peak_gflops=2000) == 1280


def test_roofline_rejects_nonsense():
    with pytest.raises(PlannerError, match="roofline"):
        roofline_gflops(-1, 80)
    with pytest.raises(PlannerError, match="roofline"):
        roofline_gflops(8, 80, peak_gflops=0)


def test_causal_pairs_full_and_sliding():
    assert causal_pairs(1) == 1
    assert causal_pairs(4) == 10  # 1 + 2 + 3 + 4
    # window 2 over 5 queries: 1, 2, 2, 2, 2
    assert causal_pairs(5, window=2) == 9
    assert causal_pairs(5, window=5) == causal_pairs(5) == causal_pairs(5, window=99)
    brute = sum(min(i, 4096) for i in range(1, 10_001))
    assert causal_pairs(10_000, window=4096) == brute


def test_attention_work_is_the_textbook_expression_for_llama():
    spec = load_spec("llama-3.1-8b")
    n = 8192
    # 2 * L * n_q * d * N(N+1), multiply and add counted as two
    assert attention_prefill_flops(spec, n) == 2 * 32 * 32 * 128 * n * (n + 1)
    # one pipeline stage's share is its layers' share
    assert attention_prefill_flops(spec, n, layers=range(8)) * 4 == attention_prefill_flops(spec, n)


def test_sliding_layers_use_their_own_pair_count():
    spec = load_spec("mistral-7b")
    n = 16384
    per_layer = 2 * 32 * 128 * 2 * causal_pairs(n, 4096)
    assert attention_prefill_flops(spec, n) == 32 * per_layer
    assert attention_prefill_flops(spec, n) < 2 * 32 * 32 * 128 * n * (n + 1)


def test_decode_traffic_lesson_spark_figure():
    # seeds/003: 100 users at 8K on the Spark read 15 GiB of weights + 100 GiB of caches through 273 GB/s:
    # about 0.45 s per step, about 2 tokens/s each.
    spec = load_spec("llama-3.1-8b")
    params = count_params(spec)
    weights = weight_bytes(spec, "bf16")
    traffic = decode_traffic(spec, params, weights.total, context=8192, users=100, bandwidth_gbs=273)
    assert traffic.weight_bytes_read == 8_030_261_248 * 2
    assert traffic.kv_bytes_read == 100 * GiB
    assert traffic.step_seconds == pytest.approx(0.452, abs=0.002)
    assert 2.0 < traffic.tokens_per_second_per_user < 2.3
    assert traffic.tokens_per_second_total == pytest.approx(100 * traffic.tokens_per_second_per_user)


def test_decode_traffic_reads_active_weights_only_for_moe():
    spec = load_spec("qwen3-30b-a3b")
    params = count_params(spec)
    assert params.active_per_token < params.total
    weights = weight_bytes(spec, "bf16")
    traffic = decode_traffic(spec, params, weights.total, context=0, users=1)
    assert traffic.weight_bytes_read == weights.total * params.active_per_token // params.total
    assert traffic.kv_bytes_read == 0
    assert traffic.step_seconds is None  # no bandwidth given, no speed claimed
