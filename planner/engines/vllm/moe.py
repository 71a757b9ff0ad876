"""vLLM's mixture-of-experts layers as it holds and runs them: expert weights padded for the MoE kernel of the
GPU, and the fused-MoE buffers of the profile run. Stdlib only.

Read in the vLLM release sdists (vllm-X.tar.gz from PyPI, unpacked; file:line of that version):
* MXFP4 experts (gpt-oss): v0.19.0:vllm/model_executor/layers/fused_moe/oracle/mxfp4.py:170-399 (backend by
  priority, then the sizes each backend pads to) and quantization/mxfp4.py:121-229 (the parameters are created
  with the padded sizes); v0.24.0 keeps the same padding (oracle/mxfp4.py:634-660). vLLM has no MXFP4 before
  0.10.1 (v0.10.0 has no quantization/mxfp4.py).
* Fused-MoE buffers: see fused_moe_forward_bytes().
* Beside the weights, for every model: the rotary embedding's cos/sin cache (rotary_cache_bytes()).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.engines.vllm.version import Version
from planner.errors import PlannerError
from planner.limits import MAX_HIDDEN_SIZE, MAX_POSITIONS, finite
from planner.spec import ModelSpec

MXFP4_FIRST_VERSION: Version = (0, 10, 1)
MXFP4_BLOCK = 32  # elements per e8m0 scale (quantization/mxfp4.py create_weights: mxfp4_block = 32)
BF16_BYTES = 2


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


@dataclass(frozen=True, slots=True)
class ExpertLayout:
    """How one rank holds the routed experts of one MoE layer."""

    backend: str
    hidden: int  # hidden size the expert tensors are created with (padded)
    intermediate: int  # expert width per TP rank (padded)
    hidden_config: int
    intermediate_config: int  # per TP rank, as the config gives it
    bytes_per_layer: int  # the layer's expert tensors on one rank, padded
    config_bytes_per_layer: int  # the same tensors with the config's sizes
    why: str  # why this backend
    source: str

    @property
    def extra_bytes_per_layer(self) -> int:
        return self.bytes_per_layer - self.config_bytes_per_layer


TRITON_KERNELS_VENDORED: Version = (0, 14, 0)  # first read version that ships vllm/third_party/triton_kernels


def mxfp4_backend(version: Version, capability: tuple[int, int] | None) -> tuple[str, str]:
    """The MXFP4 MoE backend vLLM picks with no environment variable set.

    v0.19.0 oracle/mxfp4.py:170-372: the first of FLASHINFER_TRTLLM_MXFP4_BF16, CK, TRITON,
    FLASHINFER_CUTLASS_MXFP4_BF16, TRITON_UNFUSED, MARLIN whose kernel class supports the device; FlashInfer
    is in vLLM's CUDA requirements (requirements/cuda.txt flashinfer-python==0.6.6) and triton_kernels'
    kernels support 9.0 <= sm < 11.0 (gpt_oss_triton_kernels_moe.py:555-564). v0.10.1.1 / v0.11.0
    quantization/mxfp4.py _should_use_marlin: Marlin on CUDA below sm 10 unless sm >= 9 and the optional
    triton_kernels package is installed; vLLM ships it from 0.14 (v0.14.1:setup.py, vllm/third_party) and
    not in 0.10.1.1 / 0.11.0, so a pip install of those runs Marlin on an H100 (vllm #23278 logs it)."""
    if capability is None:
        raise PlannerError("the MXFP4 expert layout depends on the GPU: give --gpu")
    if capability[0] == 10:
        return "FLASHINFER_TRTLLM_MXFP4_BF16", "sm 10.x with FlashInfer: the TRT-LLM MXFP4 kernel"
    if capability[0] == 9 and version >= TRITON_KERNELS_VENDORED:
        return "TRITON", (
            "sm 9.x: triton_kernels' matmul_ogs, vendored from vLLM 0.14 "
            "(gpt_oss_triton_kernels_moe.py:555-564 supports 9.0 <= sm < 11.0)"
        )
    if capability[0] == 9:
        return "MARLIN", (
            "sm 9.x before vLLM 0.14: triton_kernels is optional and not installed with vLLM, so Marlin "
            "(v0.11.0 quantization/mxfp4.py _should_use_marlin)"
        )
    return "MARLIN", (
        f"sm {capability[0]}.{capability[1]}: no FlashInfer/Triton MXFP4 kernel supports it, so Marlin "
        "(Triton only for 9.0 <= sm < 11.0)"
    )


def _mxfp4_expert_bytes(
    hidden: int, width: int, bias: bool, *, scale_copies: int = 1, bias_bytes: int = BF16_BYTES
) -> int:
    """One expert's w13 (gate+up, [2*width, hidden]) and w2 ([hidden, width]) as uint8 e2m1 pairs + one uint8
    e8m0 scale per 32 (quantization/mxfp4.py create_weights), + biases. Marlin repacks the same number
    of 4-bit values (gptq_marlin_repack) and converts the scales back to e8m0 (marlin_utils_fp4.py
    mxfp4_marlin_process_scales), so the sizes hold after process_weights_after_loading. Triton keeps the
    loaded scale parameters and a swizzled copy (scale_copies=2) and fp32 biases (bias_bytes=4)."""
    values = 2 * width * (hidden // 2) + hidden * (width // 2)
    scales = 2 * width * (hidden // MXFP4_BLOCK) + hidden * (width // MXFP4_BLOCK)
    biases = (2 * width + hidden) * bias_bytes if bias else 0
    return values + scale_copies * scales + biases


def mxfp4_expert_layout(
    spec: ModelSpec, version: Version, capability: tuple[int, int] | None, tp: int = 1
) -> ExpertLayout:
    """The padded MXFP4 experts of one MoE layer on one rank (v0.19.0 oracle/mxfp4.py:376-399:
    Marlin: width to a multiple of 128, hidden of 256; TRT-LLM: both of 256; FlashInfer CUTLASS: both of
    128; otherwise (Triton) width of 64)."""
    if version < MXFP4_FIRST_VERSION:
        shown = ".".join(map(str, version))
        raise PlannerError(f"vLLM {shown} has no MXFP4 support (from 0.10.1)")
    moe = spec.shapes.moe if spec.shapes is not None else None
    if not spec.num_experts or moe is None:
        raise PlannerError(f"{spec.name}: not a mixture-of-experts model")
    width = moe.expert_intermediate_size
    if width % tp:
        raise PlannerError(f"{spec.name}: expert width {width} is not divisible by tp={tp}")
    width_rank = width // tp
    hidden = spec.hidden_size
    backend, why = mxfp4_backend(version, capability)
    if backend == "MARLIN":
        padded_width, padded_hidden = _round_up(width_rank, 128), _round_up(hidden, 256)
    elif backend == "FLASHINFER_TRTLLM_MXFP4_BF16":
        padded_width, padded_hidden = _round_up(width_rank, 256), _round_up(hidden, 256)
    else:
        padded_width, padded_hidden = _round_up(width_rank, 64), hidden
    experts = spec.num_experts
    bias = moe.expert_bias
    if backend == "TRITON":
        # v0.19.0 oracle/mxfp4.py:721-754 (v0.14.1 quantization/mxfp4.py:746-785 the same): the biases are
        # cast to fp32, _swizzle_mxfp4 returns new weight and scale tensors; the loaded weights are deleted,
        # the loaded scale parameters are not (the swizzled scales live in the PrecisionConfig). The swizzled
        # layouts are taken as the loaded sizes (their own padding is not derived).
        padded = experts * _mxfp4_expert_bytes(
            padded_hidden, padded_width, bias, scale_copies=2, bias_bytes=4
        )
    else:
        padded = experts * _mxfp4_expert_bytes(padded_hidden, padded_width, bias)
    plain = experts * _mxfp4_expert_bytes(hidden, width_rank, bias)
    return ExpertLayout(
        backend=backend,
        hidden=padded_hidden,
        intermediate=padded_width,
        hidden_config=hidden,
        intermediate_config=width_rank,
        bytes_per_layer=padded,
        config_bytes_per_layer=plain,
        why=why,
        source="v0.19.0:vllm/model_executor/layers/fused_moe/oracle/mxfp4.py:376-399 (padding by backend), "
        "721-754 (Triton: fp32 biases, scales kept twice), quantization/mxfp4.py:138-229 (parameters "
        "created padded); v0.10.1.1 quantization/mxfp4.py:150-186 the same padding",
    )


def moe_layer_count(spec: ModelSpec, layers: range | list[int] | tuple[int, ...] | None = None) -> int:
    """MoE layers among `layers` (all when None)."""
    indices = range(len(spec.layers)) if layers is None else layers
    return sum(1 for i in indices if spec.layers[i].mlp_kind == "moe")


# ----------------------------------------------------------------------------------------------------
# The rotary embedding's cos/sin cache: a buffer every RotaryEmbedding registers when the model is built
# (v0.24.0:vllm/model_executor/layers/rotary_embedding/base.py:58-63 `register_buffer("cos_sin_cache",
# cache.to(dtype))`; v0.11.0:rotary_embedding/base.py:45-49 the same), so it is inside "Model loading took".
# One per rank and pipeline stage: get_rope() returns the cached module for the same arguments
# (v0.24.0:rotary_embedding/__init__.py get_rope `_ROPE_DICT`), so all layers share it. Shape
# [positions, rotary_dim] (cos and sin halves), in the dtype get_rope is given (the model dtype by default:
# torch.get_default_dtype() at build time).
ROTARY_CACHE_SOURCE = (
    "v0.24.0:vllm/model_executor/layers/rotary_embedding/base.py:58-63 (register_buffer cos_sin_cache, "
    "[positions, rotary_dim]), __init__.py get_rope (one shared module; rotary_dim = head_dim x "
    "partial_rotary_factor), yarn_scaling_rope.py:75-79 (original_max x factor positions), "
    "linear_scaling_rope.py:79-91 (max x factor), mrope.py:236-246 (4 x max positions); "
    "v0.11.0:rotary_embedding/base.py:45-49 the same"
)
# vLLM model files read that call get_rope(max_position=config.max_position_embeddings, ...) once per layer
# with the config's rope parameters (v0.24.0:vllm/model_executor/models/<file>): the value is get_rope's
# dtype when the file passes one (gpt_oss.py:86-90 dtype=torch.float32), else None (the model dtype).
ROTARY_CACHE_MODELS: dict[str, int | None] = {
    "llama": None, "mistral": None, "phi3": None, "granite": None,  # llama.py:241-247, granite.py:160-164
    "qwen2": None, "qwen3": None, "qwen2_moe": None, "qwen3_moe": None,  # qwen2.py, qwen3.py, *_moe.py
    "gemma": None, "gemma2": None,  # gemma.py:174-179, gemma2.py:150-155
    "qwen3_next": None, "qwen3_5_text": None, "qwen3_5_moe_text": None,  # qwen3_next.py:264-269, qwen3_5.py
    "qwen3_vl_text": None, "qwen3_vl_moe_text": None,  # qwen3_vl.py:131, qwen3_vl_moe.py:51: qwen3(_moe)
    "gpt_oss": 4,  # gpt_oss.py:86-90: dtype=torch.float32
}  # fmt: skip


MAX_ROPE_FACTOR = 4096.0  # a rope scaling factor (real ones: 4 to 64; YaRN on 1M-token models: 128)


def _rope_parameters(spec: ModelSpec) -> dict:
    """The config's rope_parameters (transformers 5) or rope_scaling (earlier): absent, null or an object. A
    number, list or string there is no rope configuration transformers or vLLM would read: refused by name."""
    for key in ("rope_parameters", "rope_scaling"):
        value = spec.config.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise PlannerError(
                f"{spec.name}: config field {key!r} must be an object (or null), found {repr(value)[:80]}"
            )
        if value:
            return value
    return {}


def _rope_number(
    spec: ModelSpec, params: dict, key: str, lo: float, hi: float, *, integer: bool = False
) -> float | int | None:
    """One number of the rope parameters within [lo, hi] (None when absent or null), else a PlannerError."""
    value = params.get(key)
    if value is None:
        return None
    valid = finite(value, lo, hi) and (not integer or float(value).is_integer())
    if not valid:
        kind = "an integer" if integer else "a number"
        wanted = f"{kind} in [{lo:g}, {hi:g}]"
        raise PlannerError(f"{spec.name}: rope parameter {key!r} must be {wanted}, found {repr(value)[:80]}")
    return int(value) if integer else value


def rotary_cache_bytes(spec: ModelSpec, activation_bytes: int = BF16_BYTES) -> tuple[int, str]:
    """Bytes of the rotary cos/sin cache one rank holds per pipeline stage, and how they were found (0 and
    the reason where the model or its rope type is not one read)."""
    if spec.model_type not in ROTARY_CACHE_MODELS:
        return 0, f"rotary cos/sin cache of model_type {spec.model_type!r}: not derived (vLLM model not read)"
    config = spec.config
    params = _rope_parameters(spec)
    rope_type = str(params.get("rope_type") or params.get("type") or "default")
    max_position = spec.max_position_embeddings
    if not max_position:
        return 0, "rotary cos/sin cache: the config has no max_position_embeddings"
    factor = _rope_number(spec, params, "factor", 0.0, MAX_ROPE_FACTOR)
    original = _rope_number(spec, params, "original_max_position_embeddings", 1, MAX_POSITIONS, integer=True)
    if rope_type in ("default", "llama3"):
        positions = max_position  # llama3_rope.py: the base cache over max_position
    elif rope_type == "linear" and factor:
        positions = int(max_position * factor)
    elif rope_type == "yarn" and factor and original:
        positions = int(original * factor)
    else:
        return 0, f"rotary cos/sin cache of rope type {rope_type!r}: not derived"
    if "mrope_section" in params:
        positions *= 4  # MRotaryEmbedding: cache_max_position_num = max_position_embeddings * 4
    shapes = spec.shapes
    head_dim = shapes.head_dim if shapes is not None else spec.hidden_size // spec.num_attention_heads
    partial = _rope_number(spec, params, "partial_rotary_factor", 0.0, 1.0) or _rope_number(
        spec, config, "partial_rotary_factor", 0.0, 1.0
    )
    rope_dim = _rope_number(spec, params, "rope_dim", 1, MAX_HIDDEN_SIZE, integer=True)
    rotary_dim = int(rope_dim or int(head_dim * float(partial or 1.0)))
    dtype_bytes = ROTARY_CACHE_MODELS[spec.model_type] or activation_bytes
    size = positions * rotary_dim * dtype_bytes
    return size, (
        f"+ rotary cos/sin cache {positions:,} positions x {rotary_dim} x {dtype_bytes} B = {size:,} B per "
        f"stage ({rope_type}{', mrope' if 'mrope_section' in params else ''}); {ROTARY_CACHE_SOURCE}"
    )


def vllm_weight_extras(
    spec: ModelSpec, fmt: str, version: Version, capability: tuple[int, int] | None, tp: int, pp: int
) -> tuple[list[int], list[str]]:
    """Bytes vLLM holds per pipeline stage (one rank) beyond the checkpoint's tensors, PREDICTED, and one
    line per rule applied (with its source): the MXFP4 experts' padding and the rotary cos/sin cache."""
    from planner.topology import make_topology  # noqa: PLC0415

    topology = make_topology(spec, tp, pp, None)
    extras = [0] * topology.pp
    notes: list[str] = []
    if fmt == "mxfp4" and spec.num_experts and version >= MXFP4_FIRST_VERSION and capability is not None:
        layout = mxfp4_expert_layout(spec, version, capability, tp)
        for stage in range(topology.pp):
            extras[stage] += layout.extra_bytes_per_layer * moe_layer_count(
                spec, topology.stage_layers[stage]
            )
        if layout.extra_bytes_per_layer:
            notes.append(
                f"+ MXFP4 experts as vLLM's {layout.backend} kernel holds them ({layout.why}): hidden "
                f"{layout.hidden_config} -> {layout.hidden}, expert width per rank "
                f"{layout.intermediate_config} -> {layout.intermediate}, "
                f"{layout.extra_bytes_per_layer:,} B per MoE layer; {layout.source}"
            )
        else:
            notes.append(f"MXFP4 experts: {layout.backend} kernel, held as loaded; {layout.source}")
    rotary, rotary_note = rotary_cache_bytes(spec)
    extras = [extra + rotary for extra in extras]
    notes.append(rotary_note)
    return extras, notes


# ----------------------------------------------------------------------------------------------------
# The fused-MoE layer's buffers during the profile run's forward (Triton fused_experts: unquantized bf16/fp16
# experts and fp8 (per-tensor or 128x128 block) experts; v0.10.0:vllm/model_executor/layers/fused_moe/
# fused_moe.py:1339-1526 fused_experts_impl, the same buffers in v0.19.0 fused_moe.py). The 4-bit expert
# kernels (Marlin, FlashInfer/CUTLASS NVFP4/MXFP4, triton_kernels' matmul_ogs) allocate differently: not
# derived.
FUSED_MOE_CHUNK = 32768  # v0.10.0:vllm/envs.py:560-561 VLLM_FUSED_MOE_CHUNK_SIZE default
TRITON_MOE_FORMATS = ("bf16", "fp16", "fp8", "fp8_block")
FP8_GROUP = 128  # per_token_group_quant_fp8 group for 128x128 block-quantized experts


@dataclass(frozen=True, slots=True)
class FusedMoEPeak:
    tokens: int  # rows of the chunk (min(tokens, chunk))
    peak_bytes: int  # alive at the second expert GEMM, the layer's worst moment
    terms: tuple[str, ...]


def fused_moe_forward_bytes(
    spec: ModelSpec, tokens: int, *, tp: int = 1, fmt: str = "bf16", activation_bytes: int = 2
) -> FusedMoEPeak | None:
    """The PyTorch bytes alive in a MoE layer of the dummy forward at its worst moment (one rank), or None
    when the experts do not run through the Triton fused_experts (4-bit formats, dense models).

    Alive during the second grouped GEMM (fused_experts_impl, inplace):
    * the decoder layer's three hidden-width tensors (the loop's input, the residual, the normed MoE input the
      result is written into): 3 x tokens x h;
    * the router logits [tokens, E] and select_experts' topk weights (fp32) and ids (int32) [tokens, k];
    * cache13 [M*k*max(N, K)] (N = 2 x expert width per rank, K = h), reused for cache1 and cache3;
    * cache2 [M*k, N/2];
    * fp8 experts: the quantized input [M, h] (1 B) + its scales, and the quantized cache2 (1 B) + scales
      (one fp32 per 128 values for block quantization, one per row else);
    * moe_align_block_size's sorted_token_ids (int32, M*k + E*(BLOCK_M - 1); BLOCK_M <= 128 assumed)."""
    moe = spec.shapes.moe if spec.shapes is not None else None
    if not spec.num_experts or moe is None or fmt not in TRITON_MOE_FORMATS:
        return None
    if tokens < 1:
        raise PlannerError("the dummy forward needs at least one token")
    a = activation_bytes
    h = spec.hidden_size
    k = spec.experts_per_token
    experts = spec.num_experts
    width = -(-moe.expert_intermediate_size // tp)
    n = 2 * width
    m = min(tokens, FUSED_MOE_CHUNK)
    rows = m * k
    layer = 3 * tokens * h * a
    router = tokens * experts * a + tokens * k * (4 + 4)
    cache13 = rows * max(n, h) * a
    cache2 = rows * (n // 2) * a
    quantized = 0
    if fmt in ("fp8", "fp8_block"):
        groups_in = -(-h // FP8_GROUP) if fmt == "fp8_block" else 1
        groups_mid = -(-(n // 2) // FP8_GROUP) if fmt == "fp8_block" else 1
        quantized = m * h + m * groups_in * 4 + rows * (n // 2) + rows * groups_mid * 4
    sorted_ids = (rows + experts * 127) * 4
    peak = layer + router + cache13 + cache2 + quantized + sorted_ids
    terms = (
        f"fused MoE ({fmt} experts, Triton fused_experts; v0.10.0:vllm/model_executor/layers/fused_moe/"
        f"fused_moe.py:1339-1526): {tokens} tokens x top-{k}, chunk {m}: layer tensors 3 x h {layer:,} + "
        f"router logits/top-k {router:,} + cache13 {m}x{k}x{max(n, h)} {cache13:,} + cache2 {cache2:,}"
        + (f" + fp8 inputs and scales {quantized:,}" if quantized else "")
        + f" + sorted ids {sorted_ids:,} = {peak:,} B",
    )
    return FusedMoEPeak(m, peak, terms)
