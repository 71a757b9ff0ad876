"""KV cache and fixed per-sequence state, as a sum over layers.

* full attention: K and V of every token: kv_heads * (k_head_dim + v_head_dim) elements per token;
* sliding window: the same, but a layer stops growing at W tokens;
* MLA (DeepSeek): one compressed latent of kv_lora_rank + qk_rope_head_dim elements per token, the same on
  every tensor-parallel rank (it is not split by heads);
* linear attention (Gated DeltaNet) and Mamba: a fixed state per sequence, whatever its length: the recurrent
  state in float32 (as transformers keeps it) plus a short convolution window in the model's dtype.

The KV dtype is independent of the weight dtype: "auto" means the model's dtype (torch_dtype), as in vLLM.
fp8 KV (e4m3 / e5m2) is 1 byte per element; vLLM adds one k_scale and one v_scale per attention layer
(float32 scalars held with the layer's weights), so fp8 adds nothing per token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.errors import PlannerError
from planner.spec import LayerSpec, ModelSpec
from planner.units import canonical_dtype, dtype_bytes

# vLLM's --kv-cache-dtype spellings (and torch names) -> bytes per element. "auto" is resolved per model.
_KV_DTYPES = {
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "float16": 2,
    "half": 2,
    "fp32": 4,
    "float32": 4,
    "float": 4,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}

GROWING_KINDS = frozenset({"full", "sliding", "mla"})  # caches that grow with the sequence
STATE_KINDS = frozenset({"linear", "mamba"})  # fixed per-sequence state


def kv_dtype_names() -> list[str]:
    """The KV cache dtypes accepted by kv_dtype_bytes (besides "auto")."""
    return ["auto", *sorted(_KV_DTYPES)]


def kv_dtype_bytes(kv_dtype: str, spec: ModelSpec) -> float:
    """Bytes per cached element: "auto" -> the model's dtype; fp8 -> 1 (its per-layer scales add nothing
    per token)."""
    return float(_element_bytes(kv_dtype, spec))


def _element_bytes(kv_dtype: str, spec: ModelSpec) -> int:
    key = str(kv_dtype).strip().lower()
    if key == "auto":
        return dtype_bytes(spec.torch_dtype)
    if key not in _KV_DTYPES:
        raise PlannerError(f"unknown KV cache dtype {kv_dtype!r}; known: {', '.join(kv_dtype_names())}")
    return _KV_DTYPES[key]


def kv_heads_per_rank(total_kv_heads: int, tp: int) -> int:
    """KV heads each tensor-parallel rank stores, by vLLM's rule: split them when tp <= heads (tp must divide
    them), otherwise replicate so that every rank holds one (heads must divide tp). SGLang's attention layers
    assert the same (python/sglang/srt/models/llama.py LlamaAttention, copied from vLLM's), so the errors
    name both engines: `plan --engine sglang` reaches them too."""
    if tp < 1:
        raise PlannerError(f"tensor parallel size must be >= 1, got {tp}")
    if total_kv_heads < 1:
        raise PlannerError(f"number of KV heads must be >= 1, got {total_kv_heads}")
    if tp <= total_kv_heads:
        if total_kv_heads % tp:
            raise PlannerError(
                f"{total_kv_heads} KV heads cannot be split over tp={tp} ranks: "
                "vLLM and SGLang both require num_key_value_heads to be divisible by the tensor parallel size"
            )
        return total_kv_heads // tp
    if tp % total_kv_heads:
        raise PlannerError(
            f"tp={tp} is more than the {total_kv_heads} KV heads and not a multiple of them: vLLM and "
            "SGLang both require the tensor parallel size to be divisible by num_key_value_heads when they "
            "replicate them"
        )
    return 1


def _check_tp(spec: ModelSpec, layer: LayerSpec, tp: int) -> None:
    attention = layer.attention
    if tp < 1:
        raise PlannerError(f"tensor parallel size must be >= 1, got {tp}")
    if attention is None or tp == 1:
        return
    if attention.num_q_heads and attention.num_q_heads % tp:
        raise PlannerError(
            f"{spec.name}: {attention.num_q_heads} attention heads are not divisible by tp={tp} "
            "(vLLM and SGLang both require num_attention_heads % tensor_parallel_size == 0)"
        )
    if attention.kind in STATE_KINDS and attention.state_heads % tp:
        raise PlannerError(
            f"{spec.name}: layer {layer.index}: the {attention.state_heads} {attention.kind} heads are not "
            f"divisible by tp={tp}"
        )


def layer_kv_bytes_per_token(layer: LayerSpec, kv_dtype: str, spec: ModelSpec, tp: int = 1) -> int:
    """Bytes one more token adds to this layer's cache on one rank while the layer still grows (0 for state
    layers and MLP-only blocks)."""
    _check_tp(spec, layer, tp)
    attention = layer.attention
    if attention is None or attention.kind not in GROWING_KINDS:
        return 0
    element = _element_bytes(kv_dtype, spec)
    if attention.kind == "mla":
        # The latent is shared by all heads, so every rank keeps all of it.
        return attention.num_kv_heads * (attention.k_head_dim + attention.v_head_dim) * element
    heads = kv_heads_per_rank(attention.num_kv_heads, tp)
    return heads * (attention.k_head_dim + attention.v_head_dim) * element


def layer_state_bytes(layer: LayerSpec, spec: ModelSpec, tp: int = 1) -> int:
    """Fixed per-sequence state of a linear-attention / Mamba layer on one rank (0 for other layers).

    Tensor parallelism splits the state by heads; the convolution window is split the same way (rounded up
    where Mamba's groups do not divide evenly and vLLM replicates them)."""
    _check_tp(spec, layer, tp)
    attention = layer.attention
    if attention is None or attention.kind not in STATE_KINDS:
        return 0
    state = attention.state_elements // tp * dtype_bytes(attention.state_dtype)
    conv_dtype = attention.conv_state_dtype or spec.torch_dtype
    conv = -(-attention.conv_state_elements // tp) * dtype_bytes(canonical_dtype(conv_dtype))
    return state + conv


def layer_kv_bytes(layer: LayerSpec, tokens: int, kv_dtype: str, spec: ModelSpec, tp: int = 1) -> int:
    """Cache bytes of one layer on one rank for a sequence of `tokens` tokens: sliding layers stop at W
    tokens, state layers hold a fixed amount once the sequence exists."""
    if tokens < 0:
        raise PlannerError(f"token count must be >= 0, got {tokens}")
    attention = layer.attention
    if attention is None or tokens == 0:
        _check_tp(spec, layer, tp)
        return 0
    if attention.kind in STATE_KINDS:
        return layer_state_bytes(layer, spec, tp)
    stored = tokens
    if attention.kind == "sliding":
        if attention.window is None:
            raise PlannerError(f"{spec.name}: sliding layer {layer.index} has no window")
        stored = min(tokens, attention.window)
    return stored * layer_kv_bytes_per_token(layer, kv_dtype, spec, tp)


def kv_bytes_per_token(spec: ModelSpec, kv_dtype: str = "auto", tp: int = 1) -> int:
    """Bytes per token on one rank while every attention layer still grows (below the smallest window)."""
    return sequence_kv(spec, kv_dtype, tp).bytes_per_token


def kv_bytes_per_token_beyond_window(spec: ModelSpec, kv_dtype: str = "auto", tp: int = 1) -> int:
    """Bytes per token on one rank once sliding-window layers have stopped growing."""
    return sum(b for window, b in sequence_kv(spec, kv_dtype, tp).per_token if window is None)


def state_bytes_per_sequence(spec: ModelSpec, tp: int = 1) -> int:
    """Fixed state bytes per sequence on one rank (linear attention / Mamba layers)."""
    return sequence_kv(spec, "auto", tp).state


def kv_bytes_for_sequence(
    spec: ModelSpec,
    tokens: int,
    kv_dtype: str = "auto",
    tp: int = 1,
    layers: Sequence[int] | None = None,
) -> int:
    """Cache bytes on one rank for one sequence of `tokens` tokens, summed over the layers (all of them, or
    the indices in `layers`, e.g. one pipeline stage)."""
    return sequence_kv(spec, kv_dtype, tp, layers).bytes(tokens)


@dataclass(frozen=True, slots=True)
class SequenceKV:
    """One sequence's cache on one rank as a function of its length, the layers summed once: the growing
    layers' bytes per token by the window they stop at (None: never), and the state layers' fixed bytes.
    bytes(tokens) equals the sum of layer_kv_bytes over the same layers."""

    per_token: tuple[tuple[int | None, int], ...]  # (window, bytes per token of the layers with it)
    state: int

    def bytes(self, tokens: int) -> int:
        if tokens < 0:
            raise PlannerError(f"token count must be >= 0, got {tokens}")
        if tokens == 0:
            return 0
        grown = sum((tokens if w is None else min(tokens, w)) * b for w, b in self.per_token)
        return grown + self.state

    @property
    def bytes_per_token(self) -> int:
        """While every layer still grows (below the smallest window)."""
        return sum(b for _, b in self.per_token)


def sequence_kv(
    spec: ModelSpec, kv_dtype: str = "auto", tp: int = 1, layers: Sequence[int] | None = None
) -> SequenceKV:
    """SequenceKV of the layers (all, or the indices in `layers`); each distinct layer worked out once."""
    if layers is None:
        chosen: Sequence[LayerSpec] = spec.layers
    else:
        count = len(spec.layers)
        bad = [i for i in layers if not isinstance(i, int) or not 0 <= i < count]
        if bad:
            raise PlannerError(f"{spec.name}: layer indices {bad} are outside 0..{count - 1}")
        chosen = tuple(spec.layers[i] for i in layers)
    per_window: dict[int | None, int] = {}
    state = 0
    # id of the layer's AttentionSpec -> (window, per token, state): load_spec shares one per kind of layer
    known: dict[int, tuple[int | None, int, int]] = {}
    for layer in chosen:
        attention = layer.attention
        key = id(attention)
        if key not in known:
            _check_tp(spec, layer, tp)  # raised for the first layer of each kind, as a walk would
            if attention is None:
                known[key] = (None, 0, 0)
            elif attention.kind in STATE_KINDS:
                known[key] = (None, 0, layer_state_bytes(layer, spec, tp))
            else:
                if attention.kind == "sliding" and attention.window is None:
                    raise PlannerError(f"{spec.name}: sliding layer {layer.index} has no window")
                window = attention.window if attention.kind == "sliding" else None
                known[key] = (window, layer_kv_bytes_per_token(layer, kv_dtype, spec, tp), 0)
        window, per_token, fixed = known[key]
        if per_token:
            per_window[window] = per_window.get(window, 0) + per_token
        state += fixed
    return SequenceKV(tuple(per_window.items()), state)
