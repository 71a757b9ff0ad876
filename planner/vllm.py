"""vLLM's KV-cache pool, block count, "GPU KV cache size" and "Maximum concurrency", version by version.

Follows ../shared/reference/vllm-kv-formulas.md (read from the vLLM release sdists 0.6.4.post1 ... 0.33.0);
the section letters below refer to it. Everything is per rank (per GPU); every rank computes its blocks and
all are then set to the minimum over ranks (a.3). Float arithmetic is kept where vLLM uses floats (requested
memory, available memory), so the block count rounds exactly as vLLM's does.

Figures vLLM measures at startup (weights, PyTorch activation peak, non-torch memory, CUDA-graph estimate)
can be given to reproduce a real log. When the activation peak is not given, profile_activation() PREDICTS it
from what vLLM's profile run allocates in the version asked for (the dummy forward pass, the logits and the
sampler's top-k/top-p temporaries, the cuBLAS workspace), term by term with the source of each term, and the
result is flagged as a prediction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from planner.activations import ACTIVATION_BYTES
from planner.errors import PlannerError
from planner.formats import format_info, weight_bytes
from planner.kv import STATE_KINDS, layer_kv_bytes
from planner.params import count_params
from planner.spec import LayerSpec, ModelSpec
from planner.topology import Topology, make_topology, stage_weight_bytes
from planner.units import GiB, canonical_dtype, dtype_bytes
from planner.vllm_moe import fused_moe_forward_bytes

# The versions whose sdists the reference file was read from (section "Sources").
READ_VERSIONS: tuple[str, ...] = (
    "0.6.4", "0.6.6", "0.7.0", "0.7.1", "0.7.3", "0.8.0", "0.8.5", "0.9.0", "0.9.1", "0.9.2",
    "0.10.0", "0.10.1", "0.10.2", "0.11.0", "0.12.0", "0.13.0", "0.14.0", "0.16.0", "0.17.0", "0.18.0",
    "0.19.0", "0.20.0", "0.21.0", "0.22.0", "0.23.0", "0.24.0", "0.25.0", "0.26.0", "0.27.0", "0.28.0",
    "0.29.0", "0.33.0",
)  # fmt: skip
DEFAULT_VLLM_VERSION = "0.33.0"  # newest read; `--vllm-version` picks another

Version = tuple[int, int, int]


def parse_version(text: str) -> Version:
    """'0.10.1.1' -> (0, 10, 1); 'v0.6.4.post1' -> (0, 6, 4)."""
    parts = str(text).strip().lstrip("vV").split(".")
    numbers: list[int] = []
    for part in parts[:3]:
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        numbers.append(int(digits))
    if len(numbers) < 2:
        raise PlannerError(f"cannot read vLLM version {text!r}; write it like 0.33.0")
    while len(numbers) < 3:
        numbers.append(0)
    return numbers[0], numbers[1], numbers[2]


@dataclass(frozen=True, slots=True)
class KVGroup:
    """One KV-cache group of vLLM's V1 manager (or the single V0 cache)."""

    kind: str  # "full" | "sliding" | "mla" | "linear" / "mamba" (fixed state, hybrid models)
    window: int | None
    layers: int  # layers per group (group_size; padded groups count as full)
    page_bytes: int  # bytes of one block of one layer
    blocks_per_request: int  # blocks one request of max_model_len needs in this group (a.4)


@dataclass(frozen=True, slots=True)
class VLLMRank:
    rank: int
    pp_stage: int
    requested_bytes: float
    weights_bytes: int
    pool_bytes: int
    bytes_per_block: int
    num_blocks: int
    activation_bytes: int = 0  # the activation peak this rank's stage subtracts


@dataclass(frozen=True, slots=True)
class VLLMPool:
    version: str
    engine: str  # "V0" | "V1"
    total_bytes: int | None
    gpu_memory_utilization: float | None
    requested_bytes: int | None  # of the limiting rank (floored when vLLM keeps a float)
    weights_bytes: int
    activation_bytes: int
    activation_predicted: bool
    non_torch_bytes: int
    cudagraph_bytes: int
    pool_bytes: int  # KV pool of the limiting rank
    block_size: int
    bytes_per_block: int
    num_blocks: int  # minimum over ranks, what every rank then uses
    num_groups: int
    blocks_per_request: int
    kv_cache_tokens: int  # the number on the "GPU KV cache size" line (V0: blocks x block size)
    max_concurrency: float
    max_concurrency_text: str  # as logged, "%.2fx"
    max_model_len: int
    max_num_batched_tokens: int
    groups: tuple[KVGroup, ...]
    ranks: tuple[VLLMRank, ...]
    log_lines: tuple[str, ...]
    notes: tuple[str, ...]
    max_num_seqs: int = 0
    activation_profile: ProfileActivation | None = None  # the term-by-term prediction, when predicted


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


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
USAGE_CONTEXTS = ("openai", "llm")  # `vllm serve` (UsageContext.OPENAI_API_SERVER) | offline LLM(...) class
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


def default_scheduler_limits(
    version: str,
    engine: str,
    *,
    max_model_len: int,
    usage_context: str = "openai",
    total_bytes: int | None = None,
    device_name: str | None = None,
    cuda_capability: tuple[int, int] | None = None,
    spec: ModelSpec | None = None,
) -> tuple[int, int, tuple[str, ...]]:
    """(max_num_batched_tokens, max_num_seqs, why) as vLLM `version` defaults them; why ends with one note
    for max_num_batched_tokens and one for max_num_seqs."""
    ver = parse_version(version)
    if usage_context not in USAGE_CONTEXTS:
        raise PlannerError(f"usage context must be one of {', '.join(USAGE_CONTEXTS)}, got {usage_context!r}")
    why: list[str] = []
    if engine == "V0":
        # v0.6.6:vllm/engine/arg_utils.py create_engine_config / v0.8.5.post1 _set_default_args_v0: chunked
        # prefill is switched on for max_model_len > 32768 on CUDA unless the model has a sliding window (or
        # LoRA / spec decode, not modelled); from 0.8.5 also off for MLA models. max_num_seqs defaults to 256.
        sliding = spec is not None and any(
            layer.attention is not None and layer.attention.kind == "sliding" for layer in spec.layers
        )
        mla = spec is not None and spec.shapes is not None and spec.shapes.mla is not None
        chunked = max_model_len > 32768 and not sliding and not (mla and ver >= (0, 8, 5))
        # v0.6.6:vllm/config.py SchedulerConfig.__post_init__: 2048 with chunked prefill, else max(mml, 2048).
        tokens = 2048 if chunked else max(max_model_len, 2048)
        why.append(
            f"max_num_batched_tokens {tokens} (V0 default: "
            + ("chunked prefill, on for max_model_len > 32768" if chunked else "max(max_model_len, 2048)")
            + "; v0.6.6:config.py SchedulerConfig)"
        )
        why.append("max_num_seqs 256 (V0 default; v0.6.6:engine/arg_utils.py)")
        return tokens, 256, tuple(why)
    if ver < (0, 8, 5):
        # V1 0.7.0 - 0.8.4: EngineArgs._override_v1_engine_args keys max_num_batched_tokens on the device NAME
        # ("h100" or "h200" in current_platform.get_device_name().lower(): 16384 LLM / 8192 `vllm serve`,
        # else 8192 / 2048) and max_num_seqs is 1024 whatever the device (v0.7.1:vllm/engine/arg_utils.py:214
        # and 1280-1312; v0.7.3:arg_utils.py:224,1368-1378; v0.8.0:arg_utils.py:1693-1717).
        name = (device_name or "").lower()
        big = "h100" in name or "h200" in name
        tokens = ({"llm": 16384, "openai": 8192} if big else {"llm": 8192, "openai": 2048})[usage_context]
        if device_name is None:
            why.append("device name not given: not an H100/H200 assumed (V1 < 0.8.5 keys its defaults on it)")
        where = (
            f"V1 {'.'.join(map(str, ver))} default for "
            f"{'`vllm serve`' if usage_context == 'openai' else 'the LLM class'} on "
            f"{'an H100/H200' if big else 'a GPU not named H100/H200'}; v0.7.1:engine/arg_utils.py:1280-1312"
        )
        why.append(f"max_num_batched_tokens {tokens} ({where})")
        why.append("max_num_seqs 1024 (V1 < 0.8.5 default for every device; v0.7.1:engine/arg_utils.py:214)")
        return tokens, 1024, tuple(why)
    # V1: EngineArgs._set_default_args (v0.8.5.post1:engine/arg_utils.py:1591-1621, v0.11.0:1585-1680,
    # v0.33.0:get_batch_defaults): by usage context and the device's total memory.
    tier = "small"
    if total_bytes is None:
        why.append("device total not given: vLLM's small-GPU defaults assumed")
    elif ver > (0, 29, 0) and total_bytes >= 160 * GiB:
        tier = "huge"  # v0.33.0: B200/B300 class
    elif total_bytes >= 70 * GiB:
        tier = "large"
        name = (device_name or "").lower()
        if ver >= (0, 9, 0) and "a100" in name:  # PR #17885: v0.9.0:arg_utils.py:1495 (absent in v0.8.5)
            tier = "small"
        if ver > (0, 29, 0) and cuda_capability == (12, 1):  # v0.33.0: GB10 (DGX Spark) stays small
            tier = "small"
        if ver >= (0, 9, 0) and device_name is None:
            why.append("device name not given: not an A100 assumed (an A100-80GB gets the small defaults)")
    table = {
        "huge": ({"llm": 16384, "openai": 16384}, 1024),
        "large": ({"llm": 16384, "openai": 8192}, 1024),
        "small": ({"llm": 8192, "openai": 2048}, 256),
    }
    by_context, seqs = table[tier]
    tokens = by_context[usage_context]
    if ver >= (0, 11, 0):
        seqs = min(seqs, tokens)  # v0.11.0:arg_utils.py:1678 min(default, max_num_batched_tokens)
    where = (
        f"V1 default for {'`vllm serve`' if usage_context == 'openai' else 'the LLM class'} on a "
        f"{'>= 160 GiB' if tier == 'huge' else '>= 70 GiB' if tier == 'large' else 'smaller'} GPU"
    )
    why.append(f"max_num_batched_tokens {tokens} ({where})")
    why.append(f"max_num_seqs {seqs} ({where})")
    return tokens, seqs, tuple(why)


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
    return MARLIN_TILE_M * 4 * min(_cdiv(tokens, MARLIN_TILE_M * 4), MARLIN_MAX_PAR)


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
        q_width = max(q_width, _cdiv(attention.num_q_heads, tp) * head_dim)
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


