"""vLLM's pool, blocks, KV tokens and max concurrency, checked against real startup logs and the per-version
rules of ../shared/reference/vllm-kv-formulas.md.

Real logs print every memory figure rounded to 0.01 GiB, so a block count can only be pinned to the window
those roundings allow; the tests assert that the logged count is inside that window, and that from the
logged count the tokens and the "%.2fx" concurrency line come out exactly as logged.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import pytest

from planner.engines.vllm.activation import profile_activation
from planner.engines.vllm.pool import vllm_pool
from planner.engines.vllm.scheduler import default_scheduler_limits
from planner.engines.vllm.version import DEFAULT_VLLM_VERSION, parse_version
from planner.errors import PlannerError
from planner.spec import load_spec
from planner.units import GiB

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
    spec = load_spec("llama-3.1-8b")  # h 4096, I 14336, V 128256, 32 q heads x 128, 8 KV heads
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
    profile = pool.activation_profile
    assert profile is not None and profile.engine == "V1" and profile.sampler_path == "v2-greedy"
    assert pool.max_num_seqs == 256  # V1 default below 70 GiB, min(256, max_num_batched_tokens)
    # 0.33 (V1, model runner V2 for every model from 0.29): eager forward max(3h + 3I, 4h + I, 4h + 2q + 2kv)
    # per token (LlamaMLP frees gate_up) against model runner V2's dummy sampler run, a greedy Gumbel argmax
    # on the bf16 logits: hidden states (N + R rows of h), the logits, and int64 + fp32 partial maxima per
    # 1,024-wide block of the vocabulary (planner/engines/vllm/runner_v2.py).
    forward = 8192 * 2 * max(3 * 4096 + 3 * 14336, 4 * 4096 + 14336, 4 * 4096 + 2 * 4096 + 2 * 1024)
    sampler = (8192 + 256) * 4096 * 2 + 256 * 128256 * 2 + 256 * -(-128256 // 1024) * (8 + 4)
    assert profile.forward_bytes == forward
    assert profile.hidden_bytes + profile.logits_bytes + profile.sampler_bytes == sampler
    assert pool.activation_bytes == max(forward, sampler)  # >= 0.27: transient only, nothing kept counts
    # every term of the prediction is in the notes, with where it comes from
    assert any("LlamaMLP frees gate_up" in note for note in pool.notes)
    assert any("greedy Gumbel argmax" in note and "sample/sampler.py" in note for note in pool.notes)


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


def test_hybrid_state_models_outside_the_read_versions_are_refused_clearly():
    spec = load_spec("nemotron-h-8b")
    with pytest.raises(PlannerError, match="Mamba/linear-attention models are not modelled"):
        vllm_pool(spec, max_model_len=8192, kv_pool_bytes=GiB, version="0.33.0")  # checkpoint alignment
    with pytest.raises(PlannerError, match="not modelled"):
        vllm_pool(spec, max_model_len=8192, kv_pool_bytes=GiB, version="0.10.1")  # before the first read
    with pytest.raises(PlannerError, match="V1 only"):
        vllm_pool(spec, max_model_len=8192, kv_pool_bytes=GiB, version="0.10.2", engine="V0")
    with pytest.raises(PlannerError, match="hybrid KV-cache manager"):
        vllm_pool(spec, max_model_len=8192, kv_pool_bytes=GiB, version="0.11.0", hybrid_manager=False)
    with pytest.raises(PlannerError, match="no Qwen3.5 model"):
        vllm_pool(load_spec("qwen3.5-35b-a3b"), max_model_len=8192, kv_pool_bytes=GiB, version="0.14.0")
    # 0.26 turns prefix caching on for hybrids: Nemotron-H's "all" mode is not modelled, off it is
    with pytest.raises(PlannerError, match="mamba_cache_mode 'all'"):
        vllm_pool(spec, max_model_len=8192, kv_pool_bytes=GiB, version="0.26.0")
    off = vllm_pool(
        spec, max_model_len=8192, kv_pool_bytes=GiB, version="0.26.0", enable_prefix_caching=False
    )
    assert off.blocks_per_request == math.ceil(8192 / off.block_size) + 6
    # 0.21-0.25 were not read: whether prefix caching is on must be said
    with pytest.raises(PlannerError, match="enable_prefix_caching"):
        vllm_pool(load_spec("qwen3-next-80b-a3b"), max_model_len=8192, kv_pool_bytes=GiB, version="0.24.0")


# Qwen3-Next / Qwen3.5 Gated DeltaNet: 16 key heads, 32 value heads, 128 x 128, conv kernel 4; attention 2 KV
# heads x 256. vLLM's state page (mamba_utils.py): conv (4 - 1) x (2*16*128 + 32*128) / tp in the model
# dtype + temporal 32/tp x 128 x 128 in bf16 (<= 0.14, Qwen3-Next) or fp32 (Qwen3.5's mamba_ssm_dtype).
GDN_CONV = 3 * (2 * 16 * 128 + 32 * 128)
GDN_TEMPORAL = 32 * 128 * 128


def test_hybrid_qwen3_next_v0102_tp2_log():
    """A real vLLM 0.10.2 startup log (public repo file, code-search id 7292846353):
    Qwen3-Next-80B-A3B-Instruct, `--tensor-parallel-size 2`, bf16, max model len 262144, FlashAttention:
        Setting attention block size to 544 tokens to ensure that attention page size is >= mamba page size.
        Padding mamba page size by 1.49% to ensure that mamba page size and attention page size are ...
        Available KV cache memory: 44.59 GiB
        GPU KV cache size: 973,760 tokens
        Maximum concurrency for 262,144 tokens per request: 14.77x"""
    spec = load_spec("qwen3-next-80b-a3b")
    state = (GDN_CONV // 2 + GDN_TEMPORAL // 2) * 2  # 548,864 B per rank at tp=2
    per_token = 2 * 1 * 256 * 2  # K+V, 1 KV head per rank, bf16
    block = 16 * math.ceil(state / (16 * per_token))
    assert (state, block) == (548_864, 544)
    kw = dict(version="0.10.2", tp=2, max_model_len=262_144, weights_bytes=0, activation_bytes=0)
    lo = vllm_pool(spec, kv_pool_bytes=gib(44.585), **kw)
    hi = vllm_pool(spec, kv_pool_bytes=gib(44.595), **kw)
    assert lo.block_size == 544
    assert lo.log_lines[:2] == (
        "Setting attention block size to 544 tokens to ensure that attention page size is >= mamba page "
        "size.",
        "Padding mamba page size by 1.49% to ensure that mamba page size and attention page size are exactly "
        "equal.",
    )
    # 12 full + 36 GDN layers: group size 12 -> 1 attention group and 3 state groups sharing one pool
    assert lo.num_groups == 4 and lo.bytes_per_block == 12 * 544 * per_token
    assert [g.kind for g in lo.groups] == ["linear", "linear", "linear", "full"]  # layer order, as vLLM
    assert lo.blocks_per_request == math.ceil(262_144 / 544) + 3  # 482 attention blocks + 1 state block x 3
    # the log pins the blocks to 7162 or 7163 (973,760 = blocks // 4 * 544; 14.77 = blocks / 485), inside the
    # window the 0.01 GiB rounding of "44.59 GiB" allows; the logged figure itself gives 7162 and both lines
    assert (lo.num_blocks, hi.num_blocks) == (7161, 7163)
    logged = vllm_pool(spec, kv_pool_bytes=gib(44.59), **kw)
    assert logged.num_blocks == 7162
    assert logged.log_lines[-2:] == (
        "GPU KV cache size: 973,760 tokens",
        "Maximum concurrency for 262,144 tokens per request: 14.77x",
    )
    for blocks in (7162, 7163):
        exact = vllm_pool(spec, kv_pool_bytes=blocks * lo.bytes_per_block, **kw)
        assert exact.num_blocks == blocks
        assert exact.kv_cache_tokens == 973_760  # the <= 0.20 hybrid quirk: blocks // groups * block size
        assert exact.log_lines[-2:] == (
            "GPU KV cache size: 973,760 tokens",
            "Maximum concurrency for 262,144 tokens per request: 14.77x",
        )


def test_hybrid_qwen3_next_fp8_kv_tp2_log():
    """vLLM issue 26646 (Oct 2025, the 0.11 era: the size lines are printed once per worker, before the min):
    Qwen3-Next-80B-A3B int4 AutoRound, `--tensor-parallel-size 2 --max-model-len 215040 --kv-cache-dtype
    fp8_e5m2`:
        GPU KV cache size: 90,048 tokens
        Maximum concurrency for 215,040 tokens per request: 1.66x
    An fp8 attention page is half as large, so the block doubles to 16 * cdiv(548,864, 16 * 512) = 1072
    tokens; 90,048 = blocks // 4 * 1072 and 1.66 = blocks / (cdiv(215040, 1072) + 3) pin the blocks to
    338-339.
    """
    spec = load_spec("qwen3-next-80b-a3b")
    kw = dict(version="0.11.0", tp=2, max_model_len=215_040, kv_dtype="fp8_e5m2")
    probe = vllm_pool(spec, kv_pool_bytes=GiB, **kw)
    assert probe.block_size == 1072 and probe.bytes_per_block == 12 * 1072 * 512
    assert probe.blocks_per_request == 201 + 3
    lines = (
        "GPU KV cache size: 90,048 tokens",
        "Maximum concurrency for 215,040 tokens per request: 1.66x",
    )
    for blocks in (337, 338, 339, 340):
        pool = vllm_pool(spec, kv_pool_bytes=blocks * probe.bytes_per_block, **kw)
        assert (pool.log_lines[-2:] == lines) == (blocks in (338, 339))


def test_hybrid_qwen35_block_size_follows_the_fp32_state():
    """Qwen3.5's config sets mamba_ssm_dtype float32, which vLLM keeps for the GDN state after 0.14. Logs:
    a vLLM 0.17.1 build serving Qwen3_5MoeForConditionalGeneration (code-search id 55375616592) and a TP=2
    Qwen3.5-35B-A3B run (id 66696367809) both print "Setting attention block size to 1056 tokens" and
    "Padding mamba page size by 0.76%"."""
    spec = load_spec("qwen3.5-35b-a3b")
    for tp in (1, 2):
        state = GDN_CONV // tp * 2 + GDN_TEMPORAL // tp * 4
        per_token = 2 * (2 // tp) * 256 * 2
        assert 16 * math.ceil(state / (16 * per_token)) == 1056
        for version in ("0.17.1", "0.20.0"):
            pool = vllm_pool(spec, version=version, tp=tp, max_model_len=32_768, kv_pool_bytes=20 * GiB)
            assert pool.block_size == 1056
            assert pool.log_lines[0].startswith("Setting attention block size to 1056 tokens")
            assert pool.log_lines[1].startswith("Padding mamba page size by 0.76% ")
            assert pool.bytes_per_block == 10 * 1056 * per_token  # 10 full + 30 GDN layers: 4 groups of 10
            assert pool.num_blocks == 20 * GiB // pool.bytes_per_block
            assert pool.blocks_per_request == math.ceil(32_768 / 1056) + 3
    # --mamba-ssm-cache-dtype bfloat16 brings the state back to the model dtype: 544-token blocks
    assert (
        vllm_pool(
            spec, version="0.20.0", max_model_len=32_768, kv_pool_bytes=GiB, mamba_ssm_cache_dtype="bfloat16"
        ).block_size
        == 544
    )


def test_hybrid_align_mode_v024_logs():
    """Two vLLM 0.24.0 logs (club-3090 issues 612 and 652) of Qwen3.6-35B-A3B, which has Qwen3.5-35B-A3B's
    shapes (10 attention + 30 GDN layers, fp32 GDN state), `--kv-cache-dtype fp8 --enable-prefix-caching
    --max-model-len 131072`, one GPU:
        Available KV cache memory: 5.98 GiB / 6.01 GiB
        GPU KV cache size: 567,978 tokens / 569,878 tokens
        Maximum concurrency for 131,072 tokens per request: 4.33x / 4.35x
    fp8 attention: 1,024 B per token and layer; the state page 2,146,304 B is exactly 2096 tokens of it (no
    padding). Prefix caching puts Qwen3.5's state in mamba_cache_mode "align": 2 state blocks per request and
    group, so a request needs cdiv(131072, 2096) + 3 * 2 = 69 blocks; >= 0.21 logs int(concurrency * mml)."""
    spec = load_spec("qwen3.5-35b-a3b")
    kw = dict(version="0.24.0", max_model_len=131_072, kv_dtype="fp8", enable_prefix_caching=True)
    state = GDN_CONV * 2 + GDN_TEMPORAL * 4
    assert state == 2096 * 1024
    logs = ((5.98, 299, "567,978", "4.33x"), (6.01, 300, "569,878", "4.35x"))
    for logged_gib, blocks, tokens, conc in logs:
        pool = vllm_pool(spec, kv_pool_bytes=gib(logged_gib), **kw)
        assert pool.block_size == 2096 and pool.bytes_per_block == 10 * state
        assert pool.log_lines[0].startswith("Setting attention block size to 2096 tokens")
        assert not any(line.startswith("Padding") for line in pool.log_lines)
        assert pool.blocks_per_request == 69
        assert pool.num_blocks == blocks
        assert pool.log_lines[-2:] == (
            f"GPU KV cache size: {tokens} tokens",
            f"Maximum concurrency for 131,072 tokens per request: {conc}",
        )
    # without prefix caching the same pool holds one state block per group: 66 blocks per request
    off = vllm_pool(spec, kv_pool_bytes=gib(6.01), **{**kw, "enable_prefix_caching": False})
    assert off.blocks_per_request == 66 and off.log_lines[-1].endswith("4.55x")


def test_hybrid_nemotron_h_state_dtype_by_version():
    """Nemotron-H-56B (10 attention + 54 Mamba-2 layers, 256 heads x 64, 8 groups, state 256): SSM state is
    "auto" = bf16 up to 0.12, NemotronHForCausalLMConfig's float16 in 0.13-0.14 and float32 in 0.20."""
    spec = load_spec("nemotron-h-56b")
    conv = 3 * (256 * 64 + 2 * 8 * 256) * 2  # (conv_kernel - 1) x conv_dim, bf16
    temporal = 256 * 64 * 256
    per_token = 2 * 8 * 128 * 2
    expected = {"0.11.0": 2, "0.12.0": 2, "0.13.0": 2, "0.14.0": 2, "0.20.0": 4}
    for version, ssm_bytes in expected.items():
        state = conv + temporal * ssm_bytes
        block = 16 * math.ceil(state / (16 * per_token))
        pool = vllm_pool(spec, version=version, max_model_len=8192, kv_pool_bytes=30 * GiB)
        assert pool.block_size == block, version
        assert pool.bytes_per_block == 10 * block * per_token
        # 54 Mamba layers in groups of 10: 6 groups (6 padding layers) + 1 attention group
        assert pool.num_groups == 7 and sum(g.kind == "mamba" for g in pool.groups) == 6
        assert pool.num_blocks == 30 * GiB // pool.bytes_per_block
        assert pool.blocks_per_request == math.ceil(8192 / block) + 6
        assert pool.kv_cache_tokens == pool.num_blocks // 7 * block
        assert pool.max_concurrency_text == f"{pool.num_blocks / pool.blocks_per_request:.2f}x"
    versions = ("0.11.0", "0.20.0")
    sizes = [vllm_pool(spec, version=v, max_model_len=8192, kv_pool_bytes=GiB).block_size for v in versions]
    assert sizes == [2080, 4128]


