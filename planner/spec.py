"""A model's shape, read from a config.json (or a catalog entry, a checkpoint folder, a HF cache entry).

Everything downstream (parameters, weight bytes, KV cache, plans) is computed from a ModelSpec. This module is
the entry point: load_spec (which source a name is), catalog_variant_spec, and spec_from_config (one config
-> ModelSpec, handing each architecture to its reader). How the config fields are spelled lives beside it:

- planner/spec_types.py      the dataclasses: ModelSpec, LayerSpec, AttentionSpec, ArchShapes (MLAShapes,
                             LinearAttentionShapes, MambaShapes, MoEShapes), QuantSpec
- planner/spec_source.py     finding the config: a file or checkpoint folder, a repo id in the local HF cache,
                             the Hub download
- planner/spec_fields.py     transformers' defaults (_Fields, config_int, supported_model_types), multimodal
                             wrappers, the fields every family reads alike, the ModelSpec assembly (_finish)
- planner/spec_families.py   one section per architecture family: Hugging Face decoders and their layer
                             types, DeepSeek MLA, MoE, linear attention (Qwen3-Next / Qwen3.5), GPT-2,
                             Nemotron-H
- planner/spec_quant.py      quantization_config: fp8, mxfp4, awq/gptq, modelopt, compressed-tensors,
                             bitsandbytes 4-bit

Fields a config leaves out are taken from transformers' per-architecture defaults
(planner/data/transformers_defaults.json) and listed in ``ModelSpec.assumptions``. The names other code uses
are re-exported here: import them from planner.spec.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Mapping
from typing import Any

from planner import limits
from planner.errors import PlannerError
from planner.spec_families import _decoder_layers, _gpt2, _nemotron_h
from planner.spec_fields import (
    DATA_DIR,
    _Fields,
    _finish,
    _head_dim,
    _kv_heads,
    _note_mtp_layers,
    _sizes,
    _tied_embeddings,
    _unwrap,
    _weight_dtype,
    config_int,
    supported_model_types,
)
from planner.spec_quant import _quantization
from planner.spec_source import (
    MAX_CONFIG_BYTES,
    _looks_like_path,
    _looks_like_repo_id,
    _path_kind,
    download_config,
    find_in_hf_cache,
    hf_endpoint,
    hf_hub_cache,
    read_config_file,
)
from planner.spec_types import (
    ArchShapes,
    AttentionSpec,
    LayerSpec,
    LinearAttentionShapes,
    MambaShapes,
    MLAShapes,
    ModelSpec,
    MoEShapes,
    QuantSpec,
)

# What other code imports from here (the dataclasses live in planner/spec_types.py, the readers beside it).
__all__ = [
    "DATA_DIR",
    "MAX_CONFIG_BYTES",
    "ArchShapes",
    "AttentionSpec",
    "LayerSpec",
    "LinearAttentionShapes",
    "MLAShapes",
    "MambaShapes",
    "MoEShapes",
    "ModelSpec",
    "QuantSpec",
    "catalog_variant_spec",
    "config_int",
    "download_config",
    "find_in_hf_cache",
    "hf_endpoint",
    "hf_hub_cache",
    "load_spec",
    "read_config_file",
    "spec_from_config",
    "supported_model_types",
]

# ----------------------------------------------------------------------------------------------------
# Finding the config (where a name points: planner/spec_source.py reads it)


def load_spec(source: str | os.PathLike | Mapping[str, Any], *, allow_download: bool = False) -> ModelSpec:
    """A ModelSpec from a config dict, a config.json path, a checkpoint folder, a catalog name or a repo id
    found in the local Hugging Face cache (downloaded only with allow_download=True)."""
    if isinstance(source, Mapping):
        return spec_from_config(source, name="<config dict>")
    text = os.fspath(source)
    if len(text) > limits.MAX_NAME_CHARS:
        raise PlannerError(
            f"{text[:60]!r}...: a model name of {len(text)} characters, over {limits.bound('MAX_NAME_CHARS')}"
        )
    path = pathlib.Path(text).expanduser()
    kind = _path_kind(path)
    if kind == "dir":
        config_path = path / "config.json"
        if _path_kind(config_path) is None:
            raise PlannerError(f"{path}: a checkpoint folder needs a config.json; none found there")
        return spec_from_config(read_config_file(config_path), name=str(path))
    if kind == "file":
        return spec_from_config(read_config_file(path), name=str(path))

    from planner import catalog  # the catalog loads its JSON lazily, on first use

    entry = catalog.catalog_config(text)
    if entry is not None:
        return spec_from_config(entry, name=text.strip().lower())
    if _looks_like_repo_id(text):
        cached = find_in_hf_cache(text)
        if cached is not None:
            return spec_from_config(read_config_file(cached), name=text)
        if allow_download:
            return spec_from_config(download_config(text), name=text)
        known = catalog.catalog_name_for_repo(text)
        if known is not None:
            # Not cached, but the catalog holds this repo's architecture numbers: use them and say so.
            spec = spec_from_config(catalog.catalog_config(known), name=text)
            note = f"{text} is not in the local HF cache: architecture from the catalog entry {known}"
            return dataclasses.replace(spec, assumptions=(note, *spec.assumptions))
        variant = catalog.catalog_variant_for(text)
        if variant is not None:
            return catalog_variant_spec(text, variant)
        raise PlannerError(
            f"{text!r} is not in the local Hugging Face cache ({hf_hub_cache()}) nor in the catalog: "
            f"`memsight plan {text} --download` fetches only its config.json from the Hub, or give a "
            "config.json path (memsight plan --list searches the catalog)"
        )
    if _looks_like_path(text):
        raise PlannerError(f"{text}: no such file or folder")
    hint = catalog.close_names(text)
    raise PlannerError(
        f"{text!r} is not a config file, a checkpoint folder, a catalog name or an org/name repo id"
        + (
            f"; did you mean {', '.join(hint)}?"
            if hint
            else "; memsight plan --list [PATTERN] searches the catalog"
        )
    )


def catalog_variant_spec(model: str, variant: tuple[str, str]) -> ModelSpec:
    """The spec of a checkpoint the catalog holds only as its base model
    (planner.catalog.catalog_variant_for), with the assumption said."""
    from planner import catalog  # noqa: PLC0415

    name, repo = variant
    spec = spec_from_config(catalog.catalog_config(name), name=model)
    note = (
        f"{model} is not in the local HF cache: architecture from the catalog entry {name} ({repo}), of "
        "which it is a variant: the same shape fields assumed (context length and rope settings may differ)"
    )
    return dataclasses.replace(spec, assumptions=(note, *spec.assumptions))


# ----------------------------------------------------------------------------------------------------
# Config -> ModelSpec (the readers: planner/spec_fields.py, planner/spec_families.py, planner/spec_quant.py)


def spec_from_config(config: Mapping[str, Any], *, name: str) -> ModelSpec:
    """Build a ModelSpec from a parsed config (multimodal wrappers are unwrapped to their text_config)."""
    if not isinstance(config, Mapping):
        raise PlannerError(f"{name}: a config must be a JSON object, found {type(config).__name__}")
    decoder, model_type, wrapper_notes = _unwrap(config, name)
    f = _Fields(decoder, model_type, name)
    for note in wrapper_notes:
        f.note(note)

    hidden, heads, num_layers, vocab, inner, max_pos = _sizes(f, model_type)
    kv_heads = _kv_heads(f, heads, name)
    head_dim = _head_dim(f, model_type, hidden, heads)
    dtype = _weight_dtype(config, decoder, name, f)
    quant = _quantization(config, decoder, name)
    tie = _tied_embeddings(config, decoder, f, model_type)

    if model_type == "gpt2":
        return _gpt2(f, config, decoder, name, hidden, heads, num_layers, vocab, inner, max_pos, head_dim,
                     tie, dtype, quant)  # fmt: skip

    if model_type == "nemotron_h":
        return _nemotron_h(f, config, decoder, name, hidden, heads, kv_heads, head_dim, vocab, tie, dtype,
                           quant, max_pos)  # fmt: skip

    layers, inner, shapes, num_experts, top_k = _decoder_layers(
        f, decoder, name, model_type, num_layers, heads, kv_heads, head_dim, dtype
    )
    _note_mtp_layers(f, decoder)
    return _finish(f, config, decoder, name, model_type, hidden, inner, vocab, num_layers, heads,
                   tuple(layers), tie, dtype, quant, max_pos, shapes, num_experts=num_experts,
                   top_k=top_k)  # fmt: skip
