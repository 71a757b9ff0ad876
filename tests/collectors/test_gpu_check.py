"""scripts/gpu_check.py without a GPU: a clear message and exit 2; its pure helpers."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

torch = pytest.importorskip("torch")


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO_ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the GPU path runs instead")
def test_exits_with_a_clear_message_without_cuda():
    proc = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--quick"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "no CUDA device" in proc.stderr and "torch.cuda.is_available() == False" in proc.stderr
    assert not torch.cuda.is_initialized()


def test_helpers():
    g = _module()
    assert g.cuda_problem(None) == "torch is not installed"
    # the model the check builds: planner figures computed from its config, not typed in
    pred = g.predicted(g.LLAMA_CONFIG)
    c = g.LLAMA_CONFIG
    assert pred["kv_per_token"] == 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * c["head_dim"] * 2
    h, i, v, n, kv, d = (
        c["hidden_size"],
        c["intermediate_size"],
        c["vocab_size"],
        c["num_attention_heads"],
        c["num_key_value_heads"],
        c["head_dim"],
    )
    per_layer = h * n * d + 2 * h * kv * d + n * d * h + 3 * h * i + 2 * h
    assert pred["weights"] == 2 * (c["num_hidden_layers"] * per_layer + 2 * v * h + h)
    assert g.per_token_growth(1000, 1000 + 32768 * 64 * 4, 64, 4) == 32768
    with pytest.raises(ValueError):
        g.per_token_growth(0, 1, 0, 1)
    assert "+0.000%" in g.ratio_line("x", 100, 100) and "unknown" in g.ratio_line("x", 100, None)
