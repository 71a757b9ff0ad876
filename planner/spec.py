"""A model's shape, read from a config.json (or a catalog entry, a checkpoint folder, a HF cache entry).

Everything downstream (parameters, weight bytes, KV cache, plans) is computed from a ModelSpec; this module is
the one place that knows how the config fields of each architecture are spelled.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from planner.errors import PlannerError


@dataclass(frozen=True, slots=True)
class AttentionSpec:
    """One layer's token mixer, as far as the cache is concerned."""

    kind: str  # "full" | "sliding" | "mla" | "linear" (fixed state) | "mamba" (fixed state)
    num_q_heads: int  # 0 for linear/mamba if not applicable
    num_kv_heads: int  # KV heads stored (MLA: 1 latent "head")
    k_head_dim: int  # per-head key width stored in the cache (MLA: kv_lora_rank + qk_rope_head_dim)
    v_head_dim: int  # per-head value width stored (MLA: 0)
    window: int | None = None  # sliding window W (tokens), kind == "sliding"
    state_elements: int = 0  # per-sequence fixed recurrent/SSM state elements (linear / mamba)
    state_dtype: str = ""  # dtype of that state, e.g. "float32"
    # Linear attention and Mamba also keep a short convolution window per sequence. transformers keeps it in
    # the activation dtype (the model's torch_dtype), not in fp32 like the recurrent state: counted apart.
    conv_state_elements: int = 0
    conv_state_dtype: str = ""


@dataclass(frozen=True, slots=True)
class LayerSpec:
    index: int
    attention: AttentionSpec | None  # None: an MLP-only block (Nemotron-H "-")
    mlp_kind: str  # "dense" | "moe" | "none"


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str  # catalog name or config path/repo id
    model_type: str  # HF model_type of the decoder ("llama", "qwen3_moe", ...)
    hidden_size: int
    intermediate_size: int  # dense MLP width (MoE: expert width * experts_per_token used for activations)
    vocab_size: int
    num_layers: int
    num_attention_heads: int
    layers: tuple[LayerSpec, ...]
    tie_word_embeddings: bool
    torch_dtype: str  # "bfloat16", ...
    default_format: str  # weight format implied by torch_dtype / quantization_config ("bf16", "fp8", ...)
    max_position_embeddings: int | None
    num_experts: int = 0
    experts_per_token: int = 0
    assumptions: tuple[str, ...] = ()  # defaults taken from transformers' config classes, etc.
    # The decoder config (text_config already unwrapped). Read-only; not part of equality/hash.
    config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), compare=False, repr=False)


def load_spec(source: str | os.PathLike | Mapping[str, Any], *, allow_download: bool = False) -> ModelSpec:
    """A ModelSpec from a config dict, a config.json path, a checkpoint folder, a catalog name or a repo id
    found in the local Hugging Face cache."""
    if isinstance(source, Mapping):
        return spec_from_config(source, name="<config dict>")
    text = os.fspath(source)
    path = pathlib.Path(text).expanduser()
    if path.is_dir():
        config_path = path / "config.json"
        if not config_path.is_file():
            raise PlannerError(f"{path}: a checkpoint folder needs a config.json; none found there")
        return spec_from_config(read_config_file(config_path), name=str(path))
    if path.is_file():
        return spec_from_config(read_config_file(path), name=str(path))
    raise PlannerError(
        f"{text!r} is not a config file, a checkpoint folder, a catalog name or a cached repo id"
    )


def read_config_file(path: pathlib.Path) -> dict[str, Any]:
    """Parse a config.json; malformed JSON is reported with file, line and column."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlannerError(f"{path}: cannot read config: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise PlannerError(f"{path}: not a UTF-8 text file, so not a config.json ({exc.reason})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlannerError(
            f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc
    if not isinstance(data, dict):
        raise PlannerError(f"{path}: a config.json must hold a JSON object, found {type(data).__name__}")
    return data


def spec_from_config(config: Mapping[str, Any], *, name: str) -> ModelSpec:
    """Build a ModelSpec from a parsed config (multimodal wrappers are unwrapped to their text_config)."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        raise PlannerError(f"{name}: config has no 'model_type' string, so the architecture is unknown")
    if model_type != "llama":
        raise PlannerError(f"{name}: unsupported model_type {model_type!r}; supported: llama")
    hidden = _int(config, "hidden_size", name)
    heads = _int(config, "num_attention_heads", name)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    num_layers = _int(config, "num_hidden_layers", name)
    attention = AttentionSpec("full", heads, kv_heads, head_dim, head_dim)
    layers = tuple(LayerSpec(i, attention, "dense") for i in range(num_layers))
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    return ModelSpec(
        name=name,
        model_type=model_type,
        hidden_size=hidden,
        intermediate_size=_int(config, "intermediate_size", name),
        vocab_size=_int(config, "vocab_size", name),
        num_layers=num_layers,
        num_attention_heads=heads,
        layers=layers,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        torch_dtype=dtype,
        default_format={"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(dtype, "bf16"),
        max_position_embeddings=config.get("max_position_embeddings"),
        config=MappingProxyType(dict(config)),
    )


def _int(config: Mapping[str, Any], key: str, name: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise PlannerError(f"{name}: config field {key!r} must be a positive integer, found {value!r}")
    return value