def test_hybrid_token_line_uses_the_smaller_of_block_and_max_model_len():
    """The state groups' block size is max_model_len; with a max_model_len below the attention block the
    <= 0.20 token line multiplies by max_model_len (v0.11.0:kv_cache_utils.py:1076-1080)."""
    spec = load_spec("nemotron-h-56b")
    pool = vllm_pool(spec, version="0.11.0", max_model_len=1000, kv_pool_bytes=30 * GiB)
    assert pool.block_size == 2080 and pool.blocks_per_request == 1 + 6
    assert pool.kv_cache_tokens == pool.num_blocks // 7 * 1000


def test_hybrid_mamba_groups_replicated_under_tp():
    """n_groups that tp does not divide grow to tp (extra_groups_for_head_shards): Nemotron-H-8B (8 groups,
    128 heads x 64, state 128) at tp=16 keeps conv (3, (8192 + 2*16*128) / 16) and temporal (8, 64, 128)."""
    spec = load_spec("nemotron-h-8b")
    state = 3 * (128 * 64 + 2 * 16 * 128) // 16 * 2 + 128 // 16 * 64 * 128 * 2
    per_token = 2 * 1 * 128 * 2  # 8 KV heads replicated: 1 per rank
    pool = vllm_pool(spec, version="0.11.0", tp=16, max_model_len=8192, kv_pool_bytes=GiB)
    assert pool.block_size == 16 * math.ceil(state / (16 * per_token))


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


