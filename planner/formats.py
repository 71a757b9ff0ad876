"""Weight bytes by storage format, including scales, zero points and the tensors kept in high precision.

Every format is applied to the tensor list of planner/params.py (model_tensors), tensor by tensor, so block
and group scales are counted for the real matrix shapes (rounded up where a row does not fill its last
block). Linear-layer formats (fp8, int8, awq, gptq, mxfp4, nvfp4) convert the weight matrices of attention,
MLP, expert, Mamba and linear-attention projections; embeddings, the LM head, routers, norms, biases,
convolutions and SSM parameters stay in bf16, as the published checkpoints of those formats keep them.
GGUF formats (q8_0, q4_k_m) follow llama.cpp: token embeddings and the output head are quantized too,
one-dimensional tensors, routers, position embeddings and convolutions are F32.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from planner.errors import PlannerError
from planner.params import LINEAR_ROLES, ModelTensors, ParamCount, TensorGroup, count_params, model_tensors
from planner.spec import ModelSpec, QuantSpec

# ggml tensor types: id -> (name, elements per block, bytes per block). From ggml.h / gguf-py's
# GGML_QUANT_SIZES (gguf 0.19); block byte counts are the sizes of ggml-common.h's block structs.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36),
    41: ("Q1_0", 128, 18),
}
GGML_BY_NAME: dict[str, tuple[int, int]] = {name: (block, size) for name, block, size in GGML_TYPES.values()}

HIGH_PRECISION_BYTES = 2  # bf16: what quantized checkpoints keep their unquantized tensors in


@dataclass(frozen=True, slots=True)
class WeightFormat:
    name: str
    description: str
    source: str  # where the numbers come from (one line)


@dataclass(frozen=True, slots=True)
class WeightBytes:
    format: str
    total: int
    embed: int
    head: int
    final_norm: int
    per_layer: tuple[int, ...]
    bits_per_weight: float  # total * 8 / params
    source: str  # where the format's numbers come from (one line)


_FORMATS: tuple[WeightFormat, ...] = (
    WeightFormat("bf16", "bfloat16, 2 bytes per parameter", "IEEE-style bfloat16: 16 bits per value"),
    WeightFormat("fp16", "float16, 2 bytes per parameter", "IEEE 754 binary16: 16 bits per value"),
    WeightFormat("fp32", "float32, 4 bytes per parameter", "IEEE 754 binary32: 32 bits per value"),
    WeightFormat(
        "fp8",
        "e4m3 weights, one fp32 weight scale and one fp32 input scale per Linear; rest bf16",
        "FP8 W8A8 per-tensor checkpoints (llm-compressor/compressed-tensors, NVIDIA modelopt): "
        "weight_scale + input_scale per layer, embeddings/lm_head/norms/routers kept bf16",
    ),
    WeightFormat(
        "fp8_block",
        "e4m3 weights with one fp32 scale per 128x128 block; rest bf16",
        "DeepSeek-V3 / Qwen3-FP8 checkpoints: quantization_config.weight_block_size [128, 128], "
        "weight_scale_inv [ceil(out/128), ceil(in/128)] fp32, embeddings/lm_head/norms/routers kept bf16",
    ),
    WeightFormat(
        "int8",
        "int8 weights, one bf16 scale per output channel; rest bf16",
        "W8A8 int8 channel-wise checkpoints (llm-compressor/compressed-tensors): weight_scale [out, 1]",
    ),
    WeightFormat(
        "q8_0",
        "GGUF Q8_0: 34 bytes per 32 weights (fp16 scale + 32 int8); 1-D tensors and routers F32",
        "llama.cpp ggml-common.h block_q8_0 (8.5 bits/weight); token_embd and output quantized as well",
    ),
    WeightFormat(
        "q4_k_m",
        "GGUF Q4_K_M mix: Q4_K (4.5 bits) with Q6_K (6.5625 bits) for output, half the attn_v/ffn_down",
        "llama.cpp llama_tensor_get_type for LLAMA_FTYPE_MOSTLY_Q4_K_M: output Q6_K; attn_v and ffn_down "
        "Q6_K in the use_more_bits layers (first/last eighth, every third between), other attn_v Q5_K "
        "for 80-layer Llamas; attn_qkv Q5_K; 8-expert models attn_k/attn_v Q8_0, attn_output Q5_K; "
        "tied token_embd as output; rest Q4_K; rows not a multiple of 256 fall back to Q5_0/Q5_1/Q8_0; "
        "1-D tensors, routers, position embeddings and convolutions F32",
    ),
    WeightFormat(
        "awq",
        "AWQ 4-bit, group 128: packed int4 + fp16 scale + 4-bit zero point per group; rest bf16",
        "AutoAWQ GEMM layout: qweight int32 [in, out/8], qzeros int32 [in/g, out/8], scales fp16 "
        "[in/g, out]; embeddings/lm_head/norms/routers kept in the activation dtype",
    ),
    WeightFormat(
        "gptq",
        "GPTQ 4-bit, group 128: packed int4 + fp16 scale + 4-bit zero per group + int32 g_idx; rest bf16",
        "AutoGPTQ/GPTQModel layout: qweight int32 [in/8, out], qzeros int32 [in/g, out/8], scales fp16 "
        "[in/g, out], g_idx int32 [in]; embeddings/lm_head/norms/routers kept in the activation dtype",
    ),
    WeightFormat(
        "mxfp4",
        "OCP MXFP4: 32-element blocks of e2m1 with one e8m0 scale (4.25 bits); modules_to_not_convert bf16",
        "OCP Microscaling spec v1.0 (MXFP4) as in gpt-oss checkpoints: *_blocks uint8 + *_scales uint8; "
        "embeddings/lm_head/routers (and quantization_config.modules_to_not_convert) kept bf16",
    ),
    WeightFormat(
        "bnb_nf4",
        "bitsandbytes 4-bit NF4 as vLLM loads it: packed 4-bit + one fp32 absmax per 64 weights (4.5 bits); "
        "rest bf16",
        "vllm/model_executor/model_loader/bitsandbytes_loader.py: the weight as packed uint8 "
        "[rows*cols/2], the "
        "double-quantized absmax dequantized to fp32 at load (_dequantize_dq, 'at the cost of increased "
        "memory'); bnb_4bit_blocksize (64); embeddings/lm_head/norms and llm_int8_skip_modules kept 16-bit",
    ),
    WeightFormat(
        "bnb_fp4",
        "bitsandbytes 4-bit FP4: the same layout as bnb_nf4 (only the 16 code values differ)",
        "bitsandbytes Params4bit quant_type 'fp4'; sizes as bnb_nf4 (vLLM bitsandbytes_loader.py)",
    ),
    WeightFormat(
        "nvfp4",
        "NVFP4: 16-element blocks of e2m1 with an fp8 e4m3 scale (4.5 bits) + fp32 per-tensor scales",
        "NVIDIA modelopt NVFP4 checkpoints: weight uint8 packed, weight_scale fp8 [out, in/16], "
        "weight_scale_2 and input_scale fp32 per layer; embeddings/lm_head/norms/routers kept bf16",
    ),
)


def weight_formats() -> list[str]:
    """Names weight_bytes accepts."""
    return [f.name for f in _FORMATS]


def format_info(fmt: str) -> WeightFormat:
    key = str(fmt).strip().lower()
    for f in _FORMATS:
        if f.name == key:
            return f
    raise PlannerError(f"unknown weight format {fmt!r}; known: {', '.join(weight_formats())}")


def weight_bytes(
    spec: ModelSpec,
    fmt: str | None = None,
    *,
    tensors: ModelTensors | None = None,
    params: ParamCount | None = None,
) -> WeightBytes:
    """Bytes of the decoder's weights in a format (None: the format the config implies). `tensors` and
    `params`: model_tensors(spec) and count_params(spec) when the caller has them already."""
    info = format_info(spec.default_format if fmt is None else fmt)
    tensors = tensors if tensors is not None else model_tensors(spec)
    quant = spec.quantization if spec.quantization and spec.quantization.method == info.name else None
    size, depends = _sizer(spec, info.name, quant, tensors)

    embed = sum(size(g, -1) for g in tensors.embed)
    head = sum(size(g, -1) for g in tensors.head)
    final_norm = sum(size(g, -1) for g in tensors.final_norm)
    # each distinct layer is sized once, or once per what else its bytes depend on (a GGUF layer's place
    # among the layers, a quantization config's skip patterns on its full names)
    sized: dict[tuple, int] = {}
    per_layer_bytes = []
    for i, shape in enumerate(tensors.layer_shape):
        key = (shape, depends(i) if depends is not None else None)
        if key not in sized:
            sized[key] = sum(size(g, i) for g in tensors.layer(i))
        per_layer_bytes.append(sized[key])
    per_layer = tuple(per_layer_bytes)
    total = embed + head + final_norm + sum(per_layer)
    params = (params if params is not None else count_params(spec, tensors)).total
    return WeightBytes(
        format=info.name,
        total=total,
        embed=embed,
        head=head,
        final_norm=final_norm,
        per_layer=per_layer,
        bits_per_weight=total * 8 / params,
        source=info.source,
    )


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def module_matches(module: str, patterns: tuple[str, ...]) -> bool:
    """Whether a module (or one of its parents) is named by a modules_to_not_convert entry. Entries are
    glob patterns ("model.layers.*.self_attn"), "re:" regexes (compressed-tensors) or plain names matched
    as dotted parts ("lm_head")."""
    parts = module.split(".")
    prefixes = [".".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        if pattern.startswith("re:"):  # compressed-tensors "ignore" entries: a regex on the module name
            if re.match(pattern[3:], module):
                return True
        elif any(ch in pattern for ch in "*?["):
            if any(fnmatch.fnmatchcase(prefix, pattern) for prefix in prefixes):
                return True
        elif f".{pattern}." in f".{module}.":
            return True
    return False


Sizer = Callable[[TensorGroup, int], int]


def _matrix_bytes(fmt: str, quant: QuantSpec | None) -> Callable[[int, int], int]:
    """bytes(rows, cols) of one linear layer's weight matrix as `fmt` stores it, with its scales, zero points
    and index maps (the checkpoint's quantization_config gives block and group sizes where it has them)."""
    if fmt == "fp8":

        def matrix(rows: int, cols: int) -> int:
            return rows * cols + 4 + 4  # e4m3 weights + fp32 weight_scale + fp32 input_scale

    elif fmt == "fp8_block":
        block_rows, block_cols = quant.block_size if quant and quant.block_size else (128, 128)

        def matrix(rows: int, cols: int) -> int:
            return rows * cols + 4 * _ceil_div(rows, block_rows) * _ceil_div(cols, block_cols)

    elif fmt == "int8":

        def matrix(rows: int, cols: int) -> int:
            return rows * cols + 2 * rows

    elif fmt in ("awq", "gptq"):
        group = quant.group_size if quant and quant.group_size else 128
        zeros = quant.zero_point if quant else True

        def matrix(rows: int, cols: int) -> int:
            groups = _ceil_div(cols, group)
            packed = 4 * _ceil_div(rows * cols, 8)  # eight 4-bit values per int32
            scales = 2 * groups * rows  # fp16
            qzeros = 4 * groups * _ceil_div(rows, 8) if zeros else 0  # 4-bit zero points packed in int32
            g_idx = 4 * cols if fmt == "gptq" else 0  # input-channel -> group map
            return packed + scales + qzeros + g_idx

    elif fmt == "mxfp4":

        def matrix(rows: int, cols: int) -> int:
            return rows * _ceil_div(cols, 2) + rows * _ceil_div(cols, 32)  # e2m1 pairs + one e8m0 per 32

    elif fmt in ("bnb_nf4", "bnb_fp4"):
        block = quant.group_size if quant and quant.group_size else 64

        def matrix(rows: int, cols: int) -> int:
            n = rows * cols
            return _ceil_div(n, 2) + 4 * _ceil_div(n, block)  # packed pairs + fp32 absmax per block

    elif fmt == "nvfp4":

        def matrix(rows: int, cols: int) -> int:
            # e2m1 pairs + one e4m3 scale per 16 + fp32 weight_scale_2 + fp32 input_scale
            return rows * _ceil_div(cols, 2) + rows * _ceil_div(cols, 16) + 4 + 4

    else:  # pragma: no cover - format_info has already rejected unknown names
        raise PlannerError(f"weight format {fmt!r} has no size rule")
    return matrix


def _sizer(
    spec: ModelSpec, fmt: str, quant: QuantSpec | None, tensors: ModelTensors
) -> tuple[Sizer, Callable[[int], Hashable] | None]:
    """(size, depends): size(tensor group, layer index or -1) -> bytes for this format; depends(layer
    index) -> what else than the layer's shape its bytes depend on (None: nothing)."""
    if fmt in ("bf16", "fp16"):
        return (lambda g, _i: g.numel * (4 if g.buffer else 2)), None
    if fmt == "fp32":
        return (lambda g, _i: g.numel * 4), None
    if fmt in ("q8_0", "q4_k_m"):
        return _gguf_sizer(spec, fmt, tensors)

    skip = quant.modules_to_not_convert if quant else ()

    def skipped(i: int) -> tuple[bool, ...]:  # which of layer i's modules its skip patterns name
        return tuple(module_matches(g.module, skip) for g in tensors.layer(i))

    def high_precision(g: TensorGroup) -> int:
        return g.numel * (4 if g.buffer else HIGH_PRECISION_BYTES)  # buffers are fp32 in the checkpoints

    def converted(g: TensorGroup) -> bool:
        return g.role in LINEAR_ROLES and not module_matches(g.module, skip)

    matrix = _matrix_bytes(fmt, quant)

    def size(g: TensorGroup, _layer: int) -> int:
        if converted(g):
            return g.count * matrix(g.rows, g.cols)
        return high_precision(g)

    return size, (skipped if skip else None)


# ----------------------------------------------------------------------------------------------------
# GGUF (llama.cpp)


def _use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits: the first and last eighth of the layers, and every third one between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


# K-quant types need rows (ne[0] = input features) that are a multiple of 256; llama.cpp then falls back.
_K_FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0", "Q8_0": "Q8_0"}


def _ggml_bytes(type_name: str, rows: int, cols: int) -> int:
    """Bytes of a rows x cols matrix (cols = elements per row) stored as a ggml type, with llama.cpp's
    fallbacks when cols does not fill whole blocks."""
    block, size = GGML_BY_NAME[type_name]
    if cols % block:
        type_name = _K_FALLBACK.get(type_name, "F16")
        block, size = GGML_BY_NAME[type_name]
        if cols % block:
            type_name = "F16"
            block, size = GGML_BY_NAME[type_name]
    return rows * (cols // block) * size


_GGUF_QUANTIZED = LINEAR_ROLES | {"embed", "head"}
_DOWN_ROLES = frozenset({"ffn_down", "expert_down", "shared_down"})


def _gguf_sizer(spec: ModelSpec, fmt: str, tensors: ModelTensors) -> tuple[Sizer, Callable[[int], Hashable]]:
    has_v = tensors.per_layer(lambda groups: any(g.role == "attn_v" for g in groups))
    has_down = tensors.per_layer(lambda groups: any(g.role in _DOWN_ROLES for g in groups))
    # a layer's place among those with attn_v (ffn_down): llama.cpp gives more bits by that place
    v_place = {i: k for k, i in enumerate(i for i, yes in enumerate(has_v) if yes)}
    down_place = {i: k for k, i in enumerate(i for i, yes in enumerate(has_down) if yes)}
    n_v, n_down = len(v_place), len(down_place)
    eight_experts = spec.num_experts == 8
    # llama.cpp's LLM_TYPE_70B (an 80-layer Llama) gets attn_v at least Q5_K.
    llama_70b = spec.model_type == "llama" and spec.num_layers == 80

    def q4_k_m_type(g: TensorGroup, layer: int) -> str:
        role = g.role
        # With tied embeddings there is no output tensor and token_embd gets the output's type.
        if role == "head" or (role == "embed" and spec.tie_word_embeddings):
            return "Q6_K"
        if role == "attn_v":
            if eight_experts:
                return "Q8_0"
            if _use_more_bits(v_place[layer], n_v):
                return "Q6_K"
            return "Q5_K" if llama_70b else "Q4_K"
        if role == "attn_k" and eight_experts:
            return "Q8_0"
        if role == "attn_o" and eight_experts:
            return "Q5_K"
        if role == "attn_qkv":
            return "Q5_K"
        if role in _DOWN_ROLES:
            return "Q6_K" if _use_more_bits(down_place[layer], n_down) else "Q4_K"
        return "Q4_K"

    def size(g: TensorGroup, layer: int) -> int:
        if g.role not in _GGUF_QUANTIZED:
            return g.numel * 4  # F32
        type_name = "Q8_0" if fmt == "q8_0" else q4_k_m_type(g, layer)
        return g.count * _ggml_bytes(type_name, g.rows, g.cols)

    def depends(i: int) -> Hashable:  # q4_k_m: whether the layer's attn_v and ffn_down get more bits
        v, down = v_place.get(i), down_place.get(i)
        return (
            v is not None and _use_more_bits(v, n_v),
            down is not None and _use_more_bits(down, n_down),
        )

    return size, depends
