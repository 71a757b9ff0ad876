"""Built-in catalog: the architecture numbers of well-known models, as compact config.json-style data.

The data lives in planner/data/catalog.json (read lazily, on first use) and goes through the same
spec.spec_from_config path as a real config, so a catalog entry and the model's published config.json give
identical parameter counts and KV sizes (tests check this against ../shared/configs/ where we have the file).
"""

from __future__ import annotations

import difflib
import functools
import json
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


def catalog_name_for_repo(repo_id: str) -> str | None:
    """The catalog entry describing a Hub repo id (case-insensitive), or None."""
    wanted = repo_id.strip().lower()
    for name, raw in _catalog().items():
        if raw["hf_repo"].lower() == wanted:
            return name
    return None


def close_names(name: str, limit: int = 3) -> list[str]:
    """Catalog names that look like a mistyped one."""
    return difflib.get_close_matches(name.strip().lower(), catalog_names(), n=limit, cutoff=0.6)