# ---------------------------------------------------------------------------------------------------------
# The activation prediction against real startup logs. Each entry quotes its log; settings the log does not
# show are vLLM's defaults for that version (marked "default"), or stated as an assumption. `tolerance`
# None: the prediction, printed like the log (%.2f GiB), is the logged figure; otherwise the largest relative
# error this derivation achieves on that log.


@dataclass(frozen=True)
class LoggedPeak:
    label: str
    source: str
    model: str  # catalog entry with the checkpoint's shapes
    gpu: str
    version: str
    engine: str
    max_model_len: int
    logged: str  # "PyTorch activation peak memory takes X GiB" (0.6.4: peak_torch_memory, weights included)
    tokens: int | None = None  # max_num_batched_tokens; None: vLLM's default
    seqs: int | None = None  # max_num_seqs; None: vLLM's default
    tp: int = 1
    capability: tuple[int, int] | None = None
    weight_format: str | None = None
    driver: bool = True  # False: the line of a TP rank > 0 (no sampler there)
    weights_in_peak: float | None = None  # 0.6.4 logs the absolute peak: "Loading model weights took X GB"
    tolerance: float | None = None
    assumption: str = ""
    chosen_to_match: bool = False  # the assumption is an input picked so that the prediction matches the log


LOGGED_PEAKS = (
    LoggedPeak(
        "PR 10511, tp1",
        "vllm PR #10511 comment 2024-12-14: `vllm serve meta-llama/Meta-Llama-3-8B`, total_gpu_memory "
        "79.22GiB, 'PyTorch activation peak memory 1.26GiB'",
        "llama-3.1-8b", "H100 80GB", "0.6.5", "V0", 8192, "1.26", capability=(9, 0),
    ),
    LoggedPeak(
        "PR 10511, tp2",
        "vllm PR #10511 comment 2024-12-14: `vllm serve meta-llama/Meta-Llama-3-8B -tp 2`, driver line "
        "'PyTorch activation peak memory 1.26GiB'",
        "llama-3.1-8b", "2x H100 80GB", "0.6.5", "V0", 8192, "1.26", tp=2, capability=(9, 0),
    ),
    LoggedPeak(
        "issue 12330",
        "vllm issue #12330: Meta-Llama-3-8B, A100 40GB, total_gpu_memory (39.50GiB) x 0.90, 'PyTorch "
        "activation peak memory takes 9.37GiB', '# GPU blocks: 5691', 11.12x (worker.py:241 = v0.6.6)",
        "llama-3.1-8b", "A100 40GB", "0.6.6", "V0", 8192, "9.37", seqs=2048, capability=(8, 0),
        assumption="max_num_seqs 2048 is inferred, the log does not show it: the default 256 gives 1.23 GiB",
        chosen_to_match=True,
    ),
    LoggedPeak(
        "issue 10517, mml 20000",
        "vllm issue #10517: Llama-3.1-8B, RTX 3090, 'Loading model weights took 14.9888 GB', "
        "'peak_torch_memory=17.06GiB' (v0.6.4 'Memory profiling results' line)",
        "llama-3.1-8b", "RTX 3090", "0.6.4", "V0", 20000, "17.06", capability=(8, 6), weights_in_peak=14.9888,
    ),
    LoggedPeak(
        "issue 10517, mml 29000",
        "vllm issue #10517: the same at max_model_len 29000: 'peak_torch_memory=17.98GiB'",
        "llama-3.1-8b", "RTX 3090", "0.6.4", "V0", 29000, "17.98", capability=(8, 6), weights_in_peak=14.9888,
    ),
    LoggedPeak(
        "Qwen2.5-1.5B T4",
        "Colab notebooks (several runs, same figures): Qwen/Qwen2.5-1.5B-Instruct, XFormers (T4), total "
        "14.56GiB x 0.50, 'PyTorch activation peak memory takes 2.02GiB', 32768 tokens per request "
        "(worker.py:267, model_runner.py:1115 = v0.7.2)",
        "qwen2.5-1.5b", "T4", "0.7.2", "V0", 32768, "2.02", capability=(7, 5),
    ),
    LoggedPeak(
        "Qwen2.5-7B V100",
        "blog (vLLM 0.8.5, default arguments, V100, float16): Qwen2.5-7B-Instruct, total 31.74GiB x 0.90, "
        "'PyTorch activation peak memory takes 4.35GiB'",
        "qwen2.5-7b", "V100 32GB", "0.8.5", "V0", 32768, "4.35", capability=(7, 0),
    ),
    LoggedPeak(
        "Qwen3-4B RTX 2060",
        "README (docker, max_num_seqs=1, max_model_len=10k, float16): Qwen3-4B on RTX 2060 12GB, 'PyTorch "
        "activation peak memory takes 0.74GiB', 10000 tokens per request (worker.py:267, "
        "model_runner.py:1146)",
        "qwen3-4b", "RTX 2060 12GB", "0.8.4", "V0", 10000, "0.74", seqs=1, capability=(7, 5),
    ),
    LoggedPeak(
        "Qwen2.5-72B-AWQ tp2 A40",
        "blog: `vllm serve ./Qwen2.5-72B-Instruct-AWQ --tensor-parallel-size 2` on 2x A40, v0.7.2 (V0), "
        "max_seq_len 32768, awq_marlin, worker rank 1: 'PyTorch activation peak memory takes 5.66GiB'",
        "qwen2.5-72b", "2x A40", "0.7.2", "V0", 32768, "5.66", tp=2, capability=(8, 6), weight_format="awq",
        driver=False, tolerance=0.0025,
    ),
    LoggedPeak(
        "Llama-3.1-8B, 79.14 GiB card",
        "book excerpt: 'Loading model weights took 14.9888 GB' (Llama-3.1-8B), total_gpu_memory (79.14GiB) x "
        "0.90, 'PyTorch activation peak memory takes 1.19GiB' (worker.py:241 = v0.6.6)",
        "llama-3.1-8b", "80 GB card, not named", "0.6.6", "V0", 131072, "1.19",
        assumption="max_model_len is Llama-3.1's default 131072 (so chunked prefill, 2048 tokens) and the "
        "card is not a Hopper (an H100 SXM reports 79.22 GiB; its 32 MiB cuBLAS workspace would give 1.21)",
        chosen_to_match=True,
    ),
    LoggedPeak(
        "Qwen2.5-7B bnb, 8 GB",
        "deployment guide: Qwen/Qwen2.5-7B-Instruct, bitsandbytes 4-bit, total_gpu_memory (8.00GiB) x 0.50, "
        "'PyTorch activation peak memory takes 1.39GiB', 2048 tokens per request",
        "qwen2.5-7b", "8 GB card, not named", "0.8.5", "V0", 2048, "1.39", tolerance=0.007,
        assumption="version and GPU not shown (V0 log lines); bitsandbytes' dequantized weights live in the "
        "forward phase, below the sampler's peak here",
    ),
)  # fmt: skip


