"""vLLM model runner V2's buffers and the kept fused-MoE workspace (planner/engines/vllm/runner_v2.py), each
figure worked out by hand from the v0.29.0 source lines the module cites."""

from __future__ import annotations

from planner.engines.vllm.activation import profile_activation
from planner.engines.vllm.runner_v2 import (
    consumed_after_baseline,
    mxfp4_moe_workspace,
    runs_model_runner_v2,
    v2_buffers,
)
from planner.spec import load_spec

L4 = (8, 9)  # Marlin serves MXFP4 below sm 9


def test_v2_buffers_at_256_sequences():
    v, r, n = 201_088, 256, 4096  # gpt-oss's vocabulary, max_num_seqs, max_num_batched_tokens
    words = -(-v // 32)
    expected = (
        r * v * 4  # output_bin_counts, int32 (sample/penalties.py:40-42)
        + r * words * 4  # prompt_bin_mask (penalties.py:32-36)
        + r * (1024 + 2 * 1024 + 128 + 1024 + 128 + 1 + 128) * 4  # logit-bias, stop, bad-words, logprob ids
        + r * 4 + r * words * 4  # structured outputs: logits_indices and the grammar bitmask
        + n * (4 + 8 + 1) + (r + 1) * 4 + 2 * r * 4  # input ids, positions, padding flags, query/seq lens
        + r * (8 + 4 + 4 + 4)  # request state
    )  # fmt: skip
    buffers = v2_buffers(v, r, n)
    assert buffers.bytes == expected
    assert "output_bin_counts 256 x 201,088 int32" in buffers.source()


def test_marlin_workspace_single_gpu_and_naive_dp():
    spec = load_spec("gpt-oss-20b")  # h 2880 -> K 3072 on Marlin, expert width 2880 -> N 2944, top-4
    one = mxfp4_moe_workspace(spec, ver=(0, 29, 0), fmt="mxfp4", capability=L4, tokens=4096)
    m = 4096 * 4
    assert one is not None and one.bytes == m * 3072 * 2 + m * 5888 * 2
    # DP=4 without expert parallelism: the width split over 4 ranks (720 -> 768) and 4 x 4096 tokens gathered
    dp = mxfp4_moe_workspace(spec, ver=(0, 29, 0), fmt="mxfp4", capability=L4, tokens=4096, dp=4)
    m = 4 * 4096 * 4
    assert dp is not None and dp.bytes == m * 3072 * 2 + m * 3072 * 2
    assert "all-gathered over 4 DP ranks" in dp.source()
    # expert parallelism: whole experts (N 2944), no gather at DP=1
    ep = mxfp4_moe_workspace(spec, ver=(0, 29, 0), fmt="mxfp4", capability=L4, tokens=8192, tp=2,
                             expert_parallel=True)  # fmt: skip
    assert ep is not None and ep.bytes == 8192 * 4 * 3072 * 2 + 8192 * 4 * 5888 * 2
    # not read before 0.29, nor for other kernels (sm 9.0 from 0.14 runs triton_kernels)
    assert mxfp4_moe_workspace(spec, ver=(0, 28, 0), fmt="mxfp4", capability=L4, tokens=4096) is None
    assert mxfp4_moe_workspace(spec, ver=(0, 29, 0), fmt="mxfp4", capability=(9, 0), tokens=4096) is None


def test_consumed_only_where_vllm_counts_it():
    spec = load_spec("gpt-oss-20b")
    kwargs = dict(max_num_seqs=256, max_num_batched_tokens=4096, workspace=None)
    assert runs_model_runner_v2(spec, (0, 29, 0)) and not runs_model_runner_v2(spec, (0, 26, 0))
    assert consumed_after_baseline(spec, ver=(0, 29, 0), engine="V1", **kwargs) is not None
    # before 0.27 the profile's torch peak holds what the run keeps; the V1 runner of 0.26 has no V2 buffers
    assert consumed_after_baseline(spec, ver=(0, 26, 0), engine="V1", **kwargs) is None
    assert consumed_after_baseline(spec, ver=(0, 29, 0), engine="V0", **kwargs) is None


def test_v2_dummy_sampler_is_greedy():
    spec = load_spec("gpt-oss-20b")
    p = profile_activation(spec, max_num_batched_tokens=4096, max_num_seqs=256, version="0.29.0",
                           cuda_capability=L4, sm_count=58)  # fmt: skip
    assert p.sampler_path == "v2-greedy"
    assert p.logits_bytes == 256 * 201_088 * 2  # bf16 logits, no fp32 copy
    assert p.sampler_bytes == 256 * -(-201_088 // 1024) * (8 + 4)
    assert p.hidden_bytes == (4096 + 256) * 2880 * 2
    # the MoE layer's transient, the expert caches being the kept workspace: 4h + E per token, the input
    # padded to K 3072, the top-k weights and ids
    moe = 4096 * 2 * (4 * 2880 + 32) + 4096 * 3072 * 2 + 4096 * 4 * 8
    attention = 4096 * 2 * (4 * 2880 + 2 * 4096 + 2 * 512)
    assert p.forward_bytes == max(moe, attention)
