"""The profile run's PyTorch activation peak, PREDICTED from vLLM's own source, term by term: the dummy
forward pass, the logits and the sampler's top-k/top-p temporaries, the cuBLAS workspace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.activations import ACTIVATION_BYTES
from planner.engines.vllm.moe import fused_moe_forward_bytes, mxfp4_expert_layout
from planner.engines.vllm.runner_v2 import GUMBEL_BLOCK, WORKSPACE_READ, runs_model_runner_v2
from planner.engines.vllm.version import DEFAULT_VLLM_VERSION, Version, default_engine, parse_version
from planner.errors import PlannerError
from planner.formats import format_info
from planner.spec import ModelSpec
from planner.units import GiB, ceil_div

# ----------------------------------------------------------------------------------------------------
# The profile run's PyTorch activation peak, PREDICTED from vLLM's own source.
#
# What the logs call "PyTorch activation peak memory" (V0 0.6.5+, V1 memory_profiling) is
# torch.cuda.memory_stats()["allocated_bytes.all.peak"] during profile_run() minus the allocated bytes just
# before it (v0.6.6:vllm/utils.py:memory_profiling, MemorySnapshot.measure): every tensor alive at the worst
# moment of the dummy run, plus anything the run allocates and keeps (the cuBLAS workspace). V0 <= 0.6.4
# logs the absolute peak (weights included) instead; V1 >= 0.27 logs torch_peak - torch_allocated after the
# run (v0.33.0:vllm/utils/mem_utils.py), which leaves out what the run keeps. The dummy run itself is read in
# these release sdists (vllm-X.tar.gz from PyPI); versions in between take the rule of the nearest one before
# them.
ACTIVATION_READ_VERSIONS: tuple[str, ...] = (
    "0.6.4", "0.6.5", "0.6.6", "0.7.0", "0.7.1", "0.7.2", "0.7.3", "0.8.0", "0.8.5", "0.9.0", "0.10.2",
    "0.11.0", "0.12.0", "0.13.0", "0.14.0", "0.16.0", "0.17.0", "0.18.0", "0.19.0", "0.20.0", "0.26.0",
    "0.33.0",
)  # fmt: skip

SAMPLER_PATHS = ("torch-sort", "triton", "flashinfer")
# ParallelLMHead pads the vocabulary to a multiple of 64 (vocab_parallel_embedding.py
# DEFAULT_VOCAB_PADDING_SIZE); the lm_head output has the padded width, the sampler works on
# logits[..., :vocab_size].
VOCAB_PADDING = 64
# PyTorch aten/src/ATen/cuda/CublasHandlePool.cpp parseChosenWorkspaceSize(): the workspace the caching
# allocator hands cuBLAS on the first GEMM of a (handle, stream); ":4096:8" on Hopper (later torch: also
# Blackwell, majors 10 and 12), ":4096:2:16:8" otherwise.
CUBLAS_WORKSPACE_HOPPER = 4096 * 8 * 1024
CUBLAS_WORKSPACE_OTHER = 4096 * 1024 * 2 + 16 * 1024 * 8
INT_MAX = 2**31 - 1  # SortStable.cu sorts at most INT_MAX elements per call (numel_or_intmax)
# v0.6.6:vllm/worker/model_runner.py _prepare_model_input_tensors: input_tokens and input_positions (int64)
# and the attention metadata's slot_mapping (int64) are built on the device for every dummy token.
V0_INPUT_BYTES_PER_TOKEN = 3 * 8
MARLIN_MAX_PAR = 16  # csrc/quantization/gptq_marlin/marlin.cuh max_par
MARLIN_TILE_M = 16  # gptq_marlin.cu determine_reduce_max_m tile_m_size
FP32_BYTES = 4
INT64_BYTES = 8


@dataclass(frozen=True, slots=True)
class ProfileActivation:
    """vLLM's profile-run PyTorch peak, PREDICTED term by term (bytes, one rank)."""

    version: str
    engine: str
    tokens: int  # dummy tokens through the model: max_num_batched_tokens
    sequences: int  # dummy requests: the rows of logits the sampler sees
    forward_bytes: int  # the decoder layers' peak (last layer's MLP), incl. quantized-GEMM temporaries
    hidden_bytes: int  # hidden states still held while the sampler runs
    logits_bytes: int  # lm_head output, model dtype, padded vocabulary
    sampler_bytes: int  # the sampler's own temporaries at its worst moment
    sampler_path: str  # "torch-sort" | "triton" | "flashinfer"
    input_bytes: int  # token ids / positions / slot mapping built for the dummy batch
    kept_bytes: int  # allocated during the run and kept (cuBLAS workspace, sampler buffer cache)
    peak_bytes: int  # what the driver rank (TP rank 0, last pipeline stage) logs
    non_driver_peak_bytes: int  # the other TP ranks (V0: forward only; V1 >= 0.11: as rank 0)
    phase: str  # "forward" | "sampler": which one sets the peak
    terms: tuple[str, ...]  # every term with its formula and source
    # V1 < 0.9.1 counts the absolute torch peak, so the model runner's persistent input buffers (allocated
    # before the weights, not part of "Model loading took") are in it; included in peak_bytes.
    buffer_bytes: int = 0
    # A rank that runs the forward but neither logits nor sampler (TP ranks > 0, pipeline stages before
    # the last): forward + inputs + buffers + the cuBLAS workspace (0 from V1 0.27: it logs the transient).
    forward_only_peak_bytes: int = 0