def predicted_logged_figure(entry: LoggedPeak) -> tuple[float, object]:
    profile = profile_activation(
        load_spec(entry.model),
        max_num_batched_tokens=entry.tokens or _defaults(entry)[0],
        max_num_seqs=entry.seqs or _defaults(entry)[1],
        version=entry.version,
        engine=entry.engine,
        tp=entry.tp,
        weight_format=entry.weight_format,
        cuda_capability=entry.capability,
    )
    peak = profile.peak_bytes if entry.driver else profile.non_driver_peak_bytes
    gib_value = peak / GiB + (entry.weights_in_peak or 0.0)
    return gib_value, profile


def _defaults(entry: LoggedPeak) -> tuple[int, int]:
    tokens, seqs, _ = default_scheduler_limits(
        entry.version, entry.engine, max_model_len=entry.max_model_len, spec=load_spec(entry.model)
    )
    return tokens, seqs


@pytest.mark.parametrize("entry", LOGGED_PEAKS, ids=[e.label for e in LOGGED_PEAKS])
def test_predicted_activation_against_real_logs(entry):
    predicted, profile = predicted_logged_figure(entry)
    if entry.tolerance is None:
        assert f"{predicted:.2f}" == entry.logged, (entry.source, profile.terms)
    else:
        assert abs(predicted / float(entry.logged) - 1) <= entry.tolerance, (entry.source, profile.terms)


