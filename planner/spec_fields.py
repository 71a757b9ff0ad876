"""Reading a decoder config's fields: transformers' per-architecture defaults (_Fields, config_int, from
planner/data/transformers_defaults.json), the multimodal wrapper unwrapped to its text_config (_unwrap), the
fields every family reads alike (sizes, KV heads, head_dim, weight dtype, tied embeddings, MTP layers) and
_finish, which assembles the ModelSpec.

planner/spec.py's spec_from_config calls these and then one reader per architecture family from
planner/spec_families.py; quantization_config is read in planner/spec_quant.py, finding the config in
planner/spec_source.py, and the dataclasses are in planner/spec_types.py.
"""

from __future__ import annotations

import functools
import json
import pathlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from planner import limits
from planner.errors import PlannerError
from planner.spec_types import ArchShapes, LayerSpec, ModelSpec, QuantSpec
from planner.units import canonical_dtype

# ----------------------------------------------------------------------------------------------------
# transformers' defaults


DATA_DIR = pathlib.Path(__file__).resolve().parent / "data"


@functools.cache
def _transformers_defaults() -> Mapping[str, Any]:
    with open(DATA_DIR / "transformers_defaults.json", encoding="utf-8") as fh:
        return json.load(fh)


def supported_model_types() -> list[str]:
    """Decoder model_types this planner can count (plus wrappers that hold one under text_config)."""
    return sorted(_transformers_defaults()["model_types"])


class _Fields:
    """Reads config fields, falling back to transformers' defaults for the model_type (noting each)."""

    def __init__(self, raw: Mapping[str, Any], model_type: str, name: str) -> None:
        data = _transformers_defaults()
        entry = data["model_types"][model_type]
        self.raw = raw
        self.name = name
        self.defaults: Mapping[str, Any] = entry["defaults"]
        # attribute_map: the class's alias -> canonical name (Mixtral: num_experts -> num_local_experts)
        self.aliases: Mapping[str, str] = entry["attribute_map"]
        self.origin = f"transformers {data['transformers_version']} {entry['class']}"
        self.assumptions: list[str] = []

    def has(self, key: str) -> bool:
        return self._raw_key(key) is not None

    def _raw_key(self, key: str) -> str | None:
        if key in self.raw:
            return key
        for alias, target in self.aliases.items():
            if target == key and alias in self.raw:
                return alias
            if alias == key and target in self.raw:
                return target
        return None

    def get(self, key: str, fallback: Any = None) -> Any:
        raw_key = self._raw_key(key)
        if raw_key is not None:
            return self.raw[raw_key]
        canonical = self.aliases.get(key, key)
        for candidate in (key, canonical):
            if candidate in self.defaults:
                value = self.defaults[candidate]
                if value is not None:
                    self.assumptions.append(f"{key} not in config: {value!r} ({self.origin} default)")
                return value
        return fallback

    def int(self, key: str, *, minimum: int = 1) -> int:
        value = self.get(key)
        if value is None:
            raise PlannerError(f"{self.name}: config field {key!r} is missing and has no default")
        return self._check_int(key, value, minimum)

    def opt_int(self, key: str, *, minimum: int = 0) -> int | None:
        value = self.get(key)
        return None if value is None else self._check_int(key, value, minimum)

    def _check_int(self, key: str, value: Any, minimum: int) -> int:
        return config_int(self.name, key, value, minimum)

    def bool(self, key: str, fallback: bool = False) -> bool:
        value = self.get(key, fallback)
        if value is None:
            return fallback
        if not isinstance(value, bool):
            raise PlannerError(f"{self.name}: config field {key!r} must be true or false, found {value!r}")
        return value

    def note(self, text: str) -> None:
        self.assumptions.append(text)


def config_int(name: str, key: str, value: Any, minimum: int) -> int:
    """An integer config field within [minimum, its plausible bound] (planner/limits.py names the bound)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        shown = repr(value) if not isinstance(value, int) or value.bit_length() < 200 else "a huge integer"
        raise PlannerError(
            f"{name}: config field {key!r} must be an integer >= {minimum}, found {shown[:80]}"
        )
    limit = limits.config_int_limit(key)
    if value > getattr(limits, limit):
        shown = str(value) if value.bit_length() < 200 else f"an integer of {value.bit_length()} bits"
        raise PlannerError(
            f"{name}: config field {key!r} is {shown}, over {limits.bound(limit)}: not a plausible model"
        )
    return value


# ----------------------------------------------------------------------------------------------------
# What every family reads the same way


def _unwrap(config: Mapping[str, Any], name: str) -> tuple[Mapping[str, Any], str, list[str]]:
    """The decoder config and its model_type; multimodal checkpoints keep the decoder under text_config."""
    data = _transformers_defaults()
    known = data["model_types"]
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):  # a list is unhashable (fuzz suite)
        raise PlannerError(
            f"{name}: config field 'model_type' must be a string, found {str(model_type)[:40]}"
        )
    notes: list[str] = []
    decoder = config
    text_config = config.get("text_config")
    if isinstance(text_config, Mapping) and (model_type not in known):
        decoder = text_config
        inner = text_config.get("model_type")
        if not isinstance(inner, str):
            inner = data["text_config_model_types"].get(model_type) if isinstance(model_type, str) else None
        if not isinstance(inner, str):
            raise PlannerError(
                f"{name}: text_config has no 'model_type', so the decoder architecture is unknown"
            )
        notes.append(f"multimodal config ({model_type}): only the text decoder under text_config is counted")
        model_type = inner
    elif text_config is not None and not isinstance(text_config, Mapping):
        raise PlannerError(f"{name}: config field 'text_config' must be an object, found {text_config!r}")
    if not isinstance(model_type, str):
        raise PlannerError(f"{name}: config has no 'model_type' string, so the architecture is unknown")
    if model_type not in known:
        raise PlannerError(
            f"{name}: unsupported model_type {model_type!r}; supported: {', '.join(supported_model_types())} "
            "(and multimodal configs whose text_config is one of these)"
        )
    return decoder, model_type, notes


def _sizes(f: _Fields, model_type: str) -> tuple[int, int, int, int, int, int | None]:
    """hidden, heads, layers, vocab, GPT-2's MLP width (0 elsewhere: per layer kind later) and the maximum
    position, under each family's own key names."""
    if model_type == "gpt2":
        hidden, heads = f.int("n_embd"), f.int("n_head")
        inner = f.opt_int("n_inner", minimum=1)
        if inner is None:
            inner = 4 * hidden
            f.note("n_inner not set: 4 * n_embd (GPT2Config rule)")
        return hidden, heads, f.int("n_layer"), f.int("vocab_size"), inner, f.int("n_positions")
    hidden, heads = f.int("hidden_size"), f.int("num_attention_heads")
    vocab = f.int("vocab_size")
    max_pos = f.opt_int("max_position_embeddings", minimum=1)
    num_layers = 0 if model_type == "nemotron_h" else f.int("num_hidden_layers")
    return hidden, heads, num_layers, vocab, 0, max_pos


