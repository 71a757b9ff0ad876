"""Shared test helpers: where ../shared/ lives, and a skip marker for when it is absent."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED = REPO_ROOT.parent / "shared"
SHARED_CONFIGS = SHARED / "configs"
SHARED_FIXTURES = SHARED / "fixtures"
HANG_GUARD_S = 60  # a hang guard for the CLI in a subprocess, not a speed check


def run_memsight(*args: str, **popen_kwargs) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess, no stdin; a hang fails the test (TimeoutExpired) instead of blocking the
    suite."""
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        stdin=subprocess.DEVNULL,
        **popen_kwargs,
    )

needs_shared = pytest.mark.skipif(
    not SHARED_CONFIGS.is_dir(),
    reason="../shared/ (real configs and recorded fixtures) is not beside this checkout",
)


def installed(module: str) -> bool:
    """Whether `module` can be imported here, without importing it (torch takes seconds)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return False


def needs_torch(why: str) -> pytest.MarkDecorator:
    """Skip where torch is absent (the monitor's own install has none), saying what needed it: for tests whose
    child processes import torch, which importorskip in the test process would not see."""
    return pytest.mark.skipif(not installed("torch"), reason=f"torch is not installed: {why}")