def _matches_to_the_hundredth(entry: LoggedPeak) -> bool:
    predicted, _ = predicted_logged_figure(entry)
    return f"{predicted:.2f}" == entry.logged


def test_the_readme_states_the_activation_claim_as_the_logs_give_it():
    """Issue 23 item 5: the README's "matches N of M real logs to 0.01 GiB" says how many of those only match
    with an input chosen so that they do, and how many match without; the counts are these logs'."""
    import re  # noqa: PLC0415

    from tests.conftest import REPO_ROOT  # noqa: PLC0415

    matched = [e for e in LOGGED_PEAKS if _matches_to_the_hundredth(e)]
    chosen = [e for e in LOGGED_PEAKS if e.chosen_to_match]
    unchosen = [e for e in LOGGED_PEAKS if not e.chosen_to_match]
    counts = (
        len(matched), len(LOGGED_PEAKS), sum(e.chosen_to_match for e in matched),
        sum(_matches_to_the_hundredth(e) for e in unchosen), len(unchosen),
    )  # fmt: skip
    assert len(chosen) == 2 and all(_matches_to_the_hundredth(e) for e in chosen)
    readme = " ".join(REPO_ROOT.joinpath("README.md").read_text(encoding="utf-8").split())
    claim = re.search(
        r"matches (\d+) of (\d+) real logs to 0\.01 GiB, (\d+) of them only with an input chosen so "
        r"that they match .*?; without chosen inputs, (\d+) of (\d+)",
        readme,
    )
    assert claim is not None, "the README lost its activation claim"
    assert tuple(int(g) for g in claim.groups()) == counts


