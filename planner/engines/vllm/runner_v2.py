"""vLLM's model runner V2 (vllm/v1/worker/gpu/, the default for every model from 0.29.0) and the memory that
vLLM 0.29 counts as consumed after its baseline beyond the weights: derived from the source, not fitted.

Read in the vLLM 0.29.0 wheel from PyPI (vllm-0.29.0-cp38-abi3-manylinux_2_28_x86_64.whl, unpacked; file:line
of that release). Versions after 0.29.0 that were not read take its rules.

* What the pool deducts (v0.29.0:vllm/v1/worker/gpu_worker.py:551-610, vllm/utils/mem_utils.py:312-326):
  non_kv = total_consumed + transient peak, where total_consumed is the free memory before the instance minus
  the free memory after the profile run. So every tensor the worker allocates after the baseline and still
  holds after the profile is consumed memory, as the weights are; vLLM's own summary words it "consumed memory
  (weights + non-torch)" (gpu_worker.py:845-851). Here those tensors join the non-torch term.
* Model runner V2's persistent device buffers (v2_buffers): the sampler's penalty statistics, its logit-bias,
  bad-words and logprob-token-id tables, the structured-output bitmask, the input buffers and the request
  state, all sized by max_num_seqs, max_num_batched_tokens and the vocabulary when the runner and its sampler
  are built (model_runner.py:299-313, 437-469), after the baseline (gpu_worker.py:439 snapshot, 457-476
  runner). Pinned host (UVA) tensors hold no device memory and are left out.
* Its dummy sampler run (model_runner.py:832-843): no request was added, so every sampling state is its
  default (temperature 0, top_k = V, top_p = 1: sample/states.py:17-36); apply_sampling_params returns the
  logits as they are (sample/sampler.py:217-219) and the Gumbel argmax runs on them greedily
  (sampler.py:289-320, gumbel.py:251-306): no fp32 copy, no top-k/top-p, only [rows, cdiv(V, 1024)] int64 and
  fp32 partial maxima. activation.py takes this path for a model this runner runs.
* The fused-MoE workspace (moe_workspace): the modular MoE kernel takes its intermediate caches from the
  worker's WorkspaceManager (model_executor/layers/fused_moe/modular_kernel.py:1120-1181,
  v1/worker/workspace.py:114-213), one buffer that grows to the largest request and is kept; the profile run's
  max_num_batched_tokens sizes it, so from 0.27 (transient peak only) it is consumed memory, not activation.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from planner.engines.vllm.moe import mxfp4_expert_layout
from planner.engines.vllm.version import Version, model_runner_v2, parse_version
from planner.engines.worksheet import Term
from planner.spec import ModelSpec
from planner.units import GiB, ceil_div

V2_READ = "v0.29.0"
INT32, INT64, BOOL = 4, 8, 1
# v0.29.0:vllm/v1/worker/gpu/sample/logit_bias.py:10-12 and vllm/sampling_params.py:30
MAX_NUM_ALLOWED_TOKEN_IDS = 1024
MAX_NUM_LOGIT_BIAS_TOKENS = 1024
MAX_NUM_STOP_TOKEN_IDS = 128
MAX_LOGPROB_TOKEN_IDS = 128
# v0.29.0:vllm/envs.py:1134-1141 defaults of VLLM_MAX_NUM_BAD_WORDS and VLLM_MAX_BAD_WORDS_TOTAL_TOKENS
MAX_NUM_BAD_WORDS = 128
MAX_BAD_WORDS_TOTAL_TOKENS = 1024
GUMBEL_BLOCK = 1024  # v0.29.0:vllm/v1/worker/gpu/sample/gumbel.py:275
WORKSPACE_ALIGN = 256  # v0.29.0:vllm/v1/worker/workspace.py:128 (each view rounded up to 256 bytes)
CONSUMED_FROM: Version = (0, 27, 0)  # the transient-peak accounting (mem_utils.py memory_profiling)
WORKSPACE_READ: Version = (0, 29, 0)


def runs_model_runner_v2(spec: ModelSpec, ver: Version) -> bool:
    """Whether V1 vLLM `ver` runs `spec` on model runner V2 by default (version.py model_runner_v2)."""
    kinds = {layer.attention.kind for layer in spec.layers if layer.attention is not None}
    return model_runner_v2(
        ver, spec.model_type, moe=spec.num_experts > 0, hybrid=bool(kinds & {"linear", "mamba"}),
        quantized=spec.quantization is not None,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Consumed:
    """Device memory allocated after the baseline and held after the profile run, beyond the weights (bytes,
    one rank), with every part in words."""

    bytes: int
    parts: tuple[str, ...]

    def source(self) -> str:
        return "; ".join(self.parts)


def v2_buffers(vocab: int, max_num_seqs: int, max_num_tokens: int, decode_query_len: int = 1) -> Consumed:
    """Model runner V2's persistent device tensors on a rank that samples (each TP rank of the last stage)."""
    r, n, v = max_num_seqs, max_num_tokens, vocab
    words = ceil_div(v, 32)
    logits = r * decode_query_len
    penalties = r * v * INT32 + r * words * INT32
    per_sequence = (  # 4-byte entries: int32 ids and offsets, fp32 biases
        MAX_NUM_ALLOWED_TOKEN_IDS + 2 * MAX_NUM_LOGIT_BIAS_TOKENS + MAX_NUM_STOP_TOKEN_IDS
        + MAX_BAD_WORDS_TOTAL_TOKENS + MAX_NUM_BAD_WORDS + 1 + MAX_LOGPROB_TOKEN_IDS
    )  # fmt: skip
    tables = r * per_sequence * INT32
    structured = logits * INT32 + logits * words * INT32
    inputs = n * (INT32 + INT64 + BOOL) + (r + 1) * INT32 + 2 * r * INT32
    state = r * (INT64 + 2 * INT32 + INT32)  # last_sampled int64, total_len and num_computed int32, prefill
    total = penalties + tables + structured + inputs + state
    return Consumed(total, (
        f"model runner V2 buffers {total / GiB:.3f} GiB: the penalties' output_bin_counts {r} x {v:,} int32 "
        f"and prompt_bin_mask {r} x {words:,} int32 ({V2_READ}:vllm/v1/worker/gpu/sample/"
        "penalties.py:31-42); "
        f"logit-bias, stop, bad-words and logprob-token-id tables, {per_sequence:,} int32/fp32 per sequence "
        "(sample/logit_bias.py:16-50, bad_words.py:14-34, logprob.py:242-248); the structured-output bitmask "
        f"{logits} x {words:,} int32 (structured_outputs.py:40-53); input buffers and request state "
        "(input_batch.py:17-38, states.py:52-85); allocated when the runner loads the model, after the "
        "baseline (gpu_worker.py:439, model_runner.py:299-313, 437-469)",
    ))  # fmt: skip


