"""vLLM's pool, blocks, KV tokens and max concurrency, checked against real startup logs and the per-version
rules of ../shared/reference/vllm-kv-formulas.md.

Real logs print every memory figure rounded to 0.01 GiB, so a block count can only be pinned to the window
those roundings allow; the tests assert that the logged count is inside that window, and that from the
logged count the tokens and the "%.2fx" concurrency line come out exactly as logged.
"""

from __future__ import annotations

import itertools
import math

import pytest

from planner.errors import PlannerError
from planner.spec import load_spec
from planner.units import GiB
from planner.vllm import DEFAULT_VLLM_VERSION, parse_version, vllm_pool

LLAMA3_8B_BLOCK = 32 * 2 * 16 * 8 * 128 * 2  # 2 MiB: 32 layers x K+V x 16 tokens x 8 heads x 128 x bf16


def gib(x: float) -> int:
    return round(x * GiB)


def block_window(spec, version, mml, total, util, parts, rounding=0.005, **kw):
    """Blocks for every corner of the +-0.005 GiB rounding of the logged figures."""
    counts = []
    for signs in itertools.product((-1, 1), repeat=1 + len(parts)):
        t = gib(total + signs[0] * rounding)
        w, a, n = (gib(p + s * rounding) for p, s in zip(parts, signs[1:], strict=True))
        pool = vllm_pool(
            spec,
            version=version,
            max_model_len=mml,
            total_bytes=t,
            gpu_memory_utilization=util,
            weights_bytes=w,
            activation_bytes=a,
            non_torch_bytes=n,
            **kw,
        )
        counts.append(pool.num_blocks)
    return min(counts), max(counts)


def test_default_version_is_newest_read():
    assert DEFAULT_VLLM_VERSION == "0.33.0"
    assert parse_version("0.10.1.1") == (0, 10, 1)
    assert parse_version("v0.6.4.post1") == (0, 6, 4)
    with pytest.raises(PlannerError, match="version"):
        parse_version("latest")


def test_issue_12330_llama3_8b_a100_40gb():
    """vllm-project/vllm #12330 (V0 engine, gpu_executor.py):
    total_gpu_memory (39.50GiB) x gpu_memory_utilization (0.90) = 35.55GiB
    model weights take 14.96GiB; non_torch_memory takes 0.10GiB; PyTorch activation peak memory takes 9.37GiB;
    the rest of the memory reserved for KV Cache is 11.12GiB.
    # GPU blocks: 5691, # CPU blocks: 2048
    Maximum concurrency for 8192 tokens per request: 11.12x
    """
    spec = load_spec("llama-3.1-8b")  # Llama-3-8B and 3.1-8B share every cache shape
    pool = vllm_pool(
        spec,
        version="0.6.6",
        max_model_len=8192,
        total_bytes=gib(39.50),
        gpu_memory_utilization=0.9,
        weights_bytes=gib(14.96),
        activation_bytes=gib(9.37),
        non_torch_bytes=gib(0.10),
    )
    assert pool.engine == "V0"
    assert pool.bytes_per_block == LLAMA3_8B_BLOCK
    assert f"{pool.pool_bytes / GiB:.2f}" == "11.12"
    assert f"{pool.requested_bytes / GiB:.2f}" == "35.55"
    assert not pool.activation_predicted
    lo, hi = block_window(spec, "0.6.6", 8192, 39.50, 0.9, (14.96, 9.37, 0.10))
    assert lo <= 5691 <= hi and hi - lo <= 20
    assert abs(pool.num_blocks - 5691) <= 5
    # From the logged block count the rest of the log follows exactly.
    exact = vllm_pool(spec, version="0.6.6", max_model_len=8192, kv_pool_bytes=5691 * LLAMA3_8B_BLOCK)
    assert exact.num_blocks == 5691
    assert exact.kv_cache_tokens == 5691 * 16
    assert exact.max_concurrency_text == "11.12x"
    assert exact.log_lines == (
        "# GPU blocks: 5691",
        "Maximum concurrency for 8192 tokens per request: 11.12x",
    )