def test_print_prediction_table(capsys):
    rows = [f"{'log':<30}{'vLLM':>7}{'GPU':>24}{'mml':>8}{'tok':>7}{'seqs':>6}{'logged':>8}{'PREDICTED':>11}"]
    for entry in LOGGED_PEAKS:
        predicted, profile = predicted_logged_figure(entry)
        error = predicted / float(entry.logged) - 1
        rows.append(
            f"{entry.label:<30}{entry.version:>7}{entry.gpu:>24}{entry.max_model_len:>8}{profile.tokens:>7}"
            f"{profile.sequences:>6}{entry.logged:>8}{predicted:>11.4f}  {error:+.2%}"
        )
    with capsys.disabled():
        print("\n" + "\n".join(rows))
    assert len(rows) == len(LOGGED_PEAKS) + 1


def test_issue_12330_defaults_explain_the_log_only_with_2048_sequences():
    """With vLLM 0.6.6's defaults (256 sequences) the profile peaks at 1.23 GiB, so the pool and concurrency
    come out at 19.26x; the logged 9.37 GiB and 11.12x follow when the sampler sees 2048 rows."""
    spec = load_spec("llama-3.1-8b")
    kw = dict(
        version="0.6.6",
        max_model_len=8192,
        total_bytes=gib(39.50),
        gpu_memory_utilization=0.9,
        weights_bytes=gib(14.96),
        non_torch_bytes=gib(0.10),
        cuda_capability=(8, 0),
    )
    default = vllm_pool(spec, **kw)
    assert default.max_num_seqs == 256 and default.max_num_batched_tokens == 8192
    assert f"{default.activation_bytes / GiB:.2f}" == "1.23"
    assert default.max_concurrency_text == "19.26x"  # the log says 11.12x: its run had more sequences
    inferred = vllm_pool(spec, max_num_seqs=2048, **kw)
    assert f"{inferred.activation_bytes / GiB:.2f}" == "9.37"
    assert inferred.max_concurrency_text == "11.12x"
    assert abs(inferred.num_blocks - 5691) <= 5  # the log's other figures are rounded to 0.01 GiB
    # 256 rows x 128256 logits: bf16 + fp32 copy + sorted values + int64 indices + the sort's temporaries
    profile = default.activation_profile
    assert profile.phase == "sampler"
    assert profile.logits_bytes + profile.sampler_bytes == 256 * 128256 * (2 + 4 + 4 + 8 + 8 + 4 + 8)