def _kv_heads(f: _Fields, heads: int, name: str) -> int:
    """num_key_value_heads (multi-head attention where absent), a divisor of the attention heads."""
    kv_heads = f.opt_int("num_key_value_heads", minimum=1)
    if kv_heads is None:
        kv_heads = heads
    if heads % kv_heads:
        raise PlannerError(
            f"{name}: num_attention_heads ({heads}) is not a multiple of num_key_value_heads ({kv_heads})"
        )
    return kv_heads


def _head_dim(f: _Fields, model_type: str, hidden: int, heads: int) -> int:
    # Nemotron-H configs written before transformers 5 spell it attention_head_dim.
    key = "attention_head_dim" if model_type == "nemotron_h" and f.has("attention_head_dim") else "head_dim"
    value = f.get(key)
    if value is None:
        if hidden % heads:
            raise PlannerError(
                f"{f.name}: head_dim is not set and hidden_size ({hidden}) is not a multiple of "
                f"num_attention_heads ({heads})"
            )
        if model_type not in ("gpt2", "deepseek_v2", "deepseek_v3"):  # MLA sizes its heads itself
            f.note("head_dim not in config: hidden_size / num_attention_heads (transformers' rule)")
        return hidden // heads
    return f._check_int(key, value, 1)


def _weight_dtype(config: Mapping[str, Any], decoder: Mapping[str, Any], name: str, f: _Fields) -> str:
    for source in (decoder, config):
        for key in ("torch_dtype", "dtype"):
            value = source.get(key)
            if value is not None:
                try:
                    return canonical_dtype(value)
                except ValueError:
                    raise PlannerError(f"{name}: config field {key!r}: unknown dtype {value!r}") from None
    if "quantization_config" in decoder or "quantization_config" in config:
        # Quantized checkpoints keep their unquantized tensors (embeddings, norms, ...) in bf16 in practice.
        f.note("no torch_dtype/dtype in a quantized config: bfloat16 for unquantized tensors and activations")
        return "bfloat16"
    f.note("no torch_dtype/dtype in config: float32 (what transformers loads when the config names none)")
    return "float32"


def _tied_embeddings(
    config: Mapping[str, Any], decoder: Mapping[str, Any], f: _Fields, model_type: str
) -> bool:
    if "tie_word_embeddings" not in decoder and isinstance(config.get("tie_word_embeddings"), bool):
        return config["tie_word_embeddings"]  # multimodal wrappers keep it at the top level
    return f.bool("tie_word_embeddings", fallback=model_type == "gpt2")


def _note_mtp_layers(f: _Fields, decoder: Mapping[str, Any]) -> None:
    for key in ("mtp_num_hidden_layers", "num_nextn_predict_layers"):
        extra = decoder.get(key)
        if isinstance(extra, int) and extra > 0:
            f.note(f"{key}={extra}: the multi-token-prediction layer(s) are not counted (transformers does "
                   "not build them; vLLM loads them only for speculative decoding)")  # fmt: skip


# ----------------------------------------------------------------------------------------------------
# The ModelSpec, assembled


def _finish(
    f: _Fields, config: Mapping[str, Any], decoder: Mapping[str, Any], name: str, model_type: str,
    hidden: int, inner: int, vocab: int, num_layers: int, heads: int, layers: tuple[LayerSpec, ...],
    tie: bool, dtype: str,
    quant: QuantSpec | None, max_pos: int | None, shapes: ArchShapes, *, num_experts: int = 0, top_k: int = 0,
) -> ModelSpec:  # fmt: skip
    if quant is not None:
        default_format = quant.method
    else:
        default_format = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(dtype)
        if default_format is None:
            raise PlannerError(f"{name}: torch_dtype {dtype!r} is not a weight dtype the planner knows")
    return ModelSpec(
        name=name,
        model_type=model_type,
        hidden_size=hidden,
        intermediate_size=inner,
        vocab_size=vocab,
        num_layers=num_layers,
        num_attention_heads=heads,
        layers=layers,
        tie_word_embeddings=tie,
        torch_dtype=dtype,
        default_format=default_format,
        max_position_embeddings=max_pos,
        num_experts=num_experts,
        experts_per_token=top_k,
        assumptions=tuple(dict.fromkeys(f.assumptions)),
        shapes=shapes,
        quantization=quant,
        config=MappingProxyType(dict(decoder)),
    )