@pytest.mark.parametrize(
    ("mml", "peak", "logged_blocks", "logged_conc", "logged_tokens"),
    [(20000, 17.06, 1952, "1.56x", None), (29000, 17.98, 1478, "0.82x", 23648)],
)
def test_issue_10517_llama31_8b_rtx3090(mml, peak, logged_blocks, logged_conc, logged_tokens):
    """vllm-project/vllm #10517 (V0 <= 0.6.4 'Memory profiling results' line, RTX 3090):
    total_gpu_memory=23.58GiB peak_torch_memory=17.06GiB non_torch_memory=0.35GiB kv_cache_size=3.81GiB
    gpu_memory_utilization=0.90 / GPU blocks: 1952 / Maximum concurrency for 20000 tokens per request: 1.56x
    (29000: peak 17.98, kv 2.89, 1478 blocks, 0.82x, 'maximum number of tokens ... in KV cache (23648)').
    In this era the torch peak includes the weights ('Loading model weights took 14.9888 GB')."""
    spec = load_spec("llama-3.1-8b")
    weights = 14.9888
    pool = vllm_pool(
        spec,
        version="0.6.4",
        max_model_len=mml,
        total_bytes=gib(23.58),
        gpu_memory_utilization=0.9,
        weights_bytes=gib(weights),
        activation_bytes=gib(peak - weights),
        non_torch_bytes=gib(0.35),
    )
    kv_logged = {20000: "3.81", 29000: "2.89"}[mml]
    assert f"{pool.pool_bytes / GiB:.2f}" == kv_logged
    lo, hi = block_window(spec, "0.6.4", mml, 23.58, 0.9, (weights, peak - weights, 0.35))
    assert lo <= logged_blocks <= hi
    exact = vllm_pool(spec, version="0.6.4", max_model_len=mml, kv_pool_bytes=logged_blocks * LLAMA3_8B_BLOCK)
    assert exact.max_concurrency_text == logged_conc
    assert exact.log_lines[0] == f"# GPU blocks: {logged_blocks}"
    if logged_tokens is not None:
        assert exact.kv_cache_tokens == logged_tokens
        assert any("does not fit" in note for note in exact.notes)  # 0.82x: vLLM refused to start


@pytest.mark.parametrize(
    ("total", "util", "weights", "non_torch", "act", "logged_pool"),
    [
        (79.22, 0.90, 14.96, 1.79, 1.26, "53.29"),  # vllm PR #10511: Meta-Llama-3-8B on H100
        (79.22, 0.90, 19.86, 0.16, 36.63, "14.65"),  # vllm PR #12126: Llama-3.2-11B-Vision on H100
        (23.58, 0.99, 21.21, 0.20, 0.37, "1.57"),  # vllm PR #14447: a 4-bit MoE on 24 GB cards
    ],
)
def test_pool_arithmetic_matches_logged_v0_breakdowns(total, util, weights, non_torch, act, logged_pool):
    spec = load_spec("llama-3.1-8b")  # blocks are not asserted here: only the pool line
    pool = vllm_pool(
        spec,
        version="0.8.5",
        engine="v0",
        max_model_len=4096,
        total_bytes=gib(total),
        gpu_memory_utilization=util,
        weights_bytes=gib(weights),
        activation_bytes=gib(act),
        non_torch_bytes=gib(non_torch),
    )
    # every logged figure is rounded to 0.01 GiB: the pool can differ by the sum of those half-steps
    tolerance = 0.005 * (util + 3) + 0.005
    assert abs(pool.pool_bytes / GiB - float(logged_pool)) <= tolerance
    assert pool.pool_bytes == math.floor(gib(total) * util - gib(weights) - gib(act) - gib(non_torch))


def test_requested_memory_is_ceiled_from_0_14():
    spec = load_spec("llama-3.1-8b")
    total = 85_899_345_921  # odd, so total x 0.9 is not an integer
    old = vllm_pool(
        spec,
        version="0.13.0",
        max_model_len=8192,
        total_bytes=total,
        weights_bytes=0,
        activation_bytes=0,
        non_torch_bytes=0,
    )
    new = vllm_pool(
        spec,
        version="0.14.0",
        max_model_len=8192,
        total_bytes=total,
        weights_bytes=0,
        activation_bytes=0,
        non_torch_bytes=0,
    )
    assert old.requested_bytes == math.floor(total * 0.9)
    assert new.requested_bytes == math.ceil(total * 0.9) == old.requested_bytes + 1