# Logs this derivation does not reproduce, kept with the error it makes so that a change shows up here.
@pytest.mark.parametrize(
    ("label", "model", "version", "engine", "mml", "total", "device", "capability", "logged", "low", "high"),
    [
        # OCI AI Quick Actions guide: Llama-3.1-8B on an A10 (22.07 GiB), v0.7.0/0.7.1 (worker.py:266),
        # max_model_len 131072, 'PyTorch activation peak memory takes 0.22GiB'. The container's scheduler
        # settings are not shown; vLLM's defaults (chunked prefill, 2048 tokens, 256 sequences) give 1.19 GiB.
        ("OCI A10", "llama-3.1-8b", "0.7.1", "V0", 131072, 22.07, "NVIDIA A10", (8, 6), 0.22, 5.3, 5.5),
        # vLLM 0.31.0 `vllm serve meta-llama/Llama-3.1-8B-Instruct`, A100 80GB: '1.44 GiB for peak
        # activation'.
        # From 0.27 that figure adds the CUDA-graph estimate (v0.33.0:gpu_worker.py peak_activation_memory =
        # transient_peak_headroom + cudagraph_memory_estimate_applied), which the log does not give. Both runs
        # are on model runner V2, whose greedy dummy sampler (runner_v2.py, read in 0.29.0) holds only the
        # bf16 logits: the transient predicted is now under the logged figure, the rest being the graphs
        # (was 0.30-0.32 and 2.0-2.1 of it with the V1 runner's FlashInfer sampler run, more than the whole
        # 0.25 GiB logged for Qwen2.5-0.5B).
        ("0.31 A100 Llama", "llama-3.1-8b", "0.31.0", "V1", 131072, 79.25, "NVIDIA A100-SXM4-80GB", (8, 0),
         1.44, 0.14, 0.16),
        # vLLM 0.27.1 `vllm serve Qwen/Qwen2.5-0.5B-Instruct --max-model-len 2048`, 23.99 GiB card:
        # '0.25 GiB for peak activation' (same caveats).
        ("0.27.1 Qwen2.5-0.5B", "qwen2.5-0.5b", "0.27.1", "V1", 2048, 23.99, None, None, 0.25, 0.30, 0.32),
    ],
)  # fmt: skip
def test_documented_misses(label, model, version, engine, mml, total, device, capability, logged, low, high):
    spec = load_spec(model)
    tokens, seqs, _ = default_scheduler_limits(
        version,
        engine,
        max_model_len=mml,
        total_bytes=gib(total),
        device_name=device,
        cuda_capability=capability,
        spec=spec,
    )
    profile = profile_activation(
        spec,
        max_num_batched_tokens=tokens,
        max_num_seqs=seqs,
        version=version,
        engine=engine,
        cuda_capability=capability,
    )
    assert low <= profile.peak_bytes / GiB / logged <= high, label


def test_v0_defaults_chunked_prefill_above_32k():
    spec = load_spec("llama-3.1-8b")
    assert default_scheduler_limits("0.6.6", "V0", max_model_len=8192, spec=spec)[:2] == (8192, 256)
    assert default_scheduler_limits("0.6.6", "V0", max_model_len=1024, spec=spec)[:2] == (2048, 256)
    assert default_scheduler_limits("0.8.5", "V0", max_model_len=32768, spec=spec)[:2] == (32768, 256)
    assert default_scheduler_limits("0.8.5", "V0", max_model_len=32769, spec=spec)[:2] == (2048, 256)
    # a sliding-window model keeps chunked prefill off
    mistral = load_spec("mistral-7b")
    assert default_scheduler_limits("0.6.6", "V0", max_model_len=65536, spec=mistral)[:2] == (65536, 256)


def test_v1_defaults_by_usage_context_and_device():
    h100 = dict(total_bytes=gib(79.22), device_name="NVIDIA H100 80GB HBM3")
    a100 = dict(total_bytes=gib(79.15), device_name="NVIDIA A100-SXM4-80GB")
    limits = default_scheduler_limits
    assert limits("0.11.0", "V1", max_model_len=8192, **h100)[:2] == (8192, 1024)
    assert limits("0.11.0", "V1", max_model_len=8192, usage_context="llm", **h100)[:2] == (16384, 1024)
    assert limits("0.11.0", "V1", max_model_len=8192, **a100)[:2] == (2048, 256)  # PR #17885: A100 small
    assert limits("0.8.5", "V1", max_model_len=8192, **a100)[:2] == (8192, 1024)  # not yet in 0.8.5
    assert limits("0.11.0", "V1", max_model_len=8192, total_bytes=gib(23.5))[:2] == (2048, 256)
    b200 = dict(total_bytes=gib(178.4), device_name="NVIDIA B200")
    assert limits("0.33.0", "V1", max_model_len=8192, **b200)[:2] == (16384, 1024)
    assert limits("0.26.0", "V1", max_model_len=8192, **b200)[:2] == (8192, 1024)
    spark = dict(total_bytes=gib(119.7), device_name="NVIDIA GB10", cuda_capability=(12, 1))
    assert limits("0.33.0", "V1", max_model_len=8192, **spark)[:2] == (2048, 256)
    with pytest.raises(PlannerError, match="usage context"):
        limits("0.11.0", "V1", max_model_len=8192, usage_context="chat")