def moe_workspace(
    spec: ModelSpec,
    *,
    ver: Version,
    hidden: int,
    width: int,
    tokens: int,
    dp: int = 1,
    expert_parallel: bool = False,
    backend: str,
) -> Consumed | None:
    """The fused-MoE workspace one rank keeps after the profile run (Marlin experts only: the one expert
    kernel whose workspace_shapes were read), or None. `hidden` / `width`: K and N as the kernel holds them
    (padded) on this rank; `tokens`: the profile run's max_num_batched_tokens.

    MarlinExperts.workspace_shapes (v0.29.0:model_executor/layers/fused_moe/experts/marlin_moe.py:704-731):
    workspace13 [M*k, max(N, K)], workspace2 [M*k*max(2N, K)], output [M, K]; _allocate_buffers
    (modular_kernel.py:1120-1181) takes max(workspace13, output) and workspace2 from one WorkspaceManager
    buffer (bf16, each view rounded up to 256 B). M is the profile run's tokens, all-gathered over the DP
    ranks by the naive DP/EP dispatch (prepare_finalize/naive_dp_ep.py:112-183) where DP > 1."""
    if ver < WORKSPACE_READ or backend != "MARLIN" or not spec.num_experts:
        return None
    k = spec.experts_per_token
    m = tokens * dp
    a = 2  # the activations' dtype (bf16/fp16), workspace_dtype = out_dtype (modular_kernel.py:1144)
    ws13 = max(m * k * max(width, hidden), m * hidden) * a
    ws2 = m * k * max(2 * width, hidden) * a
    total = sum(ceil_div(b, WORKSPACE_ALIGN) * WORKSPACE_ALIGN for b in (ws13, ws2))
    gathered = f" (all-gathered over {dp} DP ranks)" if dp > 1 else ""
    how = "expert parallelism, whole experts" if expert_parallel else "the rank's expert width"
    return Consumed(total, (
        f"fused-MoE workspace {total / GiB:.3f} GiB kept after the profile run: Marlin's workspace13 "
        f"max({m} x {k} x max(N {width}, K {hidden}), {m} x K) + workspace2 {m} x {k} x max(2N, K), bf16, "
        f"M = {m} tokens{gathered}, N = {how} ({V2_READ}:vllm/model_executor/layers/fused_moe/experts/"
        "marlin_moe.py:704-731, modular_kernel.py:1120-1181, v1/worker/workspace.py:114-213)",
    ))  # fmt: skip


