"""Built-in catalog: the architecture numbers of well-known models, as compact config.json-style data.

The data lives in planner/data/catalog.json (read lazily, on first use) and goes through the same
spec.spec_from_config path as a real config, so a catalog entry and the model's published config.json give
identical parameter counts and KV sizes (tests check this against ../shared/configs/ where we have the file).
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planner.spec import DATA_DIR


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    name: str
    hf_repo: str  # the Hub repo the numbers describe
    source: str  # where the numbers come from
    shared_config: str | None  # file name in ../shared/configs/ holding the published config, if we have it
    config: Mapping[str, Any]


@functools.cache
def _catalog() -> Mapping[str, Any]:
    with open(DATA_DIR / "catalog.json", encoding="utf-8") as fh:
        return json.load(fh)["models"]


def catalog_names() -> list[str]:
    """Every name load_spec accepts from the built-in catalog."""
    return sorted(_catalog())


def catalog_entry(name: str) -> CatalogEntry | None:
    """The entry for a catalog name (case-insensitive), or None."""
    key = name.strip().lower()
    raw = _catalog().get(key)
    if raw is None:
        return None
    return CatalogEntry(
        name=key,
        hf_repo=raw["hf_repo"],
        source=raw["source"],
        shared_config=raw.get("shared_config"),
        config=raw["config"],
    )


def catalog_config(name: str) -> dict[str, Any] | None:
    """A fresh copy of the config dict of a catalog entry, or None when the name is not in the catalog."""
    entry = catalog_entry(name)
    return None if entry is None else json.loads(json.dumps(entry.config))


def catalog_multimodal_config(model: str) -> dict[str, Any] | None:
    """The full (multimodal) config of a catalog model whose entry holds its vision tower ('multimodal'), with
    the entry's text decoder as text_config; `model` may be the catalog name, its repo or a variant of it."""
    name = model.strip().lower()
    if name not in _catalog():
        name = catalog_name_for_repo(model) or (catalog_variant_for(model) or (None, None))[0]
    raw = _catalog().get(name) if name else None
    if raw is None or "multimodal" not in raw:
        return None
    full = json.loads(json.dumps(raw["multimodal"]))
    full["text_config"] = json.loads(json.dumps(raw["config"]))
    return full


def catalog_name_for_repo(repo_id: str) -> str | None:
    """The catalog entry describing a Hub repo id (case-insensitive), or None."""
    wanted = repo_id.strip().lower()
    for name, raw in _catalog().items():
        if raw["hf_repo"].lower() == wanted:
            return name
    return None


# What a publisher appends to one base model's name for its post-trained or re-released checkpoints, which
# keep the base's shape fields (hidden size, layers, heads, vocabulary): Qwen/Qwen2.5-0.5B-Instruct,
# google/gemma-3-27b-it, meta-llama/Llama-3.1-8B-Instruct, Qwen/Qwen3-30B-A3B-Instruct-2507. That they
# keep them is an assumption the spec states (planner.spec.catalog_variant_spec), not a check.
_VARIANT_SUFFIXES = ("-instruct", "-it", "-pt", "-chat", "-base", "-hf")
_RELEASE_TAG = re.compile(r"-(?:\d{4})$")  # "-2507": Qwen's July 2025 re-release of the same architecture
# Meta renamed its Llama 3.1 repos (Meta-Llama-3.1-8B-Instruct -> Llama-3.1-8B-Instruct, same organisation).
_RENAMED_PREFIXES = ("meta-",)


def _base_name(model_name: str) -> str:
    """A checkpoint name without its variant suffixes ("qwen2.5-0.5b-instruct" -> "qwen2.5-0.5b")."""
    name = model_name.strip().lower()
    for prefix in _RENAMED_PREFIXES:
        if name.startswith(prefix + "llama"):
            name = name[len(prefix) :]
    changed = True
    while changed:
        changed = False
        stripped = _RELEASE_TAG.sub("", name)
        for suffix in _VARIANT_SUFFIXES:
            if stripped.endswith(suffix):
                stripped = stripped[: -len(suffix)]
        if stripped != name:
            name, changed = stripped, True
    return name


def catalog_variant_for(model: str) -> tuple[str, str] | None:
    """(catalog name, the catalog entry's repo) for a checkpoint that is a variant of a catalog entry's model:
    the same organisation (when `model` names one) and the same base name once the variant suffixes are
    dropped ("Qwen/Qwen2.5-0.5B-Instruct" -> qwen2.5-0.5b, "Qwen2.5-3B-Instruct" -> qwen2.5-3b). None when no
    entry matches or when several would (an ambiguous name is not guessed)."""
    text = model.strip().rstrip("/")
    org, _, name = text.rpartition("/")
    if not name:
        return None
    org = org.lower()
    base = _base_name(name)
    found = []
    for entry_name, raw in _catalog().items():
        entry_org, _, entry_model = raw["hf_repo"].lower().rpartition("/")
        if org and "/" not in org and org != entry_org:
            continue
        if _base_name(entry_model) == base:
            found.append((entry_name, raw["hf_repo"]))
    return found[0] if len(found) == 1 else None


def close_names(name: str, limit: int = 3) -> list[str]:
    """Catalog names that look like a mistyped one."""
    return difflib.get_close_matches(name.strip().lower(), catalog_names(), n=limit, cutoff=0.6)