def default_engine(version: Version) -> str:
    """The engine a vLLM version runs when none is named: V1 is the default from 0.8.0 (VLLM_USE_V1)."""
    return "V0" if version < (0, 8, 0) else "V1"


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
) -> ProfileActivation:
    """The PyTorch peak of vLLM's profile run on one rank, PREDICTED from the code of `version`.

    V0 (v0.6.6:worker/model_runner.py profile_run, v0.8.5.post1:_dummy_run): max_num_seqs dummy prompts that
    add up to max_num_batched_tokens tokens, one forward pass, logits of each prompt's last token, and the
    sampler with SamplingParams(top_p=0.99, top_k=vocab_size - 1) so the top-k/top-p path runs.
    V1 (v0.11.0:v1/worker/gpu_model_runner.py profile_run): _dummy_run(max_num_batched_tokens) with
    min(max_num_seqs, tokens) requests, then _dummy_sampler_run on the last token of each (top_k = V - 1,
    top_p = 0.9, no penalties).
    Peak = max(forward phase, sampler phase) + input buffers + what the run allocates and keeps."""
    ver = parse_version(version)
    engine = (engine or default_engine(ver)).upper()
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
    rule = _rule_version(ver)
    a = ACTIVATION_BYTES  # BF16/FP16 activations (vLLM runs fp32 checkpoints in 16 bits by default)
    h = spec.hidden_size
    mlp = _cdiv(spec.intermediate_size, tp)  # column-parallel gate_up / row-parallel down split I over TP
    vocab = spec.vocab_size
    vocab_padded = _cdiv(vocab, VOCAB_PADDING) * VOCAB_PADDING
    n = max_num_batched_tokens
    r = max_num_seqs  # V0: one prompt per sequence; V1: min(max_num_seqs, tokens) == max_num_seqs here
    terms: list[str] = [
        f"activation PREDICTED from vLLM {rule} source ({engine}): {n} dummy tokens in {r} requests"
    ]

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
    if tp > 1:
        # v0.6.6:distributed/parallel_state.py _all_reduce_out_place (pynccl.all_reduce: empty_like): the
        # reduced copy of down_proj's output sits next to the original.
        after_reduce = n * a * (at_down + h)
        terms.append(f"forward, tp={tp}: the all-reduce after down_proj is out of place: {after_reduce:,} B")
        forward = max(forward, after_reduce)
    fmt = format_info(weight_format or spec.default_format).name
    if fmt in ("awq", "gptq") and (cuda_capability is None or cuda_capability >= (8, 0)):
        # vLLM serves 4-bit AWQ/GPTQ with the Marlin kernels on sm >= 80 (awq_marlin / gptq_marlin).
        # csrc/quantization/gptq_marlin/gptq_marlin.cu gptq_marlin_gemm allocates a_tmp [M, K] (always up to
        # 0.7.x, only with act-order from 0.8.5) and an fp32 c_tmp [determine_reduce_max_m(M), N].
        act_order = spec.quantization is not None and spec.quantization.desc_act
        a_tmp = n * mlp * a if (ver < (0, 8, 5) or act_order) else 0
        c_tmp = _marlin_reduce_rows(n) * h * FP32_BYTES
        in_down_gemm = n * a * at_down + a_tmp + c_tmp  # down_proj's output is allocated by the GEMM
        terms.append(
            f"Marlin {fmt} down_proj GEMM: + a_tmp {a_tmp:,} B (M x K x {a}) + fp32 c_tmp {c_tmp:,} B "
            f"({_marlin_reduce_rows(n)} x h x 4) (gptq_marlin.cu gptq_marlin_gemm, vLLM {rule})"
        )
        forward = max(forward, in_down_gemm)
    elif fmt in ("awq", "gptq"):
        terms.append(f"{fmt} below sm 80 uses non-Marlin kernels whose temporaries are not modelled")
    if spec.num_experts:
        moe_peak = fused_moe_forward_bytes(spec, n, tp=tp, fmt=fmt, activation_bytes=a)
        if moe_peak is None:
            terms.append(
                "MoE layers: counted with the dense-equivalent width (experts per token x expert width + "
                f"shared); the {fmt} expert kernels' buffers are not derived"
            )
        else:  # planner.vllm_moe: the Triton fused_experts buffers
            terms.extend(moe_peak.terms)
            forward = max(forward, moe_peak.peak_bytes)
    if engine == "V1":
        terms.append(
            "V1 compiles the model (torch.compile/inductor frees each buffer after its last use), so its "
            "forward peak can be lower than this eager figure; --enforce-eager runs exactly this"
        )

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
    fp32_copy = r * vocab * FP32_BYTES  # Sampler.forward: logits.to(torch.float32)
    elements = r * vocab
    if logits_only:
        why_path = "V1 0.7.x profile_run runs no sampler (v0.7.1:gpu_model_runner.py:988 TODO)"
        if sampler_path is not None:
            why_path += f"; the sampler path given ({sampler_path}) does not apply"
        sampler_path = "none"
    elif sampler_path is None:
        sampler_path, why_path = _default_sampler_path(ver, engine, r)
    else:
        why_path = "sampler path given"
    kept = 0
    if sampler_path == "none":
        sampler = 0
        terms.append(f"sampler: none - {why_path}")
    elif sampler_path == "torch-sort":
        # _apply_top_k_top_p (V0 sampler.py; V1 topk_topp_sampler.apply_top_k_top_p): logits.sort() returns
        # fp32 values and int64 indices; the peak is inside the sort, with its temporaries.
        rows_per_call = max(1, min(r, INT_MAX // vocab))
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
            buffer_rows = _next_power_of_2(r)
        else:
            buffer_rows = min(_next_power_of_2(min(sm_count, r)), sm_count)
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
    terms.append(
        f"logits: {logit_rows} rows x {vocab_padded} (vocab padded to 64) x {a} B = {logits:,} B"
        + (" (every dummy token: V1 0.7.0 - 0.7.2)" if logit_rows != r else "")
    )
    terms.append(f"hidden states held while sampling: {hidden:,} B")

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
    kept += workspace
    if engine == "V1" and ver >= (0, 27, 0):
        # v0.33.0:vllm/utils/mem_utils.py: the logged peak is torch_peak - torch_allocated after the run, so
        # what the run keeps counts as consumed memory, not activation.
        terms.append("V1 >= 0.27 logs the transient peak only: kept allocations are not part of it")
        kept = 0
    if engine == "V1" and ver > (0, 20, 0):
        terms.append(
            "V1 > 0.20 may use model runner V2 (default in 0.33), whose sampler was not derived; "
            "the V1 runner's dummy sampler run is applied"
        )
    buffers = 0
    if engine == "V1" and ver < (0, 9, 1):
        buffers = v1_persistent_buffer_bytes(spec, version, max_num_batched_tokens, max_num_seqs)
        terms.append(
            f"persistent input buffers {buffers:,} B: V1 < 0.9.1 subtracts torch's absolute peak (weights "
            "included), so the model runner's buffers allocated before loading count too "
            "(v0.7.1:vllm/v1/worker/gpu_worker.py:175 allocated_bytes.all.peak; v1_persistent_buffer_bytes)"
        )
    forward_phase = forward
    sampler_phase = hidden + logits + sampler
    peak = max(forward_phase, sampler_phase) + inputs + kept + buffers
    phase = "forward" if forward_phase >= sampler_phase else "sampler"
    non_driver = forward_phase + inputs + buffers + (0 if engine == "V1" and ver >= (0, 27, 0) else workspace)
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
    return ProfileActivation(
        version=rule,
        engine=engine,
        tokens=n,
        sequences=r,
        forward_bytes=forward_phase,
        hidden_bytes=hidden,
        logits_bytes=logits,
        sampler_bytes=sampler,
        sampler_path=sampler_path,
        input_bytes=inputs,
        kept_bytes=kept,
        peak_bytes=peak,
        non_driver_peak_bytes=non_driver if tp > 1 and not all_ranks_sample else peak,
        phase=phase,
        terms=tuple(terms),
        buffer_bytes=buffers,
        forward_only_peak_bytes=non_driver,
    )


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


# ----------------------------------------------------------------------------------------------------
# Hybrid models (Mamba-2 / Gated DeltaNet layers next to attention): vLLM V1 keeps every layer's cache in
# pages of one size. It raises the attention block size until an attention page holds at least one state
# page, then pads the state page to exactly the attention page. Read in the release sdists 0.10.2, 0.11.0,
# 0.12.0, 0.13.0, 0.14.0 and 0.20.0 (model_executor/models/config.py HybridAttentionMambaModelConfig up to
# 0.19, platforms/interface.py _align_hybrid_block_size from 0.20; layers/mamba/mamba_utils.py for the state
# shapes and dtypes; v1/kv_cache_interface.py MambaSpec; v1/core/kv_cache_utils.py for groups and logs).
# 0.26.0 was read too: there hybrids get prefix caching by default (v0.26.0:config/model.py:1895
# is_prefix_caching_supported), which puts the state in mamba_cache_mode "align" (models without Mamba prefix
# caching support: Qwen3-Next, Qwen3.5; two state blocks per request) or "all" (Nemotron-H: chunk-aligned
# blocks and a state block per block of the request, not modelled) (v0.26.0:models/config.py MambaModelConfig,
# kv_cache_interface.py MambaSpec.max_memory_usage_bytes). 0.33.0 adds a prefill-checkpoint alignment to
# "align" and a new KV-cache planner (kv_cache_planning.py): not modelled.
HYBRID_FIRST_VERSION: Version = (0, 10, 2)  # first read version with HybridAttentionMambaModelConfig
HYBRID_LAST_VERSION: Version = (0, 26, 99)
HYBRID_READ_VERSIONS: tuple[str, ...] = ("0.10.2", "0.11.0", "0.12.0", "0.13.0", "0.14.0", "0.20.0", "0.26.0")
# Prefix caching is off by default for hybrids up to 0.20 (v0.20.0:config/model.py:1787) and on in 0.26; the
# versions between were not read, so there the caller has to say which.
HYBRID_PREFIX_CACHING_UNKNOWN: tuple[Version, Version] = ((0, 21, 0), (0, 25, 99))


@dataclass(frozen=True, slots=True)
class HybridPages:
    """vLLM's page unification for a model with Mamba / linear-attention layers (one rank)."""

    block_size: int  # attention block size in tokens after unification
    attention_bytes_per_token: int  # one attention layer, one token (K + V)
    state_bytes: int  # one state layer's MambaSpec page before padding (conv + temporal state)
    page_bytes: int  # the unified page: block_size * attention_bytes_per_token, the state page padded to it
    state_block_size: int  # MambaSpec.block_size: max_model_len without prefix caching, else block_size
    state_blocks_per_request: int  # state blocks one request holds per group
    mamba_cache_mode: str  # "none" (no prefix caching) | "align"
    alignment: int  # the kernel block alignment the block size was rounded to
    conv_dtype: str
    temporal_dtype: str
    log_lines: tuple[str, ...]  # "Setting attention block size ..." / "Padding mamba page size ..."


def _model_dtype_name(spec: ModelSpec) -> str:
    return canonical_dtype(spec.torch_dtype)


def _config_dtype(spec: ModelSpec, key: str) -> str | None:
    value = spec.config.get(key)
    if value is None:
        return None
    try:
        return canonical_dtype(str(value))
    except ValueError:
        raise PlannerError(f"{spec.name}: config field {key!r} has an unknown dtype {value!r}") from None


def vllm_state_dtypes(
    spec: ModelSpec, kind: str, version: Version, mamba_ssm_cache_dtype: str = "auto"
) -> tuple[str, str, str]:
    """(conv state dtype, temporal/SSM state dtype, why) of one state layer as vLLM `version` allocates it.

    mamba_utils.py MambaStateDtypeCalculator: the conv state takes mamba_cache_dtype ("auto": model dtype);
    Mamba-2's temporal state takes mamba_ssm_cache_dtype ("auto": the conv dtype). Gated DeltaNet's temporal
    state followed mamba_cache_dtype until 0.14 (v0.14.0:mamba_utils.py gated_delta_net_state_dtype returns
    (state_dtype, state_dtype)) and mamba_ssm_cache_dtype in 0.20 (v0.20.0); the versions between were not
    read: the 0.20 rule is applied from 0.15 on (a vLLM 0.17.1 startup log of Qwen3.5-35B-A3B already shows
    the fp32 state, "Setting attention block size to 1056 tokens"). The per-model defaults of
    mamba_ssm_cache_dtype (model_executor/models/config.py): Nemotron-H takes the HF config's
    mamba_ssm_cache_dtype, else float16 in 0.13-0.14 and float32 in 0.20 (none before 0.13);
    Qwen3.5 takes the HF config's mamba_ssm_dtype (0.20, Qwen3_5ForConditionalGenerationConfig)."""
    model = _model_dtype_name(spec)
    conv = model
    ssm = "auto" if mamba_ssm_cache_dtype in ("", "auto") else canonical_dtype(mamba_ssm_cache_dtype)
    why = "--mamba-ssm-cache-dtype given" if ssm != "auto" else ""
    if ssm == "auto" and spec.model_type == "nemotron_h" and version >= (0, 13, 0):
        configured = _config_dtype(spec, "mamba_ssm_cache_dtype")
        default = "float32" if version >= (0, 20, 0) else "float16"
        ssm = configured or default
        why = (
            "the config's mamba_ssm_cache_dtype"
            if configured
            else f"NemotronHForCausalLMConfig default {default} in vLLM {'.'.join(map(str, version))}"
        )
    if ssm == "auto" and spec.model_type.startswith("qwen3_5"):  # vLLM has Qwen3.5 only after 0.14
        configured = _config_dtype(spec, "mamba_ssm_dtype")
        if configured:
            ssm, why = configured, "the config's mamba_ssm_dtype (Qwen3_5ForConditionalGenerationConfig)"
    if kind == "linear" and version < (0, 15, 0):
        return conv, conv, "Gated DeltaNet state in mamba_cache_dtype (auto: model dtype) up to 0.14"
    if ssm == "auto":
        return conv, conv, "mamba_ssm_cache_dtype auto: the model dtype"
    return conv, ssm, why


def _divide(numerator: int, denominator: int, what: str, spec: ModelSpec) -> int:
    # vllm.distributed.divide asserts exact division
    if numerator % denominator:
        raise PlannerError(f"{spec.name}: {what} ({numerator}) is not divisible by tp={denominator}")
    return numerator // denominator


def vllm_state_page_bytes(
    spec: ModelSpec, kind: str, tp: int, version: Version, mamba_ssm_cache_dtype: str = "auto"
) -> tuple[int, str, str]:
    """(MambaSpec page bytes, conv dtype, temporal dtype) of one state layer on one rank, from vLLM's shapes.

    vLLM keeps conv_kernel - 1 columns of the convolution window (transformers keeps conv_kernel, as
    planner.kv counts) and may keep the recurrent state in the model dtype instead of transformers' fp32, so
    its page is computed here from the shapes (mamba_utils.py MambaStateShapeCalculator, the same in 0.10.2 -
    0.33.0 apart from speculative-decoding columns, which are 0 without spec decode):
    * Gated DeltaNet: conv (conv_kernel - 1, (2*k_heads*k_dim + v_heads*v_dim) / tp),
      temporal (v_heads / tp, k_dim, v_dim);
    * Mamba-2: n_groups grows to tp when tp does not divide it (extra_groups_for_head_shards),
      conv (conv_kernel - 1, (heads*head_dim + 2*n_groups*state) / tp),
      temporal (heads / tp, head_dim, state)."""
    shapes = spec.shapes
    conv_dtype, temporal_dtype, _ = vllm_state_dtypes(spec, kind, version, mamba_ssm_cache_dtype)
    if kind == "linear":
        if shapes is None or shapes.linear_attention is None:
            raise PlannerError(f"{spec.name}: linear-attention layers without their shapes")
        la = shapes.linear_attention
        conv_dim = 2 * la.num_key_heads * la.key_head_dim + la.num_value_heads * la.value_head_dim
        conv = (la.conv_kernel - 1) * _divide(conv_dim, tp, "the convolution width", spec)
        temporal = _divide(la.num_value_heads, tp, "linear_num_value_heads", spec) * la.key_head_dim
        temporal *= la.value_head_dim
    elif kind == "mamba":
        if shapes is None or shapes.mamba is None:
            raise PlannerError(f"{spec.name}: Mamba layers without their shapes")
        m = shapes.mamba
        groups = m.n_groups if m.n_groups % tp == 0 else m.n_groups + (tp - m.n_groups)
        conv_dim = m.num_heads * m.head_dim + 2 * groups * m.state_size
        conv = (m.conv_kernel - 1) * _divide(conv_dim, tp, "the convolution width", spec)
        temporal = _divide(m.num_heads, tp, "mamba_num_heads", spec) * m.head_dim * m.state_size
    else:
        raise PlannerError(f"{spec.name}: {kind!r} is not a state layer")
    page = conv * dtype_bytes(conv_dtype) + temporal * dtype_bytes(temporal_dtype)
    return page, conv_dtype, temporal_dtype


def hybrid_pages(
    spec: ModelSpec,
    *,
    version: Version,
    kv_dtype: str,
    tp: int,
    block_size: int,
    max_model_len: int,
    cuda_capability: tuple[int, int] | None = None,
    mamba_ssm_cache_dtype: str = "auto",
    mamba_cache_mode: str = "none",
) -> HybridPages:
    """The attention block size and the unified page of a hybrid model, as vLLM `version` sets them.
    mamba_cache_mode: "none" (prefix caching off) or "align" (on, for models without Mamba prefix caching)."""
    if mamba_cache_mode not in ("none", "align"):
        raise PlannerError(f"mamba_cache_mode {mamba_cache_mode!r} is not modelled (none, align)")
    if mamba_cache_mode == "align" and version < (0, 20, 0):
        raise PlannerError("mamba_cache_mode 'align' exists from vLLM 0.20 (in the versions read)")
    attention_layers = [
        layer
        for layer in spec.layers
        if layer.attention is not None and layer.attention.kind not in STATE_KINDS
    ]
    state_kinds = sorted(
        {
            layer.attention.kind
            for layer in spec.layers
            if layer.attention is not None and layer.attention.kind in STATE_KINDS
        }
    )
    if not attention_layers:
        raise PlannerError(f"{spec.name}: no attention layers; attention-free models are not modelled")
    if len(state_kinds) != 1 or any(layer.attention.kind != "full" for layer in attention_layers):  # type: ignore[union-attr]
        raise PlannerError(
            f"{spec.name}: only full attention next to one kind of state layer is modelled for vLLM hybrids"
        )
    kind = state_kinds[0]
    if spec.model_type.startswith("qwen3_5") and version < (0, 15, 0):
        shown = ".".join(map(str, version))
        raise PlannerError(f"{spec.name}: vLLM {shown} has no Qwen3.5 model (0.14.0 has none)")
    # FullAttentionSpec(block_size=1, ...).page_size_bytes: K and V of one token of one layer (planner.kv).
    per_token = layer_kv_bytes(attention_layers[0], 1, kv_dtype, spec, tp)
    state, conv_dtype, temporal_dtype = vllm_state_page_bytes(spec, kind, tp, version, mamba_ssm_cache_dtype)
    head_size = attention_layers[0].attention.k_head_dim  # type: ignore[union-attr]
    # The kernel block alignment: 16 (FlashAttention needs multiples of 16; v0.11.0:models/config.py:363-368).
    # 0.12-0.14: 32 on Blackwell (compute capability 10.0 in 0.12, the 10.x family from 0.13) for head size
    # 256 with the default / FlashInfer backend (v0.12.0:models/config.py, flashinfer issue 1993).
    # 0.20: max(the smallest kernel block size the attention backend supports, cache block_size)
    # (v0.20.0:platforms/interface.py:577-583); FlashAttention's smallest is 16 (MultipleOf(16), or
    # [16, 32, 64] for fp32-state hybrids: v0.20.0:v1/attention/backends/flash_attn.py:75-92; v0.26.0 the
    # same), FlashInfer's too ([16, 32, 64]: flashinfer.py:338-341); the backend is not modelled.
    alignment = 16
    if (0, 12, 0) <= version < (0, 20, 0) and head_size == 256 and cuda_capability is not None:
        blackwell = cuda_capability == (10, 0) if version < (0, 13, 0) else cuda_capability[0] == 10
        if blackwell:
            alignment = 32
    if version >= (0, 20, 0):
        alignment = max(16, block_size)
    attention_block = alignment * _cdiv(state, alignment * per_token)
    log: list[str] = []
    chosen = block_size
    if chosen < attention_block:
        chosen = attention_block
        log.append(
            f"Setting attention block size to {attention_block} tokens to ensure that attention page size "
            "is >= mamba page size."
        )
    page = chosen * per_token
    if page != state:
        log.append(
            f"Padding mamba page size by {100 * (page - state) / state:.2f}% to ensure that mamba page size "
            "and attention page size are exactly equal."
        )
    # MambaSpec.block_size is max_model_len without prefix caching (v0.11.0:gpu_model_runner.py:4127-4133,
    # v0.12.0+: cache_config.mamba_block_size = max_model_len), so every request holds one state block per
    # group (max_memory_usage_bytes: v0.11.0 page_size_bytes; v0.12.0 cdiv(mml, mml) * page; v0.20.0 / v0.26.0
    # mamba_cache_mode "none": 1 + speculative blocks). "align" sets mamba_block_size = block_size
    # (v0.20.0:platforms/interface.py:612-613) and holds 2 + speculative blocks (kv_cache_interface.py).
    align = mamba_cache_mode == "align"
    return HybridPages(
        block_size=chosen,
        attention_bytes_per_token=per_token,
        state_bytes=state,
        page_bytes=page,
        state_block_size=chosen if align else max_model_len,
        state_blocks_per_request=2 if align else 1,
        mamba_cache_mode=mamba_cache_mode,
        alignment=alignment,
        conv_dtype=conv_dtype,
        temporal_dtype=temporal_dtype,
        log_lines=tuple(log),
    )


def _groups_for_stage(
    spec: ModelSpec,
    layers: Sequence[int],
    *,
    version: Version,
    engine: str,
    kv_dtype: str,
    tp: int,
    block_size: int,
    max_model_len: int,
    lookahead_tokens: int,
    hybrid_manager: bool,
    notes: list[str],
    hybrid: HybridPages | None = None,
) -> tuple[list[KVGroup], int]:
    """The KV groups of one rank and its bytes per block (a.3, a.4). `hybrid`: the unified pages of a model
    with Mamba / linear-attention layers (their state: blocks per group, padded to the attention page)."""
    attn_layers: list[LayerSpec] = []
    for index in layers:
        layer = spec.layers[index]
        attention = layer.attention
        if attention is None:
            continue
        if attention.kind in STATE_KINDS and hybrid is None:
            raise PlannerError(f"{spec.name}: state layers need the hybrid page unification (internal error)")
        attn_layers.append(layer)
    if not attn_layers:
        raise PlannerError(f"{spec.name}: no attention layers on this rank, so vLLM allocates no KV blocks")

    def page(layer: LayerSpec) -> int:
        if hybrid is not None and layer.attention is not None and layer.attention.kind in STATE_KINDS:
            return hybrid.page_bytes  # the state page, padded to the attention page
        return layer_kv_bytes(layer, block_size, kv_dtype, spec, tp)

    def blocks_req(kind: str, window: int | None) -> int:
        if kind in STATE_KINDS:
            assert hybrid is not None
            return hybrid.state_blocks_per_request
        if kind == "sliding" and window is not None:
            return _cdiv(min(window - 1 + lookahead_tokens, max_model_len), block_size) + 1
        return _cdiv(max_model_len, block_size)

    # V0, and V1 before the hybrid manager, size every attention layer's cache as full attention.
    treat_all_full = engine == "V0" or version < (0, 9, 1) or not hybrid_manager
    buckets: dict[tuple[str, int | None], list[LayerSpec]] = {}
    for layer in attn_layers:
        attention = layer.attention
        assert attention is not None
        kind = "full" if treat_all_full and attention.kind == "sliding" else attention.kind
        window = attention.window if kind == "sliding" else None
        buckets.setdefault((kind, window), []).append(layer)
    if treat_all_full and any(layer.attention.kind == "sliding" for layer in attn_layers):  # type: ignore[union-attr]
        notes.append("sliding-window layers are allocated as full attention (no hybrid KV-cache manager)")

    if len(buckets) == 1:
        ((kind, window), members) = next(iter(buckets.items()))
        bytes_per_block = sum(page(layer) for layer in members)
        return [
            KVGroup(kind, window, len(members), bytes_per_block, blocks_req(kind, window))
        ], bytes_per_block

    pages = {page(layer) for layer in attn_layers}
    if len(pages) != 1:
        raise PlannerError(
            f"{spec.name}: hybrid layers with different page sizes need vLLM's page unification, "
            "which is not modelled; plan this model without --engine vllm"
        )
    page_bytes = pages.pop()
    sizes = [len(members) for members in buckets.values()]
    # _get_kv_cache_groups_uniform_page_size: the smallest bucket sets the group size
    # (v0.11.0:kv_cache_utils.py:977); from 0.12 the largest one does when it is not much larger, "much"
    # being 1.25x in 0.12-0.14 (v0.12.0:kv_cache_utils.py:1015-1023, v0.14.0:1034-1042) and 1.5x from 0.20
    # (v0.20.0:1125-1135, v0.33.0:kv_cache_planning.py:520-532). Versions between read ones take the rule of
    # the one before them.
    group_size = min(sizes)
    if version >= (0, 12, 0):
        factor = 1.5 if version >= (0, 20, 0) else 1.25
        if max(sizes) < factor * min(sizes):
            group_size = max(sizes)
    groups: list[KVGroup] = []
    for (kind, window), members in buckets.items():
        for _ in range(_cdiv(len(members), group_size)):
            groups.append(
                KVGroup(kind, window, group_size, page_bytes * group_size, blocks_req(kind, window))
            )
    padded = sum(_cdiv(n, group_size) * group_size for n in sizes) - sum(sizes)
    if padded:
        notes.append(f"{padded} padding layer(s) added to fill KV groups of {group_size} layers")
    return groups, page_bytes * group_size


def _hybrid_for_pool(
    spec: ModelSpec,
    *,
    version: str,
    ver: Version,
    engine: str,
    kv_dtype: str,
    tp: int,
    block_size: int,
    max_model_len: int,
    cuda_capability: tuple[int, int] | None,
    mamba_ssm_cache_dtype: str,
    enable_prefix_caching: bool | None,
    hybrid_manager: bool,
    notes: list[str],
) -> HybridPages:
    """vllm_pool's checks and notes around hybrid_pages(): which versions, prefix caching, the cache mode."""
    first = ".".join(map(str, HYBRID_FIRST_VERSION))
    if engine != "V1":
        raise PlannerError(f"{spec.name}: hybrid Mamba/linear-attention models are modelled for V1 only")
    if not HYBRID_FIRST_VERSION <= ver <= HYBRID_LAST_VERSION:
        raise PlannerError(
            f"{spec.name}: vLLM {version}'s KV pages for hybrid Mamba/linear-attention models are not "
            f"modelled (covered: V1 {first} - 0.26.x; 0.33 aligns the block to the prefill checkpoints and "
            "plans the pool anew); pass --vllm-version 0.26.0 or earlier, or plan without --engine vllm"
        )
    if not hybrid_manager:
        # unify_hybrid_kv_cache_specs can only turn sliding-window layers into full attention; with Mamba
        # layers it raises (v0.11.0:kv_cache_utils.py:1096-1147).
        raise PlannerError(f"{spec.name}: vLLM runs Mamba hybrids only with the hybrid KV-cache manager")
    low, high = HYBRID_PREFIX_CACHING_UNKNOWN
    if enable_prefix_caching is None:
        if low <= ver <= high:
            raise PlannerError(
                f"{spec.name}: vLLM {version}: prefix caching for hybrids is off by default in 0.20 and on "
                "in 0.26; the versions between were not read: say whether it is on (enable_prefix_caching)"
            )
        enable_prefix_caching = ver >= (0, 26, 0)
        why = "the default of this version for hybrids"
    else:
        why = "given"
    # Models with Mamba prefix caching support (SupportsMambaPrefixCaching: Nemotron-H from 0.12; not
    # Qwen3-Next / Qwen3.5) keep the state of every block ("all" from 0.20); the others are switched off
    # (0.12-0.14: MambaModelConfig disables prefix caching) or use "align" (0.20, 0.26).
    mode = "none"
    if enable_prefix_caching and ver < (0, 12, 0):
        why += "; vLLM 0.10-0.11 switch it off for hybrids (models/config.py MambaModelConfig)"
    if enable_prefix_caching and ver >= (0, 12, 0):
        if spec.model_type == "nemotron_h":
            raise PlannerError(
                f"{spec.name}: with prefix caching vLLM keeps Nemotron-H's state per chunk-aligned block "
                "(mamba_cache_mode 'all'), which is not modelled; plan it with prefix caching off "
                "(--no-enable-prefix-caching)"
            )
        if ver >= (0, 20, 0):
            mode = "align"
        else:
            why += "; vLLM switches it off for hybrids without Mamba prefix caching support"
    hybrid = hybrid_pages(
        spec,
        version=ver,
        kv_dtype=kv_dtype,
        tp=tp,
        block_size=block_size,
        max_model_len=max_model_len,
        cuda_capability=cuda_capability,
        mamba_ssm_cache_dtype=mamba_ssm_cache_dtype,
        mamba_cache_mode=mode,
    )
    known = [v for v in HYBRID_READ_VERSIONS if parse_version(v) <= ver]
    nearest = max(known, key=parse_version)
    if nearest != ".".join(map(str, ver)):
        notes.append(f"hybrid page rules of vLLM {nearest} (the nearest read version before {version})")
    state = "one state block" if mode == "none" else "two state blocks (mamba_cache_mode align)"
    notes.append(
        f"hybrid: state page {hybrid.state_bytes:,} B (conv {hybrid.conv_dtype}, SSM state "
        f"{hybrid.temporal_dtype}); attention {hybrid.attention_bytes_per_token:,} B/token/layer; block size "
        f"{hybrid.block_size} tokens (multiple of {hybrid.alignment}); page {hybrid.page_bytes:,} B; prefix "
        f"caching {'on' if mode == 'align' else 'off'} ({why}): {state} per request and group"
    )
    if cuda_capability is None and (0, 12, 0) <= ver < (0, 20, 0):
        notes.append("compute capability not given: the 16-token alignment (not Blackwell's 32) is used")
    if ver >= (0, 20, 0):
        notes.append(
            "vLLM >= 0.20 aligns to the attention backend's smallest kernel block size: 16 assumed "
            "(FlashAttention, FlashInfer); a backend preferring larger blocks raises the block size"
        )
    return hybrid


def vllm_pool(
    spec: ModelSpec,
    *,
    max_model_len: int,
    version: str = DEFAULT_VLLM_VERSION,
    engine: str | None = None,
    total_bytes: int | None = None,
    gpu_memory_utilization: float = 0.9,
    weights_bytes: int | Sequence[int] | None = None,
    weight_format: str | None = None,
    activation_bytes: int | None = None,
    non_torch_bytes: int = 0,
    cudagraph_bytes: int = 0,
    estimate_cudagraphs: bool | None = None,
    kv_pool_bytes: int | None = None,
    block_size: int = 16,
    kv_dtype: str = "auto",
    tp: int = 1,
    pp: int = 1,
    pp_layers: Sequence[int] | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    async_scheduling: bool = False,
    hybrid_manager: bool = True,
    usage_context: str = "openai",
    device_name: str | None = None,
    cuda_capability: tuple[int, int] | None = None,
    sampler_path: str | None = None,
    sm_count: int | None = None,
    mamba_ssm_cache_dtype: str = "auto",
    enable_prefix_caching: bool | None = None,
) -> VLLMPool:
    """Pool bytes, blocks, KV tokens and max concurrency as vLLM `version` computes and logs them.

    weights_bytes: per rank (one int for every rank, or one per pipeline stage); computed from the spec when
    None. kv_pool_bytes: the pool given directly (--kv-cache-memory-bytes), skipping the profile.
    max_num_batched_tokens / max_num_seqs: vLLM's defaults for the version, usage_context ("openai" for
    `vllm serve`, "llm" for the LLM class) and device (total_bytes, device_name, cuda_capability) when None.
    activation_bytes None: profile_activation() predicts it (flagged PREDICTED, every term in the notes).
    Hybrid models (Mamba-2 / Gated DeltaNet layers): V1 0.10.2 - 0.26.x, see hybrid_pages();
    mamba_ssm_cache_dtype is vLLM's --mamba-ssm-cache-dtype ("auto": the per-model default);
    enable_prefix_caching (None: the version's default) matters for hybrids only.
    """
    ver = parse_version(version)
    notes: list[str] = []
    if ver < (0, 6, 4):
        raise PlannerError(
            f"vLLM {version} is older than the oldest version the formulas were read from (0.6.4)"
        )
    if ver > parse_version(READ_VERSIONS[-1]) and (ver[0], ver[1]) != (0, 33):
        notes.append(f"vLLM {version} was not read; the formulas of {READ_VERSIONS[-1]} are applied")
    elif f"{ver[0]}.{ver[1]}.{ver[2]}" not in READ_VERSIONS:
        notes.append(
            f"vLLM {version} was not read itself; the rules of the nearest read version before it apply"
        )
    engine = (engine or default_engine(ver)).upper()
    if engine not in ("V0", "V1"):
        raise PlannerError(f"vLLM engine must be V0 or V1, got {engine!r}")
    if engine == "V0" and ver >= (0, 11, 0):
        raise PlannerError(f"vLLM {version} has no V0 engine (removed after 0.10.x)")
    if engine == "V1" and ver < (0, 7, 0):
        raise PlannerError(f"vLLM {version} has no V1 engine (opt-in from 0.7.0)")
    for name, value in (
        ("max_model_len", max_model_len),
        ("block_size", block_size),
        ("max_num_seqs", 1 if max_num_seqs is None else max_num_seqs),
    ):
        if value < 1:
            raise PlannerError(f"{name} must be at least 1, got {value}")
    for name, value in (
        ("non-torch memory", non_torch_bytes),
        ("CUDA-graph memory", cudagraph_bytes),
        ("activation peak", activation_bytes or 0),
        ("KV pool", kv_pool_bytes or 0),
    ):
        if value < 0:
            raise PlannerError(f"{name} must not be negative, got {value} bytes")
    if kv_pool_bytes is None:
        if total_bytes is None or total_bytes <= 0:
            raise PlannerError("vLLM pool needs the device's total memory (or a pool given directly)")
        if not 0 < gpu_memory_utilization <= 1:
            raise PlannerError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if max_num_batched_tokens is not None and max_num_batched_tokens < 1:
        raise PlannerError(f"max_num_batched_tokens must be at least 1, got {max_num_batched_tokens}")
    if max_num_batched_tokens is None or max_num_seqs is None:
        default_tokens, default_seqs, why = default_scheduler_limits(
            version,
            engine,
            max_model_len=max_model_len,
            usage_context=usage_context,
            total_bytes=total_bytes,
            device_name=device_name,
            cuda_capability=cuda_capability,
            spec=spec,
        )
        *context, tokens_note, seqs_note = why
        notes.extend(context)
        if max_num_batched_tokens is None:
            max_num_batched_tokens = default_tokens
            notes.append(tokens_note)
        else:
            notes.append(f"max_num_batched_tokens {max_num_batched_tokens} (given)")
        if max_num_seqs is None:
            max_num_seqs = default_seqs
            if engine == "V1" and ver >= (0, 11, 0):
                max_num_seqs = min(max_num_seqs, max_num_batched_tokens)  # v0.11.0:arg_utils.py:1678
            notes.append(seqs_note if max_num_seqs == default_seqs else f"max_num_seqs {max_num_seqs}")
        else:
            notes.append(f"max_num_seqs {max_num_seqs} (given)")

    topology: Topology = make_topology(spec, tp, pp, pp_layers)
    if weights_bytes is None:
        wb = weight_bytes(spec, weight_format)
        params = count_params(spec)
        per_stage = [stage_weight_bytes(spec, params, wb, topology, s).total for s in range(topology.pp)]
        notes.append(f"weights computed: {wb.format}, {wb.bits_per_weight:.2f} bits/weight")
    elif isinstance(weights_bytes, int):
        per_stage = [weights_bytes] * topology.pp
    else:
        per_stage = [int(w) for w in weights_bytes]
        if len(per_stage) != topology.pp:
            raise PlannerError(f"{len(per_stage)} weight figures given for {topology.pp} pipeline stages")
    if any(w < 0 for w in per_stage):
        raise PlannerError("weights must not be negative")

    predicted = activation_bytes is None
    profile: ProfileActivation | None = None
    if predicted:
        profile = profile_activation(
            spec,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            version=version,
            engine=engine,
            tp=topology.tp,
            weight_format=weight_format,
            cuda_capability=cuda_capability,
            sampler_path=sampler_path,
            sm_count=sm_count,
        )
        activation_bytes = profile.peak_bytes
        notes.append(
            f"activation peak PREDICTED: {activation_bytes / GiB:.2f} GiB ({profile.phase} phase of the "
            f"profile run, {max_num_batched_tokens} tokens, {max_num_seqs} sequences); give --activation-gib "
            "from your log to reproduce a real one"
        )
        notes.extend(profile.terms)
    assert activation_bytes is not None
    stage_activation = [activation_bytes] * topology.pp
    if profile is not None and topology.pp > 1:
        # Pipeline stages before the last run the forward only: no logits, no sampler
        # (v0.8.5:vllm/worker/model_runner.py:1792 `if not get_pp_group().is_last_rank`; V1
        # v0.8.5:gpu_model_runner.py profile_run `if get_pp_group().is_last_rank`). Every stage but the first
        # receives the previous stage's hidden_states and residual, [tokens, hidden] each in the model dtype
        # (v0.8.5:worker/model_runner.py:1352-1357 make_empty_intermediate_tensors; V1 keeps them as
        # self.intermediate_tensors), which the profile run allocates.
        receive = 2 * max_num_batched_tokens * spec.hidden_size * ACTIVATION_BYTES
        for stage in range(topology.pp):
            last = stage == topology.pp - 1
            base = profile.peak_bytes if last else profile.forward_only_peak_bytes
            stage_activation[stage] = base + (receive if stage > 0 else 0)
        notes.append(
            "pipeline parallel: activation per stage "
            + ", ".join(f"{b / GiB:.2f}" for b in stage_activation)
            + " GiB (the last stage runs logits and the sampler; stages after the first receive "
            f"2 x {max_num_batched_tokens} x {spec.hidden_size} intermediate tensors)"
        )

    # CUDA-graph memory (a.2): never deducted before 0.18; 0.18-0.19 only with
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1; default on from 0.20.
    if estimate_cudagraphs is None:
        estimate_cudagraphs = engine == "V1" and ver >= (0, 20, 0)
    deduct_graphs = engine == "V1" and ver >= (0, 18, 0) and estimate_cudagraphs
    if cudagraph_bytes and not deduct_graphs:
        notes.append(f"vLLM {version} does not deduct CUDA-graph memory from the pool; the figure is ignored")
    if deduct_graphs and not cudagraph_bytes and kv_pool_bytes is None:
        notes.append(
            "this version deducts its CUDA-graph estimate; none given, so 0 is used (pool is an upper bound)"
        )
    graphs = cudagraph_bytes if deduct_graphs else 0

    if kv_pool_bytes is not None and ver < (0, 11, 0):
        notes.append(
            f"vLLM {version} has no --kv-cache-memory-bytes; the pool is taken as given (e.g. from a log)"
        )

    hybrid: HybridPages | None = None
    if any(layer.attention is not None and layer.attention.kind in STATE_KINDS for layer in spec.layers):
        hybrid = _hybrid_for_pool(
            spec,
            version=version,
            ver=ver,
            engine=engine,
            kv_dtype=kv_dtype,
            tp=topology.tp,
            block_size=block_size,
            max_model_len=max_model_len,
            cuda_capability=cuda_capability,
            mamba_ssm_cache_dtype=mamba_ssm_cache_dtype,
            enable_prefix_caching=enable_prefix_caching,
            hybrid_manager=hybrid_manager,
            notes=notes,
        )
        block_size = hybrid.block_size

    # Lookahead tokens for sliding-window blocks per request (a.4).
    if ver >= (0, 26, 0):
        concurrent_batches = pp + 1 if async_scheduling else pp
        lookahead = concurrent_batches * max_num_batched_tokens
    else:
        lookahead = max_num_batched_tokens

    ranks: list[VLLMRank] = []
    stage_groups: list[list[KVGroup]] = []
    for stage in range(topology.pp):
        groups, bytes_per_block = _groups_for_stage(
            spec,
            topology.stage_layers[stage],
            version=ver,
            engine=engine,
            kv_dtype=kv_dtype,
            tp=topology.tp,
            block_size=block_size,
            max_model_len=max_model_len,
            lookahead_tokens=lookahead,
            hybrid_manager=hybrid_manager,
            notes=notes if stage == 0 else [],
            hybrid=hybrid,
        )
        stage_groups.append(groups)
        if stage == 0 and engine == "V0" and (0, 7, 0) <= ver < (0, 8, 0) and groups[0].kind == "mla":
            notes.append(
                "vLLM 0.7.x pads each MLA cache entry to 256 B when VLLM_MLA_CUDA_MEM_ALIGN_KV_CACHE=1 "
                "(576 x 2 B -> 1280 B); that padding is not applied here"
            )
        weights_here = per_stage[stage]
        if kv_pool_bytes is not None:
            requested: float = float("nan")
            available: float = float(kv_pool_bytes)
        else:
            assert total_bytes is not None
            if engine == "V1" and ver >= (0, 14, 0):
                requested = math.ceil(total_bytes * gpu_memory_utilization)  # a.1, V1 >= 0.14
            else:
                requested = total_bytes * gpu_memory_utilization  # float, as vLLM keeps it
            # a.2: every era subtracts weights + activation peak + non-torch memory (the ways of measuring
            # differ, the given figures are what the log calls them), and from 0.20 the CUDA-graph estimate.
            available = requested - (weights_here + stage_activation[stage] + non_torch_bytes) - graphs
        num_blocks = max(0, int(available // bytes_per_block))
        for tp_rank in range(topology.tp):
            ranks.append(
                VLLMRank(
                    rank=stage * topology.tp + tp_rank,
                    pp_stage=stage,
                    requested_bytes=requested,
                    weights_bytes=weights_here,
                    pool_bytes=max(0, math.floor(available)),
                    bytes_per_block=bytes_per_block,
                    num_blocks=num_blocks,
                    activation_bytes=stage_activation[stage],
                )
            )
    limiting = min(ranks, key=lambda r: (r.num_blocks, r.rank))
    num_blocks = limiting.num_blocks
    groups = stage_groups[limiting.pp_stage]
    if topology.world_size > 1 and len({r.num_blocks for r in ranks}) > 1:
        notes.append(f"ranks differ; every rank uses the minimum, {num_blocks} blocks (rank {limiting.rank})")
    if num_blocks == 0:
        notes.append("no memory left for KV blocks: vLLM would refuse to start")

    blocks_per_request = sum(g.blocks_per_request for g in groups)
    if engine == "V0" or ver < (0, 9, 1):
        concurrency = num_blocks * block_size / max_model_len
    else:
        concurrency = num_blocks / blocks_per_request
    if engine == "V1" and ver >= (0, 21, 0):
        tokens = int(concurrency * max_model_len)
    elif engine == "V1" and ver >= (0, 9, 1) and len(groups) > 1:
        # num_blocks // groups * the smallest group block size; a state group's block size is
        # max_model_len (v0.11.0:kv_cache_utils.py:1076-1080, v0.20.0:1689-1697).
        smallest = block_size if hybrid is None else min(block_size, hybrid.state_block_size)
        tokens = num_blocks // len(groups) * smallest
    else:
        tokens = num_blocks * block_size

    text = f"{concurrency:.2f}x"
    log: list[str] = []
    if engine == "V0":
        label = (
            "# GPU blocks" if ver < (0, 7, 0) else ("# CUDA blocks" if ver < (0, 8, 0) else "# cuda blocks")
        )
        log.append(f"{label}: {num_blocks}")
        log.append(f"Maximum concurrency for {max_model_len} tokens per request: {text}")
    else:
        if hybrid is not None:
            log.extend(hybrid.log_lines)
        if kv_pool_bytes is None:
            log.append(f"Available KV cache memory: {limiting.pool_bytes / GiB:.2f} GiB")
        log.append(f"GPU KV cache size: {tokens:,} tokens")
        log.append(f"Maximum concurrency for {max_model_len:,} tokens per request: {text}")
    if concurrency < 1 and num_blocks:
        notes.append(
            f"one request of max_model_len {max_model_len} does not fit the pool: vLLM refuses to start "
            "(lower max_model_len or raise gpu_memory_utilization)"
        )

    return VLLMPool(
        version=version,
        engine=engine,
        total_bytes=total_bytes,
        gpu_memory_utilization=None if kv_pool_bytes is not None else gpu_memory_utilization,
        requested_bytes=None if kv_pool_bytes is not None else math.floor(limiting.requested_bytes),
        weights_bytes=limiting.weights_bytes,
        activation_bytes=limiting.activation_bytes,
        activation_predicted=predicted,
        non_torch_bytes=non_torch_bytes,
        cudagraph_bytes=graphs,
        pool_bytes=limiting.pool_bytes,
        block_size=block_size,
        bytes_per_block=limiting.bytes_per_block,
        num_blocks=num_blocks,
        num_groups=len(groups),
        blocks_per_request=blocks_per_request,
        kv_cache_tokens=tokens,
        max_concurrency=concurrency,
        max_concurrency_text=text,
        max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens,
        groups=tuple(groups),
        ranks=tuple(ranks),
        log_lines=tuple(log),
        notes=tuple(notes),
        max_num_seqs=max_num_seqs,
        activation_profile=profile,
    )


# ----------------------------------------------------------------------------------------------------
# The pool from the model config, the GPU and the engine arguments alone: what vLLM measures at startup,
# PREDICTED. Each term says where it comes from: "given" (a flag), "log" (read from a vLLM log) or PREDICTED.

# The device total as vLLM reads it (torch.cuda.mem_get_info()[1], a little under the marketing size), seen in
# real startup logs. Keys are lower-case device names as torch.cuda.get_device_name() prints them, shortened.
DEVICE_TOTALS: dict[str, tuple[float, str, tuple[int, int], str]] = {
    # key: (total GiB, torch.cuda.get_device_name(), compute capability, where the total was seen)
    "h100-80gb": (79.22, "NVIDIA H100 80GB HBM3", (9, 0),
                  "total_gpu_memory (79.22GiB) in vllm PR #10511 and PR #12126 (H100 80GB)"),
    "a100-80gb": (79.15, "NVIDIA A100-SXM4-80GB", (8, 0),
                  "'Free memory on device (59.32/79.15 GiB)' in ovg-project/kvcached issue #29 (A100 80GB)"),
    "a100-40gb": (39.50, "NVIDIA A100-SXM4-40GB", (8, 0),
                  "total_gpu_memory (39.50GiB) in vllm issue #12330 (A100 40GB)"),
    "rtx3090": (23.58, "NVIDIA GeForce RTX 3090", (8, 6),
                "total_gpu_memory (23.58GiB) in vllm PR #14447 (24 GB cards, RTX 3090 class)"),
    "rtx5090": (31.37, "NVIDIA GeForce RTX 5090", (12, 0),
                "total_gpu_memory (31.37GiB) in vllm issue #14452 (RTX 5090)"),
    "t4": (14.56, "Tesla T4", (7, 5),
           "total_gpu_memory (14.56GiB) in Colab T4 logs (tests/planner/test_vllm.py)"),
    "v100-32gb": (31.74, "Tesla V100-SXM2-32GB", (7, 0),
                  "total_gpu_memory (31.74GiB) in a V100 blog log (tests/planner/test_vllm.py)"),
    "gb10": (119.7, "NVIDIA GB10", (12, 1),
             "GB10 (DGX Spark) unified memory: mem_get_info's total is the whole machine's MemTotal, about "
             "119.6-121.7 GiB by driver/kernel (shared/fixtures top_gb10: 122502.8 MiB total)"),
}  # fmt: skip

# Non-torch memory as vLLM counts it, by era. WHAT is counted is read from the release sdists (file:line
# below); HOW MUCH it is cannot be derived from vLLM's source: it is the CUDA driver's context (its size grows
# with the SM count and with every kernel module the process loads), NCCL's and the custom all-reduce's
# buffers, and the caching allocator's fragmentation. Those sizes are EMPIRICAL constants, each taken from
# the logged values named in its source string.
# - V0 <= 0.6.4: (total - free) - torch allocated after the profile, with no baseline: the CUDA context,
#   cuBLAS's handle and NCCL count (v0.6.4.post1:vllm/worker/worker.py:177-248; init_gpu_memory only checks).
# - V0 0.6.5 - 0.6.6: memory_profiling(): used after - baseline - weights - torch ALLOCATED growth, where the
#   baseline is total - free right after torch.cuda.set_device() (v0.6.5:vllm/worker/worker.py:138-143,
#   v0.6.5:vllm/utils.py:1736, v0.6.6.post1:vllm/utils.py:1819): the context is before the baseline, but
#   what torch reserves and does not use after empty_cache() (fragmentation) counts as non-torch.
# - V0 0.7.0 - 0.10 and V1 0.9.1 - 0.26: the growth of (cuda used - torch RESERVED) after the baseline
#   (v0.7.0:vllm/utils.py:1952-1954 MemorySnapshot, PR #11809; v0.8.5:vllm/utils.py:2145-2147): module
#   loads after the baseline and NCCL / custom all-reduce buffers (TP/PP), no fragmentation.
# - V1 0.7.0 - 0.9.0: max(0, cuda used - torch allocated) after the profile, no baseline: the context, the
#   fragmentation and other processes on the device (v0.7.1:vllm/v1/worker/gpu_worker.py:180-187,
#   v0.8.5:vllm/v1/worker/gpu_worker.py:165-212).
# - V1 >= 0.27: free before the instance - free after the profile (v0.33.0:vllm/utils/mem_utils.py:230-321);
#   the weights are in it, the non-torch part is again the growth after the baseline.
# The growth constants: logged one-GPU values 0.04 (8 GiB card, vllm #12095), 0.10 (A100 40GB, vllm #12330),
# 0.16 (H100, vllm PR #12126) GiB; several GPUs 0.20 (TP=4 RTX 3090, vllm PR #14447) and 0.33 (PP=2 RTX 5090,
# vllm #14452, which is also a test log) GiB. The context constant: 0.35 GiB, logged with the context inside
# on an RTX 3090 (vllm #10517, 0.6.4); an A6000 logged 0.44 (vllm #10360, 0.6.4.post1, also a test log). No
# H100 value with the context inside is held; a GPU with more SMs has a larger context.
# - V1 0.18 - 0.26: the same growth, but profile_cudagraph_memory() (capturing and freeing graphs) now runs
#   inside the memory_profiling() window, after which the growth is measured (v0.18.0:vllm/v1/worker/
#   gpu_worker.py:384-399, v0.19.0:gpu_worker.py:366-381, v0.26.0:gpu_worker.py:484-506; not in 0.17.0),
#   unless enforce_eager. The sizes of this era are EMPIRICAL from llm-d-planner's vLLM 0.19.0 H100 80GB
#   sweep (the logs under tests/data/vllm_logs/llmdplanner_* and the rest of that sweep): one GPU 0.24 -
#   0.27 GiB (25 dense logs; granite 3.x logged 0.46), TP > 1 2.06 - 2.21 GiB per rank (TP=2 and TP=4;
#   likely the NCCL communicator's memory set up on first use, after the baseline, which vLLM takes after
#   init_distributed_environment, v0.19.0:gpu_worker.py:259-282), pipeline stages without TP 0.07 GiB
#   (PP=2, PP=4). Only H100s were logged: other GPUs, interconnects and NCCL versions may differ.
NON_TORCH_GROWTH_ONE_GPU = round(0.10 * GiB)
NON_TORCH_GROWTH_DISTRIBUTED = round(0.25 * GiB)
NON_TORCH_GRAPHS_ONE_GPU = round(0.25 * GiB)
NON_TORCH_GRAPHS_TP = round(2.1 * GiB)
NON_TORCH_GRAPHS_PP_ONLY = round(0.07 * GiB)
# - Under TP the sizes stay per era. Tested and refuted (vllm #21348 held out): that the 0.19 sweep's 1.85 GiB
#   TP-minus-one-GPU difference is the NCCL communicator the logits gather creates on first use (torch.
#   distributed's device group, v0.10.0:vllm/model_executor/layers/logits_processor.py:89-101,
#   vllm/distributed/device_communicators/base_device_communicator.py:129, distributed/parallel_state.py:224),
#   which every era with a baseline would count: a 0.12.0 H100 80GB HBM3 TP=2 log (tests/data/vllm_logs/
#   videocutting_*) leaves at most 0.64 GiB per rank for non-torch, so that difference belongs to 0.18+'s
#   graph captures inside the window. In 0.9.1 - 0.10.x the baseline is taken before
#   init_worker_distributed_environment (v0.10.0:vllm/v1/worker/gpu_worker.py:163 snapshot, :181 init;
#   v0.11.0:gpu_worker.py:169 init, :182 snapshot), so PyNccl's communicator and the custom all-reduce
#   buffers count there: their size is not held.
NON_TORCH_SOURCE_GRAPHS = (
    "counted by memory_profiling(): growth of (cuda used - torch reserved) after the baseline taken after "
    "init_distributed_environment, with the CUDA-graph estimate's captures inside the window "
    "(v0.18.0:vllm/v1/worker/gpu_worker.py:384-399; v0.19.0:gpu_worker.py:259-282,366-381); size EMPIRICAL "
    "from llm-d-planner's vLLM 0.19.0 H100 80GB logs: 0.24-0.27 GiB on one GPU, 2.06-2.21 GiB per rank at "
    "TP=2/4, 0.07 GiB per stage at PP=2/4 (H100 only; other GPUs/interconnects not held)"
)
NON_TORCH_WITH_CONTEXT = round(0.35 * GiB)  # vllm issue #10517 (0.6.4, RTX 3090): non_torch_memory=0.35GiB
NON_TORCH_SOURCE_GROWTH = (
    "counted by memory_profiling(): growth of (cuda used - torch reserved) after the baseline taken at "
    "init_device, the CUDA context before it (v0.7.0:vllm/utils.py:1952-1954; "
    "v0.8.5:vllm/utils.py:2145-2147); size EMPIRICAL (not derivable from the source): logged 0.04-0.16 GiB "
    "on one GPU (vllm #12095, #12330, PR #12126), 0.20-0.33 GiB under TP/PP (vllm PR #14447, #14452)"
)
NON_TORCH_SOURCE_GROWTH_ALLOCATED = (
    "counted by memory_profiling(): used - baseline - weights - torch ALLOCATED growth, so allocator "
    "fragmentation is non-torch (v0.6.5:vllm/utils.py:1736, v0.6.6.post1:vllm/utils.py:1819; baseline after "
    "set_device, v0.6.5:vllm/worker/worker.py:138-143); size EMPIRICAL: the growth constant (the "
    "fragmentation is not derivable)"
)
NON_TORCH_SOURCE_CONTEXT = (
    "counted: cuda used - torch allocated after the profile, no baseline, so the CUDA context, loaded kernel "
    "modules and fragmentation count (v0.6.4.post1:vllm/worker/worker.py:177-248; "
    "v0.7.1:vllm/v1/worker/gpu_worker.py:180-187; v0.8.5:vllm/v1/worker/gpu_worker.py:165-212); size "
    "EMPIRICAL (a driver figure): 0.35 GiB logged on an RTX 3090 (vllm #10517; an A6000 logged 0.44, vllm "
    "#10360); larger on GPUs with more SMs"
)
# CUDA graphs, deducted before the pool by V1 from 0.20 (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default
# "1", v0.20.0:vllm/envs.py:1724; v0.26.0:vllm/v1/worker/gpu_worker.py:508-544). The estimate captures two
# graphs per mode and extrapolates the second one's cost to every capture size (vllm issue #45178). What one
# graph costs is the CUDA driver's (graph nodes, the private pool's segments), not derivable from vLLM's
# source: EMPIRICAL 24 MiB per graph, from the logged estimates 0.17 GiB for 7 PIECEWISE graphs (club-3090
# #127) and 0.36 GiB for 16 (gpustack/runner #251), and vllm issue #50780's measured FULL graph.
CUDAGRAPH_BYTES_PER_GRAPH = 24 * 2**20
CUDAGRAPH_SOURCE = (
    "deducted from 0.20 by default (v0.20.0:vllm/envs.py:1724, "
    "v0.26.0:vllm/v1/worker/gpu_worker.py:508-544); size EMPIRICAL: 24 MiB per captured graph (logged "
    "0.17 GiB / 7 graphs, club-3090 #127; 0.36 GiB / 16, gpustack/runner #251; vllm #50780)"
)


def cudagraph_capture_sizes(version: str, max_num_seqs: int) -> tuple[int, ...]:
    """vLLM's default cudagraph_capture_sizes: 1, 2, 4, then multiples of 8 up to 256, then of 16 up to 512,
    kept up to max_cudagraph_capture_size = min(2 * max_num_seqs, 512) (v0.11.0:vllm/config/compilation.py
    `_set_cudagraph_sizes`; 0.6 - 0.10: V0 _BATCH_SIZES_TO_CAPTURE [1, 2, 4] + range(8, 256+1, 8) up to
    max_num_seqs)."""
    ver = parse_version(version)
    sizes = [1, 2, 4, *range(8, 257, 8)]
    if ver >= (0, 11, 0):
        sizes += list(range(272, 513, 16))
        limit = min(2 * max_num_seqs, 512)
    else:
        limit = max_num_seqs
    kept = [s for s in sizes if s <= limit]
    return tuple(kept) or (1,)


@dataclass(frozen=True, slots=True)
class Term:
    """One term of the pool arithmetic: its bytes, how it is known and where it comes from."""

    name: str
    bytes: int
    how: str  # "given" (a flag) | "log" (read from a vLLM log) | "PREDICTED" | "default" (vLLM's default)
    source: str


@dataclass(frozen=True, slots=True)
class Device:
    key: str
    total_bytes: int  # as torch.cuda.mem_get_info() reports it
    name: str  # torch.cuda.get_device_name()
    capability: tuple[int, int]
    source: str
    sm_count: int | None = None  # torch.cuda.get_device_properties().multi_processor_count


# Streaming multiprocessors per GPU (NVIDIA's published figures for these parts; what
# torch.cuda.get_device_properties().multi_processor_count returns): V1 0.17+'s Triton sampler sizes its
# kept buffer by it (num_compute_units, v0.19.0:vllm/v1/sample/ops/topk_topp_triton.py:1010).
DEVICE_SM_COUNTS: dict[str, int] = {
    "h100-80gb": 132, "a100-80gb": 108, "a100-40gb": 108, "rtx3090": 82, "rtx5090": 170, "t4": 40,
    "v100-32gb": 80, "gb10": 48,
}  # fmt: skip


def device_total(gpu: str) -> Device:
    """A GPU's total as vLLM reads it, with the name and capability vLLM keys its defaults on."""
    key = gpu.strip().lower().replace("nvidia ", "").replace(" ", "-")
    aliases = {"h100": "h100-80gb", "h100-80gb-hbm3": "h100-80gb", "a100": "a100-80gb",
               "a100-sxm4-80gb": "a100-80gb", "a100-sxm4-40gb": "a100-40gb", "geforce-rtx-3090": "rtx3090",
               "geforce-rtx-5090": "rtx5090", "tesla-t4": "t4", "spark": "gb10", "dgx-spark": "gb10",
               "tesla-v100-sxm2-32gb": "v100-32gb"}  # fmt: skip
    key = aliases.get(key, key)
    if key not in DEVICE_TOTALS:
        raise PlannerError(
            f"no recorded mem_get_info total for GPU {gpu!r}; known: {', '.join(DEVICE_TOTALS)}; "
            "or give the total as --total-gib"
        )
    gib_value, name, capability, source = DEVICE_TOTALS[key]
    return Device(key, round(gib_value * GiB), name, capability, source, DEVICE_SM_COUNTS.get(key))


def non_torch_era(version: str, engine: str, enforce_eager: bool = False) -> str:
    """How a vLLM version counts non-torch memory (the era table above): "context" (the CUDA context
    included, no baseline), "allocated" (growth after the baseline plus fragmentation), "graphs" (growth with
    the graph estimate's captures inside the window) or "growth" (only what grew after the baseline)."""
    ver = parse_version(version)
    if (engine == "V0" and ver <= (0, 6, 4)) or (engine == "V1" and ver < (0, 9, 1)):
        return "context"
    if engine == "V1" and (0, 18, 0) <= ver < (0, 27, 0) and not enforce_eager:
        return "graphs"
    if engine == "V0" and ver < (0, 7, 0):
        return "allocated"
    return "growth"


def predicted_non_torch(
    version: str, engine: str, world_size: int, *, tp: int | None = None, enforce_eager: bool = False
) -> Term:
    """vLLM's non-torch memory for a version/engine, PREDICTED (see the era table above). `tp` (the tensor
    parallel size, default world_size) separates TP from pipeline stages where the era's sizes differ."""
    era = non_torch_era(version, engine, enforce_eager)
    if era == "context":
        return Term("non-torch", NON_TORCH_WITH_CONTEXT, "PREDICTED", NON_TORCH_SOURCE_CONTEXT)
    tp = world_size if tp is None else tp
    if era == "graphs":
        if tp > 1:
            size = NON_TORCH_GRAPHS_TP
        elif world_size > 1:
            size = NON_TORCH_GRAPHS_PP_ONLY
        else:
            size = NON_TORCH_GRAPHS_ONE_GPU
        return Term("non-torch", size, "PREDICTED", NON_TORCH_SOURCE_GRAPHS)
    size = NON_TORCH_GROWTH_ONE_GPU if world_size == 1 else NON_TORCH_GROWTH_DISTRIBUTED
    source = NON_TORCH_SOURCE_GROWTH_ALLOCATED if era == "allocated" else NON_TORCH_SOURCE_GROWTH
    return Term("non-torch", size, "PREDICTED", source)


def predicted_cudagraphs(
    version: str, engine: str, max_num_seqs: int, *, enforce_eager: bool = False, estimate: bool | None = None
) -> Term:
    """The CUDA-graph estimate vLLM deducts before the pool (0 where it does not)."""
    ver = parse_version(version)
    if estimate is None:
        estimate = engine == "V1" and ver >= (0, 20, 0)
    if enforce_eager or not (engine == "V1" and ver >= (0, 18, 0) and estimate):
        why = (
            "enforce_eager: no graphs"
            if enforce_eager
            else f"vLLM {version} does not deduct graphs before the pool"
        )
        return Term("CUDA graphs", 0, "PREDICTED", why)
    graphs = len(cudagraph_capture_sizes(version, max_num_seqs))
    return Term(
        "CUDA graphs",
        graphs * CUDAGRAPH_BYTES_PER_GRAPH,
        "PREDICTED",
        f"{graphs} capture sizes; {CUDAGRAPH_SOURCE}",
    )