def mxfp4_moe_workspace(
    spec: ModelSpec,
    *,
    ver: Version,
    fmt: str,
    capability: tuple[int, int] | None,
    tokens: int,
    tp: int = 1,
    dp: int = 1,
    expert_parallel: bool = False,
) -> Consumed | None:
    """moe_workspace() for MXFP4 experts, with K and N as the rank holds them (moe.mxfp4_expert_layout: the
    backend's padding; whole experts under expert parallelism, the width split over dp x tp ranks without
    it, as vLLM's FusedMoEParallelConfig.make does: v0.29.0:model_executor/layers/fused_moe/config.py:
    1156-1255)."""
    if fmt != "mxfp4" or capability is None or not spec.num_experts or ver < WORKSPACE_READ:
        return None
    layout = mxfp4_expert_layout(spec, ver, capability, 1 if expert_parallel else dp * tp)
    return moe_workspace(
        spec, ver=ver, hidden=layout.hidden, width=layout.intermediate, tokens=tokens, dp=dp,
        expert_parallel=expert_parallel, backend=layout.backend,
    )  # fmt: skip


def consumed_after_baseline(
    spec: ModelSpec,
    *,
    ver: Version,
    engine: str,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    workspace: Consumed | None,
) -> Consumed | None:
    """What a V1 vLLM >= 0.27 rank holds after the profile beyond the weights and the non-torch memory
    (model runner V2's buffers, the kept fused-MoE workspace), or None where nothing is derived."""
    if engine != "V1" or ver < CONSUMED_FROM:
        return None
    parts: list[Consumed] = []
    if runs_model_runner_v2(spec, ver):
        parts.append(v2_buffers(spec.vocab_size, max_num_seqs, max_num_batched_tokens))
    if workspace is not None:
        parts.append(workspace)
    if not parts:
        return None
    return Consumed(sum(p.bytes for p in parts), tuple(s for p in parts for s in p.parts))


def with_consumed(
    non_torch: Term,
    spec: ModelSpec,
    *,
    version: str,
    engine: str,
    pool: Any,
    fmt: str,
    capability: tuple[int, int] | None,
    tp: int = 1,
    dp: int = 1,
    expert_parallel: bool = False,
) -> Term:
    """The non-torch term plus what V1 vLLM >= 0.27 holds after its profile beyond the weights (model runner
    V2's buffers, the kept fused-MoE workspace), for `pool`'s resolved scheduler limits (a VLLMPool)."""
    ver = parse_version(version)
    workspace = mxfp4_moe_workspace(
        spec, ver=ver, fmt=fmt, capability=capability, tokens=pool.max_num_batched_tokens, tp=tp, dp=dp,
        expert_parallel=expert_parallel,
    )  # fmt: skip
    consumed = consumed_after_baseline(
        spec, ver=ver, engine=engine, max_num_seqs=pool.max_num_seqs,
        max_num_batched_tokens=pool.max_num_batched_tokens, workspace=workspace,
    )  # fmt: skip
    if consumed is None:
        return non_torch
    return replace(
        non_torch,
        bytes=non_torch.bytes + consumed.bytes,
        source=f"{non_torch.source}; + consumed after the baseline (vLLM >= 0.27 counts what the instance "
        f"holds after the profile as weights + non-torch, {V2_READ}:vllm/v1/worker/gpu_worker.py:551-610): "
        f"{consumed.source()}",
    )
