"""Shared test helpers: where ../shared/ lives, and a skip marker for when it is absent."""

from __future__ import annotations

import pathlib

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED = REPO_ROOT.parent / "shared"
SHARED_CONFIGS = SHARED / "configs"
SHARED_FIXTURES = SHARED / "fixtures"

needs_shared = pytest.mark.skipif(
    not SHARED_CONFIGS.is_dir(),
    reason="../shared/ (real configs and recorded fixtures) is not beside this checkout",
)