def test_concurrency_ceil_and_token_line_by_version():
    # max_model_len not a multiple of the block size: V0 divides tokens, V1 >= 0.9.1 divides by cdiv(mml, bs)
    spec = load_spec("llama-3.1-8b")
    pool = 630 * LLAMA3_8B_BLOCK
    v0 = vllm_pool(spec, version="0.8.5", engine="v0", max_model_len=1000, kv_pool_bytes=pool)
    v1_old = vllm_pool(spec, version="0.9.0", max_model_len=1000, kv_pool_bytes=pool)
    v1 = vllm_pool(spec, version="0.20.0", max_model_len=1000, kv_pool_bytes=pool)
    v1_new = vllm_pool(spec, version="0.21.0", max_model_len=1000, kv_pool_bytes=pool)
    assert v0.num_blocks == v1.num_blocks == 630
    assert v0.max_concurrency == v1_old.max_concurrency == 630 * 16 / 1000  # 10.08
    assert v1.max_concurrency == 630 / 63 == 10.0
    assert v1.kv_cache_tokens == 630 * 16  # <= 0.20: blocks x block size
    assert v1_new.kv_cache_tokens == 10_000  # >= 0.21: int(concurrency x max_model_len)
    assert v1_new.log_lines[-2:] == (
        "GPU KV cache size: 10,000 tokens",
        "Maximum concurrency for 1,000 tokens per request: 10.00x",
    )


def test_cuda_graph_estimate_deducted_from_0_20_only():
    spec = load_spec("llama-3.1-8b")
    kw = dict(
        max_model_len=8192,
        total_bytes=80 * GiB,
        weights_bytes=gib(14.96),
        activation_bytes=gib(1.26),
        non_torch_bytes=gib(0.5),
        cudagraph_bytes=GiB,
    )
    before = vllm_pool(spec, version="0.19.0", **kw)
    after = vllm_pool(spec, version="0.20.0", **kw)
    assert before.cudagraph_bytes == 0 and after.cudagraph_bytes == GiB
    assert before.num_blocks - after.num_blocks in (511, 512, 513)  # 1 GiB / 2 MiB blocks
    assert any("ignored" in note for note in before.notes)


def test_tp_replicated_kv_heads_and_min_over_ranks():
    spec = load_spec("llama-3.1-70b")  # 8 KV heads
    tp16 = vllm_pool(spec, max_model_len=8192, tp=16, kv_pool_bytes=10 * GiB)
    tp8 = vllm_pool(spec, max_model_len=8192, tp=8, kv_pool_bytes=10 * GiB)
    # one resident head per rank either way: tp=16 does not halve the per-rank page
    assert tp16.bytes_per_block == tp8.bytes_per_block == 80 * 2 * 16 * 1 * 128 * 2
    # uneven pipeline: the stage with more layers has bigger blocks and limits every rank
    pp = vllm_pool(spec, max_model_len=8192, pp=2, pp_layers=(50, 30), kv_pool_bytes=10 * GiB)
    per_stage = {r.pp_stage: r.num_blocks for r in pp.ranks}
    assert per_stage[0] < per_stage[1]
    assert pp.num_blocks == per_stage[0] == 10 * GiB // (50 * 2 * 16 * 8 * 128 * 2)


def test_mla_page_has_no_value_half_and_is_replicated():
    spec = load_spec("deepseek-v2-lite")  # kv_lora_rank 512 + rope 64 = 576, 27 layers
    one = vllm_pool(spec, max_model_len=4096, kv_pool_bytes=GiB)
    two = vllm_pool(spec, max_model_len=4096, kv_pool_bytes=GiB, tp=2)
    assert one.bytes_per_block == 27 * 16 * 576 * 2
    assert two.bytes_per_block == one.bytes_per_block


def test_sliding_window_only_model_needs_few_blocks_per_request():
    spec = load_spec("mistral-7b")  # every layer sliding, W = 4096
    pool = vllm_pool(
        spec, version="0.11.0", max_model_len=32768, kv_pool_bytes=8 * GiB, max_num_batched_tokens=2048
    )
    assert pool.num_groups == 1
    assert pool.blocks_per_request == math.ceil(min(4096 - 1 + 2048, 32768) / 16) + 1
    assert pool.kv_cache_tokens == pool.num_blocks * 16  # counts pool slots, not concurrency x mml
    assert pool.max_concurrency == pool.num_blocks / pool.blocks_per_request
    # V0 sizes it as full attention
    v0 = vllm_pool(spec, version="0.6.6", max_model_len=32768, kv_pool_bytes=8 * GiB)
    assert v0.max_concurrency == v0.num_blocks * 16 / 32768