def _rule_version(ver: Version) -> str:
    """The read version whose rules apply to `ver` (the nearest one at or before it)."""
    known = [parse_version(v) for v in ACTIVATION_READ_VERSIONS]
    before = [v for v in known if v <= ver] or known[:1]
    return ".".join(str(x) for x in max(before))


def _sort_temporaries_per_element(rows: int) -> int:
    """Bytes per element PyTorch's CUDA sort allocates besides its outputs, for `rows` rows sorted in one call
    (aten/src/ATen/native/cuda/SortStable.cu launch_stable_sort_kernel):
    * 1 row (segmented_sort_large_segments): an int64 index row (8) + cub radix_sort_pairs' alternate key and
      value buffers (4 + 8);
    * >= 128 rows (segmented_sort_pairs): int64 reverse_indices (8) + cub DeviceSegmentedRadixSort's alternate
      key and value buffers (4 + 8);
    * 2..127 rows (segmented_sort_pairs_by_full_sort): two int2 index/segment arrays (8 + 8), the keys_out the
      cub wrapper allocates (4) and cub's alternate key and value(int2) buffers (4 + 8)."""
    if rows == 1 or rows >= 128:
        return INT64_BYTES + FP32_BYTES + INT64_BYTES
    return 8 + 8 + FP32_BYTES + FP32_BYTES + 8


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _marlin_reduce_rows(tokens: int) -> int:
    """gptq_marlin.cu determine_reduce_max_m: rows of the fp32 c_tmp reduce buffer."""
    for multiple in (1, 2, 3, 4):
        if tokens <= MARLIN_TILE_M * multiple:
            return MARLIN_TILE_M * multiple
    return MARLIN_TILE_M * 4 * min(ceil_div(tokens, MARLIN_TILE_M * 4), MARLIN_MAX_PAR)


# vLLM MLP classes that rebind x (`x, _ = self.gate_up_proj(x); x = self.act_fn(x)`), so gate_up is freed
# before down_proj runs: LlamaMLP (llama.py in every version read, 0.6.4 - 0.33.0), used by Llama, Mistral
# (MistralForCausalLM -> llama.py; mistral.py in 0.33 rebinds too), Phi-3 (phi3.py subclasses
# LlamaForCausalLM) and GLM/GLM-4 (glm.py, glm4.py). Qwen2/Qwen3, Gemma 1-3, DeepSeek, Granite, InternLM2,
# OLMo and the others name it `gate_up` and keep it (v0.8.5.post1:model_executor/models/*.py).
_MLP_FREES_GATE_UP = frozenset({"llama", "mistral", "phi3", "glm", "glm4"})


