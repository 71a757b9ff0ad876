"""`memsight plan FILE.gguf --engine llamacpp`'s arguments, end to end (real `python -m tui.cli` processes):
each bad argument is one `memsight:` line and exit 2, each llama.cpp spelling the plan prints is accepted."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from tests.tiny_gguf import write_tiny_gguf


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def plan(gguf: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "plan", str(gguf), "--engine", "llamacpp", *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def refusal(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2 and done.stdout == "", done.stderr[-2000:]
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr[-2000:]
    return done.stderr.rstrip("\n")


@pytest.mark.parametrize("gpus", ["2", "3"])
def test_metal_is_one_device(gguf, gpus):
    assert refusal(plan(gguf, "--gpu-backend", "Metal", "--gpus", gpus)) == (
        f"memsight: --gpu-backend Metal is one device: --gpus {gpus} needs CUDA, ROCm or Vulkan"
    )
