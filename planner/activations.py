"""The activation peak: the temporaries of one forward pass, alive one layer at a time.

Per token, one layer holds about (4h + 3I) values (normed input, q/k/v and attention output of width ~h, and
the MLP's gate, up and product of width I), in the activation dtype: the dtype the model computes in, 2 B for
a BF16/FP16 plan, 4 B for an FP32 one (a config that names no dtype is planned in fp32, as transformers loads
it), a quantized checkpoint's unquantized dtype otherwise (activation_dtype_bytes). A prefill chunk of N
tokens holds N times that; a decode step one row per user. On top of that:
* logits: N x V x bytes when every position's scores are kept (a bare `model(input_ids)`), one row per
  sequence when only the last position is (what `generate` and serving engines do);
* eager attention: the N x N score matrix of every head in the activation dtype, heads x N^2 x bytes, plus
  the fp32 softmax copy (heads x N^2 x 4 B); fused kernels (SDPA, FlashAttention) never build it.
Under tensor parallelism the MLP width and the heads split across ranks; the hidden-size terms do not.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import PlannerError
from planner.spec import ModelSpec
from planner.units import dtype_bytes

ACTIVATION_BYTES = 2  # BF16 / FP16 temporaries (what engines such as vLLM run fp32 checkpoints in, too)
SOFTMAX_COPY_BYTES = 4  # eager attention upcasts the scores to fp32 for the softmax
_FORMAT_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}  # unquantized weight formats
LOGITS_MODES = ("last", "all")
ATTENTION_MODES = ("fused", "eager")


def activation_dtype(spec: ModelSpec, weight_format: str) -> str:
    """The dtype a plan's temporaries are in: an unquantized format's own (a bf16 plan of an fp32 config
    computes in bf16), else the config's dtype, which a quantized checkpoint keeps its other tensors in."""
    return _FORMAT_DTYPES.get(weight_format, spec.torch_dtype)


def activation_dtype_bytes(spec: ModelSpec, weight_format: str) -> int:
    return dtype_bytes(activation_dtype(spec, weight_format))


@dataclass(frozen=True, slots=True)
class ActivationPeak:
    per_token_layer_bytes: int  # (4h + 3I/tp) x dtype_bytes
    prefill_bytes: int  # one prefill chunk's layer temporaries
    decode_bytes: int  # one decode step of `users` sequences
    logits_bytes: int  # the logits tensor at the peak (0 on a pipeline stage without the head)
    attention_bytes: int  # eager score matrices (0 when fused)
    peak_bytes: int
    phase: str  # "prefill" | "decode": which one sets the peak
    dtype_bytes: int = ACTIVATION_BYTES  # bytes per activation value (2: bf16/fp16, 4: fp32)


def per_token_layer_bytes(spec: ModelSpec, tp: int = 1, dtype_bytes: int = ACTIVATION_BYTES) -> int:
    """(4h + 3I) x bytes for one token in one layer; tensor parallelism splits I (column-parallel MLP)."""
    mlp_width = -(-spec.intermediate_size // tp)
    return (4 * spec.hidden_size + 3 * mlp_width) * dtype_bytes


def logits_bytes(spec: ModelSpec, positions: int, dtype_bytes: int = ACTIVATION_BYTES) -> int:
    """positions x V x bytes; vLLM and HF gather the full vocabulary on the rank that samples."""
    return positions * spec.vocab_size * dtype_bytes


def eager_attention_bytes(
    spec: ModelSpec, tokens: int, tp: int = 1, dtype_bytes: int = ACTIVATION_BYTES
) -> int:
    """Score matrix of every local head (in the activation dtype) plus its fp32 softmax copy, for one layer
    (in fp32 the softmax still writes a new tensor: 4 + 4 B)."""
    heads = -(-spec.num_attention_heads // tp)
    return heads * tokens * tokens * (dtype_bytes + SOFTMAX_COPY_BYTES)


def activation_peak(
    spec: ModelSpec,
    *,
    prefill_chunk: int,
    users: int,
    logits: str = "last",
    attention: str = "fused",
    tp: int = 1,
    has_head: bool = True,
    dtype_bytes: int = ACTIVATION_BYTES,
) -> ActivationPeak:
    """The larger of a prefill chunk and a decode step, each with its logits (and eager scores in prefill),
    `dtype_bytes` per value (activation_dtype_bytes: the plan's activation dtype)."""
    if prefill_chunk < 0 or users < 0:
        raise PlannerError(f"prefill chunk and users must not be negative (got {prefill_chunk}, {users})")
    if logits not in LOGITS_MODES:
        raise PlannerError(f"logits must be one of {', '.join(LOGITS_MODES)}, got {logits!r}")
    if attention not in ATTENTION_MODES:
        raise PlannerError(f"attention must be one of {', '.join(ATTENTION_MODES)}, got {attention!r}")
    row = per_token_layer_bytes(spec, tp, dtype_bytes)
    prefill = prefill_chunk * row
    decode = users * row
    # A prefill chunk is one sequence: "last" keeps one row of logits, "all" every position. A decode step
    # produces one row per user either way.
    kept = prefill_chunk if logits == "all" else min(1, prefill_chunk)
    prefill_logits = logits_bytes(spec, kept, dtype_bytes)
    decode_logits = logits_bytes(spec, users, dtype_bytes)
    if not has_head:
        prefill_logits = decode_logits = 0
    scores = eager_attention_bytes(spec, prefill_chunk, tp, dtype_bytes) if attention == "eager" else 0
    prefill_peak = prefill + prefill_logits + scores
    decode_peak = decode + decode_logits
    if prefill_peak >= decode_peak:
        return ActivationPeak(
            row, prefill, decode, prefill_logits, scores, prefill_peak, "prefill", dtype_bytes
        )
    return ActivationPeak(row, prefill, decode, decode_logits, 0, decode_peak, "decode", dtype_bytes)