def _attention_widths(spec: ModelSpec, tp: int) -> tuple[int, int]:
    """(q width, one of k/v width) per TP rank of the widest softmax-attention layer."""
    q_width = kv_width = 0
    shapes = spec.shapes
    head_dim = shapes.head_dim if shapes is not None else spec.hidden_size // spec.num_attention_heads
    for layer in spec.layers:
        attention = layer.attention
        if attention is None or attention.kind not in ("full", "sliding") or not attention.num_q_heads:
            continue
        q_width = max(q_width, ceil_div(attention.num_q_heads, tp) * head_dim)
        kv_width = max(kv_width, max(1, attention.num_kv_heads // tp) * attention.k_head_dim)
    return q_width, kv_width


def _default_sampler_path(ver: Version, engine: str, rows: int) -> tuple[str, str]:
    if engine == "V0":
        # v0.6.6:model_executor/layers/sampler.py: FlashInfer only with VLLM_USE_FLASHINFER_SAMPLER=1.
        return "torch-sort", "V0 sampler: PyTorch sort (FlashInfer only with VLLM_USE_FLASHINFER_SAMPLER=1)"
    if ver >= (0, 26, 0):
        return "flashinfer", (
            "V1 >= 0.26: FlashInfer top-k/top-p by default (VLLM_USE_FLASHINFER_SAMPLER defaults to True, "
            "flashinfer-python is in requirements/cuda.txt); GPUs with <= 16 SMs fall back"
        )
    if ver >= (0, 17, 0) and rows >= 8:
        # The Triton top-k/top-p kernel arrives in 0.17.0 (v0.17.0 and v0.19.0:vllm/v1/sample/ops/
        # topk_topp_sampler.py:251-252 `if HAS_TRITON and logits.shape[0] >= 8`; no topk_topp_triton.py in
        # the 0.16.0 sdist); the dummy sampler run has top_k = V - 1 and top_p = 0.9 on every row
        # (v0.19.0:vllm/v1/worker/gpu_model_runner.py:5575-5581), so it takes this path.
        return "triton", (
            "V1 0.17-0.25: apply_top_k_top_p_triton for >= 8 rows (v0.19.0:v1/sample/ops/"
            "topk_topp_sampler.py:251-252; FlashInfer only with VLLM_USE_FLASHINFER_SAMPLER=1)"
        )
    if ver >= (0, 12, 0):
        return "torch-sort", (
            "V1 0.12-0.16 (and fewer than 8 rows later): PyTorch sort (FlashInfer only with "
            "VLLM_USE_FLASHINFER_SAMPLER=1)"
        )
    return "torch-sort", (
        "V1 0.8-0.11: PyTorch sort when FlashInfer is not installed (the pip wheel does not require it; the "
        "Docker image ships it: pass sampler_path='flashinfer' then)"
    )


@dataclass(frozen=True, slots=True)
class _SamplerPhase:
    """Tensors alive while the dummy sampler runs (bytes)."""

    hidden: int  # hidden states still held
    logits: int  # lm_head output
    sampler: int  # the sampler's own temporaries
    path: str  # the top-k/top-p implementation, or "none"


def _forward_phase(
    spec: ModelSpec,
    *,
    tokens: int,
    tp: int,
    fmt: str,
    ver: Version,
    rule: str,
    engine: str,
    cuda_capability: tuple[int, int] | None,
    terms: list[str],
    dp: int = 1,
) -> int:
    """The forward pass's peak on one rank (bytes): the last decoder layer's live tensors, the all-reduce
    copy under TP, quantized GEMMs' temporaries and the fused-MoE buffers (`dp`: data-parallel ranks whose
    tokens a MoE layer all-gathers)."""
    a = ACTIVATION_BYTES  # BF16/FP16 activations (vLLM runs fp32 checkpoints in 16 bits by default)
    n = tokens
    forward, at_down, at_o_proj = _eager_decoder_layer(spec, n, tp, terms)
    if tp > 1:
        # v0.6.6:distributed/parallel_state.py _all_reduce_out_place (pynccl.all_reduce: empty_like): the
        # reduced copy of down_proj's output sits next to the original.
        after_reduce = n * a * (at_down + spec.hidden_size)
        terms.append(f"forward, tp={tp}: the all-reduce after down_proj is out of place: {after_reduce:,} B")
        forward = max(forward, after_reduce)
    in_down_gemm = _quantized_down_gemm(spec, n, tp, fmt, ver, rule, cuda_capability, at_down, terms)
    if in_down_gemm is not None:
        forward = max(forward, in_down_gemm)
    kept_workspace = _kept_workspace_transient(spec, n, tp, fmt, ver, engine, cuda_capability, terms, dp)
    if kept_workspace is not None:
        forward = max(n * a * at_o_proj, kept_workspace)
    elif spec.num_experts:
        moe_peak = fused_moe_forward_bytes(spec, n, tp=tp, fmt=fmt, activation_bytes=a)
        if moe_peak is None:
            terms.append(
                "MoE layers: counted with the dense-equivalent width (experts per token x expert width + "
                f"shared); the {fmt} expert kernels' buffers are not derived"
            )
        else:  # moe.py: the Triton fused_experts buffers
            terms.extend(moe_peak.terms)
            forward = max(forward, moe_peak.peak_bytes)
    if engine == "V1":
        terms.append(
            "V1 compiles the model (torch.compile/inductor frees each buffer after its last use), so its "
            "forward peak can be lower than this eager figure; --enforce-eager runs exactly this"
        )
    return forward


def _eager_decoder_layer(spec: ModelSpec, n: int, tp: int, terms: list[str]) -> tuple[int, int, int]:
    """(the layer's peak, its width at down_proj, at o_proj; widths in elements per token): the dense
    figure every other term of the forward phase is compared with or built on."""
    a = ACTIVATION_BYTES
    h = spec.hidden_size
    mlp = ceil_div(spec.intermediate_size, tp)  # column-parallel gate_up / row-parallel down split I over TP
    # Forward phase (eager). Tensors alive inside the last decoder layer (v0.7.3:model_executor/models/
    # llama.py LlamaModel.forward / LlamaDecoderLayer.forward; qwen2.py the same): the layer input the model
    # loop still holds (h), the residual (h; fused_add_rms_norm works in place), the normed MLP input (h),
    # then
    #   at act_fn:    gate_up (2I) + SiluAndMul's output (I)                        -> 3h + 3I
    #   at down_proj: act (I) + down_proj's output (h), + gate_up (2I) where the MLP keeps it alive
    #                 (Qwen2MLP: `gate_up, _ = ...`), not where it rebinds x (LlamaMLP: `x, _ = ...`)
    #   at o_proj:    qkv (q + 2kv) + attention output (q) + o_proj's output (h)     -> 4h + 2q + 2kv
    # with I, q and kv per TP rank.
    frees_gate_up = spec.model_type in _MLP_FREES_GATE_UP
    q_width, kv_width = _attention_widths(spec, tp)
    at_act = 3 * h + 3 * mlp
    at_down = 4 * h + mlp + (0 if frees_gate_up else 2 * mlp)
    at_o_proj = 4 * h + 2 * q_width + 2 * kv_width
    forward = n * a * max(at_act, at_down, at_o_proj)
    terms.append(
        f"forward: {n} tokens x max(3h + 3I = {at_act:,}, 4h + I{'' if frees_gate_up else ' + 2I'} = "
        f"{at_down:,}, 4h + 2q + 2kv = {at_o_proj:,}) x {a} B = {forward:,} B (eager decoder layer; "
        + ("LlamaMLP frees gate_up before down_proj" if frees_gate_up else "the MLP keeps gate_up to the end")
        + ")"
    )
    return forward, at_down, at_o_proj


def _quantized_down_gemm(
    spec: ModelSpec,
    n: int,
    tp: int,
    fmt: str,
    ver: Version,
    rule: str,
    cuda_capability: tuple[int, int] | None,
    at_down: int,
    terms: list[str],
) -> int | None:
    """The peak inside down_proj's GEMM where vLLM runs 4-bit AWQ/GPTQ on Marlin, whose temporaries sit on
    top of the layer's tensors; None otherwise (below sm 80 the kernels' temporaries are not modelled, and
    the terms say so)."""
    if fmt not in ("awq", "gptq"):
        return None
    if cuda_capability is not None and cuda_capability < (8, 0):
        terms.append(f"{fmt} below sm 80 uses non-Marlin kernels whose temporaries are not modelled")
        return None
    # vLLM serves 4-bit AWQ/GPTQ with the Marlin kernels on sm >= 80 (awq_marlin / gptq_marlin).
    # csrc/quantization/gptq_marlin/gptq_marlin.cu gptq_marlin_gemm allocates a_tmp [M, K] (always up to
    # 0.7.x, only with act-order from 0.8.5) and an fp32 c_tmp [determine_reduce_max_m(M), N].
    a = ACTIVATION_BYTES
    mlp = ceil_div(spec.intermediate_size, tp)
    act_order = spec.quantization is not None and spec.quantization.desc_act
    a_tmp = n * mlp * a if (ver < (0, 8, 5) or act_order) else 0
    c_tmp = _marlin_reduce_rows(n) * spec.hidden_size * FP32_BYTES
    in_down_gemm = n * a * at_down + a_tmp + c_tmp  # down_proj's output is allocated by the GEMM
    terms.append(
        f"Marlin {fmt} down_proj GEMM: + a_tmp {a_tmp:,} B (M x K x {a}) + fp32 c_tmp {c_tmp:,} B "
        f"({_marlin_reduce_rows(n)} x h x 4) (gptq_marlin.cu gptq_marlin_gemm, vLLM {rule})"
    )
    return in_down_gemm


def _kept_workspace_transient(
    spec: ModelSpec,
    n: int,
    tp: int,
    fmt: str,
    ver: Version,
    engine: str,
    cuda_capability: tuple[int, int] | None,
    terms: list[str],
    dp: int = 1,
) -> int | None:
    """The MoE layer's transient tensors where its expert caches live in the kept fused-MoE workspace
    (MXFP4 on Marlin, V1 vLLM >= 0.29: runner_v2.moe_workspace counts the workspace as consumed memory),
    else None. Alive at the experts: the decoder layer's input, residual and normed MoE input (3h), the input
    padded to the kernel's hidden size K (F.pad, v0.29.0:model_executor/layers/fused_moe/runner/moe_runner.py:
    524-551), the router logits [n, E], select_experts' fp32 weights and int32 ids [n, k], and the layer's
    output [n, h]; with data parallelism, the naive DP/EP dispatch's all-gathered padded input and top-k
    of every DP rank (prepare_finalize/naive_dp_ep.py:112-183)."""
    if not spec.num_experts or fmt != "mxfp4" or engine != "V1" or ver < WORKSPACE_READ:
        return None
    if cuda_capability is None:
        return None
    layout = mxfp4_expert_layout(spec, ver, cuda_capability, tp)
    if layout.backend != "MARLIN":
        return None
    a = ACTIVATION_BYTES
    h, k, e = spec.hidden_size, spec.experts_per_token, spec.num_experts
    padded = n * layout.hidden * a if layout.hidden != h else 0
    top_k = n * k * (FP32_BYTES + 4)
    gathered = dp * (n * layout.hidden * a + top_k) if dp > 1 else 0
    transient = n * a * (4 * h + e) + padded + top_k + gathered
    terms.append(
        f"MoE layers (Marlin MXFP4, vLLM >= 0.29): the expert caches are the kept workspace (runner_v2.py), "
        f"not activation; transient {n} x (4h + E) x {a} + padded input {padded:,} + top-k {top_k:,}"
        + (f" + input and top-k all-gathered over {dp} DP ranks {gathered:,}" if gathered else "")
        + f" = {transient:,} B"
    )
    return transient


def _sampler_phase(
    spec: ModelSpec,
    *,
    tokens: int,
    rows: int,
    ver: Version,
    engine: str,
    sampler_path: str | None,
    sm_count: int | None,
    terms: list[str],
) -> tuple[_SamplerPhase, int]:
    """(the sampler phase's tensors, what the sampler keeps allocated after the run)."""
    a = ACTIVATION_BYTES
    h = spec.hidden_size
    vocab = spec.vocab_size
    vocab_padded = ceil_div(vocab, VOCAB_PADDING) * VOCAB_PADDING
    n = tokens
    r = rows
    if engine == "V1" and runs_model_runner_v2(spec, ver):
        return _v2_sampler_phase(vocab, vocab_padded, h, n, r, sampler_path, terms), 0
    # Sampler phase: the forward's temporaries are gone; the final hidden states stay referenced.
    # V1 0.7.x has no dummy sampler run ("TODO(woosuk): Consider the memory usage of the sampler"): 0.7.0 -
    # 0.7.2 compute the logits of EVERY dummy token (v0.7.1:vllm/v1/worker/gpu_model_runner.py:985-987
    # `logits = self.model.compute_logits(hidden_states, None)` on _dummy_run(self.max_num_tokens)); 0.7.3
    # first takes hidden_states[logit_indices], one row per dummy request (v0.7.3:gpu_model_runner.py
    # profile_run, num_reqs = max_num_seqs). The sampler run arrives in 0.8.0 (v0.8.0:_dummy_sampler_run).
    logits_only = engine == "V1" and ver < (0, 8, 0)
    logit_rows = n if (engine == "V1" and ver < (0, 7, 3)) else r
    if engine == "V0":
        hidden = n * h * a  # execute_model keeps hidden_or_intermediate_states while it samples
    elif logits_only and ver < (0, 7, 3):
        hidden = n * h * a  # v0.7.1:gpu_model_runner.py:985 the whole hidden_states feed compute_logits
    elif ver >= (0, 10, 2):
        # v0.10.2+ profile_run keeps hidden_states and hidden_states[logit_indices]; _dummy_sampler_run adds
        # torch.rand_like of the latter.
        hidden = n * h * a + 2 * r * h * a
    else:
        hidden = r * h * a  # v0.8.5.post1: _dummy_run returns only hidden_states[logit_indices]
    logits = logit_rows * vocab_padded * a  # LogitsProcessor._get_logits: lm_head GEMM output
    if logits_only:
        why_path = "V1 0.7.x profile_run runs no sampler (v0.7.1:gpu_model_runner.py:988 TODO)"
        if sampler_path is not None:
            why_path += f"; the sampler path given ({sampler_path}) does not apply"
        sampler_path = "none"
    elif sampler_path is None:
        sampler_path, why_path = _default_sampler_path(ver, engine, r)
    else:
        why_path = "sampler path given"
    sampler, kept = _sampler_temporaries(sampler_path, why_path, r, vocab, sm_count, terms)
    terms.append(
        f"logits: {logit_rows} rows x {vocab_padded} (vocab padded to 64) x {a} B = {logits:,} B"
        + (" (every dummy token: V1 0.7.0 - 0.7.2)" if logit_rows != r else "")
    )
    terms.append(f"hidden states held while sampling: {hidden:,} B")
    return _SamplerPhase(hidden, logits, sampler, sampler_path), kept


def _v2_sampler_phase(
    vocab: int, vocab_padded: int, h: int, n: int, r: int, sampler_path: str | None, terms: list[str]
) -> _SamplerPhase:
    """Model runner V2's dummy sampler run (planner/engines/vllm/runner_v2.py): the greedy Gumbel argmax on
    the logits as they are. Held: the dummy run's hidden states and the rows it gathered
    (v0.29.0:vllm/v1/worker/gpu/model_runner.py:823-825, 851-883), the logits, and gumbel_sample's partial
    argmax (int64) and maximum (fp32) per 1,024-wide block (sample/gumbel.py:275-279)."""
    a = ACTIVATION_BYTES
    hidden = n * h * a + r * h * a
    logits = r * vocab_padded * a
    sampler = r * ceil_div(vocab, GUMBEL_BLOCK) * (INT64_BYTES + FP32_BYTES)
    terms.append(
        f"sampler (model runner V2, greedy Gumbel argmax on the logits, no fp32 copy): {sampler:,} B of "
        "partial maxima (v0.29.0:vllm/v1/worker/gpu/sample/sampler.py:217-219, 289-320; every sampling "
        "state is its default in the dummy run, sample/states.py:17-36)"
        + (f"; the sampler path given ({sampler_path}) is the V1 runner's" if sampler_path else "")
    )
    terms.append(f"logits: {r} rows x {vocab_padded} (vocab padded to 64) x {a} B = {logits:,} B")
    terms.append(f"hidden states held while sampling: {n} + {r} rows x h x {a} B = {hidden:,} B")
    return _SamplerPhase(hidden, logits, sampler, "v2-greedy")


def _sampler_temporaries(
    sampler_path: str, why_path: str, rows: int, vocab: int, sm_count: int | None, terms: list[str]
) -> tuple[int, int]:
    """(the top-k/top-p sampler's temporaries at its worst moment, the buffer it keeps after the run)."""
    kept = 0
    fp32_copy = rows * vocab * FP32_BYTES  # Sampler.forward: logits.to(torch.float32)
    elements = rows * vocab
    if sampler_path == "none":
        sampler = 0
        terms.append(f"sampler: none - {why_path}")
    elif sampler_path == "torch-sort":
        # _apply_top_k_top_p (V0 sampler.py; V1 topk_topp_sampler.apply_top_k_top_p): logits.sort() returns
        # fp32 values and int64 indices; the peak is inside the sort, with its temporaries.
        rows_per_call = max(1, min(rows, INT_MAX // vocab))
        temporaries = _sort_temporaries_per_element(rows_per_call) * rows_per_call * vocab
        sampler = fp32_copy + elements * (FP32_BYTES + INT64_BYTES) + temporaries
        terms.append(
            f"sampler (top-k/top-p sort): fp32 copy {fp32_copy:,} + sorted values and int64 indices "
            f"{elements * 12:,} + sort temporaries {temporaries:,} B "
            f"({_sort_temporaries_per_element(rows_per_call)} B x {rows_per_call} rows x V; PyTorch "
            "SortStable.cu) - " + why_path
        )
    elif sampler_path == "triton":
        # v0.19.0:v1/sample/ops/topk_topp_triton.py:1010-1019 apply_top_k_top_p_triton works in place on the
        # fp32 logits (v0.19.0:v1/sample/sampler.py:90 `logits.to(torch.float32)`; the caller's bf16 logits
        # stay referenced, gpu_model_runner.py:5571) with a cached [min(next_pow2(min(SMs, rows)), SMs), V]
        # fp32 buffer that stays allocated; then softmax probs (topk_topp_sampler.py:112) and
        # random_sample's q = empty_like(probs) (topk_topp_sampler.py:334): 2 + 4 + 4 + 4 B per element.
        if sm_count is None:
            buffer_rows = _next_power_of_2(rows)
        else:
            buffer_rows = min(_next_power_of_2(min(sm_count, rows)), sm_count)
        kept = buffer_rows * vocab * FP32_BYTES
        sampler = fp32_copy + 2 * elements * FP32_BYTES
        terms.append(
            f"sampler (Triton top-k/top-p): fp32 copy {fp32_copy:,} + probs and q {2 * elements * 4:,} B; "
            f"kept buffer {buffer_rows} x V x 4 = {kept:,} B"
            + (" (SM count not given: next_pow2(rows) bound)" if sm_count is None else "")
            + " - "
            + why_path
        )
    else:
        # flashinfer.sampling.top_k_top_p_sampling_from_logits ("top_k_first"): top_k_mask_logits -> fp32
        # masked logits, then torch.softmax -> fp32 probs.
        sampler = fp32_copy + 2 * elements * FP32_BYTES
        terms.append(
            f"sampler (FlashInfer top-k/top-p): fp32 copy {fp32_copy:,} + masked logits and probs "
            f"{2 * elements * 4:,} B - " + why_path
        )
    return sampler, kept


def _run_buffers(
    spec: ModelSpec,
    version: str,
    engine: str,
    n: int,  # dummy tokens (max_num_batched_tokens)
    r: int,  # dummy requests (max_num_seqs)
    cuda_capability: tuple[int, int] | None,
    terms: list[str],
) -> tuple[int, int, int]:
    """(dummy batch inputs, cuBLAS workspace, V1 < 0.9.1's persistent buffers): what the profile run holds
    besides its forward and sampler phases."""
    ver = parse_version(version)
    inputs = n * V0_INPUT_BYTES_PER_TOKEN if engine == "V0" else 0  # V1 keeps persistent input buffers
    if inputs:
        terms.append(f"dummy batch inputs: {n} x 3 int64 = {inputs:,} B (input ids, positions, slot mapping)")
    if cuda_capability is not None and (cuda_capability[0] == 9 or cuda_capability[0] in (10, 12)):
        workspace = CUBLAS_WORKSPACE_HOPPER
    else:
        workspace = CUBLAS_WORKSPACE_OTHER
    terms.append(
        f"cuBLAS workspace {workspace:,} B, allocated by the run's first GEMM and kept "
        f"(PyTorch CublasHandlePool.cpp parseChosenWorkspaceSize"
        + (", compute capability not given: non-Hopper size)" if cuda_capability is None else ")")
    )
    if engine == "V1" and ver >= (0, 27, 0):
        # v0.33.0:vllm/utils/mem_utils.py: the logged peak is torch_peak - torch_allocated after the run, so
        # what the run keeps counts as consumed memory, not activation.
        terms.append("V1 >= 0.27 logs the transient peak only: kept allocations are not part of it")
    if engine == "V1" and ver > (0, 20, 0):
        terms.append(
            "V1 > 0.20 runs model runner V2 by default for some architectures from 0.22, for all from 0.29 "
            "(planner/engines/vllm/version.py model_runner_v2); for those its own dummy sampler run is taken "
            "(runner_v2.py, read in 0.29.0)"
        )
    buffers = 0
    if engine == "V1" and ver < (0, 9, 1):
        buffers = v1_persistent_buffer_bytes(spec, version, n, r)
        terms.append(
            f"persistent input buffers {buffers:,} B: V1 < 0.9.1 subtracts torch's absolute peak (weights "
            "included), so the model runner's buffers allocated before loading count too "
            "(v0.7.1:vllm/v1/worker/gpu_worker.py:175 allocated_bytes.all.peak; v1_persistent_buffer_bytes)"
        )
    return inputs, workspace, buffers


def _check_profile_inputs(engine: str, max_num_batched_tokens: int, max_num_seqs: int, sampler_path) -> None:
    """Refuse what vLLM refuses to start with, and what the prediction cannot run."""
    if engine not in ("V0", "V1"):
        raise PlannerError(f"vLLM engine must be V0 or V1, got {engine!r}")
    if max_num_batched_tokens < 1 or max_num_seqs < 1:
        raise PlannerError(
            f"max_num_batched_tokens and max_num_seqs must be at least 1 "
            f"(got {max_num_batched_tokens}, {max_num_seqs})"
        )
    if max_num_batched_tokens < max_num_seqs:
        # vllm/config.py SchedulerConfig._verify_args (every version read) refuses this combination.
        raise PlannerError(
            f"max_num_batched_tokens ({max_num_batched_tokens}) must be at least max_num_seqs "
            f"({max_num_seqs}); vLLM refuses to start otherwise"
        )
    if sampler_path is not None and sampler_path not in SAMPLER_PATHS:
        raise PlannerError(f"sampler path must be one of {', '.join(SAMPLER_PATHS)}, got {sampler_path!r}")


def profile_activation(
    spec: ModelSpec,
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    version: str = DEFAULT_VLLM_VERSION,
    engine: str | None = None,
    tp: int = 1,
    weight_format: str | None = None,
    cuda_capability: tuple[int, int] | None = None,
    sampler_path: str | None = None,
    sm_count: int | None = None,
    dp: int = 1,
) -> ProfileActivation:
    """The PyTorch peak of vLLM's profile run on one rank, PREDICTED from the code of `version` (`dp`: the
    data-parallel size, for the MoE layers' all-gathered tokens).

    V0 (v0.6.6:worker/model_runner.py profile_run, v0.8.5.post1:_dummy_run): max_num_seqs dummy prompts that
    add up to max_num_batched_tokens tokens, one forward pass, logits of each prompt's last token, and the
    sampler with SamplingParams(top_p=0.99, top_k=vocab_size - 1) so the top-k/top-p path runs.
    V1 (v0.11.0:v1/worker/gpu_model_runner.py profile_run): _dummy_run(max_num_batched_tokens) with
    min(max_num_seqs, tokens) requests, then _dummy_sampler_run on the last token of each (top_k = V - 1,
    top_p = 0.9, no penalties).
    Peak = max(forward phase, sampler phase) + input buffers + what the run allocates and keeps."""
    ver = parse_version(version)
    engine = (engine or default_engine(ver)).upper()
    _check_profile_inputs(engine, max_num_batched_tokens, max_num_seqs, sampler_path)
    rule = _rule_version(ver)
    n = max_num_batched_tokens
    r = max_num_seqs  # V0: one prompt per sequence; V1: min(max_num_seqs, tokens) == max_num_seqs here
    terms: list[str] = [
        f"activation PREDICTED from vLLM {rule} source ({engine}): {n} dummy tokens in {r} requests"
    ]

    fmt = format_info(weight_format or spec.default_format).name
    forward = _forward_phase(
        spec, tokens=n, tp=tp, fmt=fmt, ver=ver, rule=rule, engine=engine, cuda_capability=cuda_capability,
        terms=terms, dp=dp,
    )  # fmt: skip
    phase_s, kept = _sampler_phase(
        spec, tokens=n, rows=r, ver=ver, engine=engine, sampler_path=sampler_path, sm_count=sm_count,
        terms=terms,
    )  # fmt: skip
    held = _run_buffers(spec, version, engine, n, r, cuda_capability, terms)
    return _profile_peak(
        forward, phase_s, kept, held, rule=rule, ver=ver, engine=engine, tp=tp, n=n, r=r, terms=terms
    )


def _profile_peak(
    forward_phase: int,
    phase_s: _SamplerPhase,
    kept: int,
    held: tuple[int, int, int],
    *,
    rule: str,
    ver: Version,
    engine: str,
    tp: int,
    n: int,
    r: int,
    terms: list[str],
) -> ProfileActivation:
    """The peak the driver rank logs, and the other ranks' (`held`: _run_buffers' inputs, workspace and
    buffers): what the run keeps counts only where the version logs the absolute peak, and which ranks
    sample changes from version to version."""
    inputs, workspace, buffers = held
    hidden, logits, sampler, sampler_path = phase_s.hidden, phase_s.logits, phase_s.sampler, phase_s.path
    transient_only = engine == "V1" and ver >= (0, 27, 0)
    kept = 0 if transient_only else kept + workspace
    sampler_phase = hidden + logits + sampler
    peak = max(forward_phase, sampler_phase) + inputs + kept + buffers
    phase = "forward" if forward_phase >= sampler_phase else "sampler"
    non_driver = forward_phase + inputs + buffers + (0 if transient_only else workspace)
    # V1 (read in 0.11.0, 0.14.0, 0.19.0): LogitsProcessor._gather_logits all-gathers on every rank
    # (Platform.use_all_gather: `envs.VLLM_USE_V1 or ...` in v0.11.0:vllm/platforms/interface.py:468-478,
    # `return True` in v0.19.0:platforms/interface.py:614-618; v0.19.0:model_executor/layers/
    # logits_processor.py:77-83) and every rank runs _dummy_sampler_run on the full vocabulary; the
    # llm-d-planner 0.19.0 TP=2 logs show both ranks logging the same torch peak.
    all_ranks_sample = engine == "V1" and ver >= (0, 11, 0)
    terms.append(
        f"peak = max(forward {forward_phase:,}, sampler {sampler_phase:,}) + inputs {inputs:,} "
        f"+ kept {kept:,} + buffers {buffers:,} = {peak:,} B ({peak / GiB:.2f} GiB, {phase} phase); "
        + (
            "every TP rank all-gathers the logits and runs the sampler, so each logs this peak"
            if all_ranks_sample
            else "TP ranks > 0 skip the sampler"
        )
    )
    non_driver_peak = non_driver if tp > 1 and not all_ranks_sample else peak
    return ProfileActivation(
        version=rule, engine=engine, tokens=n, sequences=r, forward_bytes=forward_phase, hidden_bytes=hidden,
        logits_bytes=logits, sampler_bytes=sampler, sampler_path=sampler_path, input_bytes=inputs,
        kept_bytes=kept, peak_bytes=peak, non_driver_peak_bytes=non_driver_peak, phase=phase,
        terms=tuple(terms), buffer_bytes=buffers, forward_only_peak_bytes=non_driver,
    )  # fmt: skip


def v1_persistent_buffer_bytes(
    spec: ModelSpec, version: str, max_num_batched_tokens: int, max_num_seqs: int
) -> int:
    """The V1 GPUModelRunner's persistent device buffers allocated in __init__ (before the weights load),
    which the absolute torch peak of V1 < 0.9.1 includes:
    * 0.7.0 - 0.8.x: input_ids int32 [max_num_tokens], positions int64 [max_num_tokens], inputs_embeds
      [max_num_tokens, hidden_size] in the model dtype (v0.7.1:vllm/v1/worker/gpu_model_runner.py:139-170,
      v0.8.5:gpu_model_runner.py:245-248; allocated for every model, multimodal or not);
    * 0.9.0 adds query_start_loc int32 [max_num_seqs + 1], seq_lens int32 [max_num_seqs] and slot_mapping
      int64 [max_num_tokens] (v0.9.0:gpu_model_runner.py:205-218).
    Left out: M-RoPE's mrope_positions (Qwen2-VL class models only) and the InputBatch's per-request vectors
    and block table (int32 [max_num_seqs, cdiv(max_model_len, block_size)]: under 1 MiB at the defaults)."""
    ver = parse_version(version)
    n = max_num_batched_tokens
    total = n * 4 + n * INT64_BYTES + n * spec.hidden_size * ACTIVATION_BYTES
    if ver >= (0, 9, 0):
        total += (max_num_seqs + 1) * 4 + max_num_seqs * 4 + n * INT64_BYTES
    return total


def predicted_profile_activation(
    spec: ModelSpec, max_num_batched_tokens: int, max_num_seqs: int, tp: int = 1, **kwargs: Any
) -> int:
    """profile_activation(...).peak_bytes (kept for callers of the first version)."""
    return profile_activation(
        spec, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs, tp=tp, **kwargs
    ).peak_bytes