def test_hybrid_sliding_and_full_groups_gemma2():
    spec = load_spec("gemma-2-9b")  # 42 layers alternating sliding (W 4096) / full, 8 KV heads x 256
    page = 2 * 16 * 8 * 256 * 2
    old = vllm_pool(
        spec, version="0.11.0", max_model_len=8192, kv_pool_bytes=4 * GiB, max_num_batched_tokens=2048
    )
    assert old.num_groups == 2
    assert old.bytes_per_block == 21 * page
    assert old.num_blocks == 4 * GiB // (21 * page)
    assert old.blocks_per_request == 8192 // 16 + math.ceil(min(4095 + 2048, 8192) / 16) + 1
    assert old.kv_cache_tokens == old.num_blocks // 2 * 16  # 0.9.1 - 0.20: blocks // groups x bs
    new = vllm_pool(
        spec, version="0.21.0", max_model_len=8192, kv_pool_bytes=4 * GiB, max_num_batched_tokens=2048
    )
    assert new.kv_cache_tokens == int(new.max_concurrency * 8192)


def test_activation_prediction_is_flagged():
    spec = load_spec("llama-3.1-8b")
    pool = vllm_pool(
        spec,
        max_model_len=8192,
        total_bytes=gib(39.50),
        weights_bytes=gib(14.96),
        non_torch_bytes=gib(0.10),
        max_num_batched_tokens=8192,
    )
    assert pool.activation_predicted
    assert any("PREDICTED" in note for note in pool.notes)
    # forward of 8192 tokens + sampler logits of 256 rows (bf16 + fp32)
    assert pool.activation_bytes == 8192 * (4 * 4096 + 3 * 14336) * 2 + 256 * 128256 * 6


def test_bad_inputs_are_planner_errors():
    spec = load_spec("llama-3.1-8b")
    with pytest.raises(PlannerError, match="0.6.4"):
        vllm_pool(spec, version="0.5.4", max_model_len=8192, kv_pool_bytes=GiB)
    with pytest.raises(PlannerError, match="V0"):
        vllm_pool(spec, version="0.11.0", engine="v0", max_model_len=8192, kv_pool_bytes=GiB)
    with pytest.raises(PlannerError, match="total memory"):
        vllm_pool(spec, max_model_len=8192)
    with pytest.raises(PlannerError, match="gpu_memory_utilization"):
        vllm_pool(spec, max_model_len=8192, total_bytes=GiB, gpu_memory_utilization=1.5)
    with pytest.raises(PlannerError, match="attention heads"):
        vllm_pool(spec, max_model_len=8192, kv_pool_bytes=GiB, tp=3)


def test_hybrid_state_models_are_refused_clearly():
    spec = load_spec("nemotron-h-8b")
    with pytest.raises(PlannerError, match="Mamba/linear-attention"):
        vllm_pool(spec, max_model_len=8192, kv_pool_bytes=GiB)


def test_v1_log_qwen25_15b_available_memory_to_tokens():
    """A recent V1 log (kv_cache_utils.py:1708, the >= 0.21 token line), Qwen/Qwen2.5-1.5B-Instruct on a
    DGX Spark (public repo doc, found with the code search):
        Available KV cache memory: 0.56 GiB
        GPU KV cache size: 20,992 tokens"""
    spec = load_spec("qwen2.5-1.5b")  # 28 layers x 2 KV heads x 128: 458,752 B per 16-token block
    page = 28 * 2 * 16 * 2 * 128 * 2
    lo = vllm_pool(spec, version="0.26.0", max_model_len=32768, kv_pool_bytes=gib(0.555))
    hi = vllm_pool(spec, version="0.26.0", max_model_len=32768, kv_pool_bytes=gib(0.565))
    assert lo.bytes_per_block == page
    assert lo.num_blocks <= 20_992 // 16 <= hi.num_blocks
    exact = vllm_pool(spec, version="0.26.0", max_model_len=32768, kv_pool_bytes=1312 * page)
    assert exact.log_lines[0] == "GPU KV cache size: 20,992 tokens"


def test_v1_log_qwen3_17b_tokens_and_concurrency():
    """vLLM 0.26.0, `vllm serve Qwen/Qwen3-1.7B --max-model-len 34816` (public repo notes):
    'GPU KV cache size: 226,800 tokens', 'max concurrency 6.51x at full 34,816-token requests'."""
    spec = load_spec("qwen3-1.7b")
    page = 28 * 2 * 16 * 8 * 128 * 2
    pool = vllm_pool(spec, version="0.26.0", max_model_len=34816, kv_pool_bytes=14_175 * page)
    assert pool.num_blocks == 14_175 and pool.blocks_per_request == 34816 // 16
    assert pool.kv_cache_tokens == 226_800  # int(14175 / 2176 * 34816)
    assert pool.max_concurrency_text == "6.51x"