def test_sampler_path_by_version_and_sort_temporaries():
    spec = load_spec("qwen2.5-1.5b")  # V 151936
    v = 151936

    def profile(version, seqs, **kw):
        return profile_activation(spec, max_num_batched_tokens=4096, max_num_seqs=seqs, version=version, **kw)

    assert profile("0.11.0", 256).sampler_path == "torch-sort"
    assert profile("0.20.0", 256).sampler_path == "triton"
    assert profile("0.20.0", 4).sampler_path == "torch-sort"  # the Triton kernel needs >= 8 rows
    # 0.26 runs a dense model on model runner V2 (greedy dummy sampler); an MoE model it does not list stays
    # on the V1 runner, whose dummy run takes FlashInfer's top-k/top-p
    assert profile("0.26.0", 256).sampler_path == "v2-greedy"
    moe = load_spec("qwen3-30b-a3b")
    v1 = profile_activation(moe, max_num_batched_tokens=4096, max_num_seqs=256, version="0.26.0")
    assert v1.sampler_path == "flashinfer"
    assert profile("0.6.6", 256).sampler_path == "torch-sort"
    # PyTorch's sort: 20 B of temporaries per element for 1 row or >= 128 rows, 32 B for 2..127 rows
    for seqs, temporaries in ((1, 20), (64, 32), (128, 20)):
        p = profile("0.6.6", seqs)
        assert p.sampler_bytes == seqs * v * (4 + 4 + 8 + temporaries), seqs
    # Triton: a kept buffer of min(next_pow2(min(SMs, rows)), SMs) rows
    assert profile("0.20.0", 256, sm_count=132).kept_bytes == 132 * v * 4 + 8_519_680
    assert profile("0.20.0", 100, sm_count=132).kept_bytes == 128 * v * 4 + 8_519_680
    with pytest.raises(PlannerError, match="sampler path"):
        profile("0.20.0", 256, sampler_path="magic")
    # hidden states held while sampling: V0 all N rows; V1 0.8.5 only the R sampled rows; V1 >= 0.10.2 the N
    # rows, the R sampled rows and _dummy_sampler_run's rand_like copy of them
    h = 1536
    assert profile("0.6.6", 256).hidden_bytes == 4096 * h * 2
    assert profile("0.8.5", 256).hidden_bytes == 256 * h * 2
    assert profile("0.10.2", 256).hidden_bytes == (4096 + 2 * 256) * h * 2


def test_forward_terms_tp_and_marlin():
    spec = load_spec("qwen2.5-7b")  # Qwen2MLP keeps gate_up: 4h + 3I at down_proj
    h, i = 3584, 18944
    one = profile_activation(spec, max_num_batched_tokens=4096, max_num_seqs=1, version="0.7.2")
    assert one.forward_bytes == 4096 * 2 * (4 * h + 3 * i)
    two = profile_activation(spec, max_num_batched_tokens=4096, max_num_seqs=1, version="0.7.2", tp=2)
    assert two.forward_bytes == 4096 * 2 * (5 * h + 3 * (i // 2))  # + the out-of-place all-reduce copy
    assert two.non_driver_peak_bytes == two.forward_bytes + two.input_bytes + 8_519_680
    awq = profile_activation(
        spec, max_num_batched_tokens=4096, max_num_seqs=1, version="0.7.2", weight_format="awq"
    )
    assert awq.forward_bytes == 4096 * 2 * (4 * h + 4 * i) + 1024 * h * 4  # + a_tmp [M, K], c_tmp [1024, h]
    newer = profile_activation(
        spec, max_num_batched_tokens=4096, max_num_seqs=1, version="0.8.5", weight_format="awq"
    )
    assert newer.forward_bytes == max(4096 * 2 * (4 * h + 3 * i) + 1024 * h * 4, one.forward_bytes)
    llama = profile_activation(load_spec("llama-3.1-8b"), max_num_batched_tokens=4096, max_num_seqs=1)
    assert llama.forward_bytes == 4096 * 2 * (3 * 4096 + 3 * 14336)  # LlamaMLP frees gate_up first


def test_scheduler_limits_are_checked():
    spec = load_spec("llama-3.1-8b")
    with pytest.raises(PlannerError, match="at least max_num_seqs"):
        profile_activation(spec, max_num_batched_tokens=128, max_num_seqs=256)
    with pytest.raises(PlannerError, match="at least max_num_seqs"):
        vllm_pool(spec, version="0.6.6", max_model_len=8192, total_bytes=gib(40), max_num_batched_tokens=128)


def test_group_size_rule_by_version():
    """_get_kv_cache_groups_uniform_page_size: 0.11 splits by the smallest bucket (22 sliding + 21 full ->
    groups of 21: two sliding groups, one of them padded); from 0.12 the largest bucket is the group size when
    it is below 1.25x the smallest (v0.12.0:kv_cache_utils.py:1015-1023; 1.5x from 0.20)."""
    config = dict(load_spec("gemma-2-9b").config)
    config["num_hidden_layers"] = 43  # gemma2 alternates sliding / full: 22 sliding + 21 full
    spec = load_spec(config)
    page = 2 * 16 * 8 * 256 * 2  # one layer's 16-token block: K + V, 8 KV heads x 256, bf16
    old = vllm_pool(spec, max_model_len=8192, version="0.11.0", kv_pool_bytes=GiB)
    assert [g.layers for g in old.groups] == [21, 21, 21] and old.bytes_per_block == 21 * page
    for version in ("0.12.0", "0.20.0", "0.33.0"):
        new = vllm_pool(spec, max_model_len=8192, version=version, kv_pool_bytes=GiB)
        assert [g.layers for g in new.groups] == [22, 22] and new.bytes_per_block == 22 * page
