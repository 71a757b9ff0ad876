"""scripts/gpu_check.py without a GPU: a clear message and exit 2; its pure helpers."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

torch = pytest.importorskip("torch")


def gpu_check(*args: str, timeout: float) -> subprocess.CompletedProcess:
    """scripts/gpu_check.py in a child process, its output captured."""
    return subprocess.run(
        [sys.executable, "scripts/gpu_check.py", *args], cwd=REPO_ROOT, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO_ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    # registered first: dataclasses resolve the module's (string) annotations through sys.modules
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="this machine has CUDA: test_the_check_runs_on_the_gpu runs the check instead",
)
def test_exits_with_a_clear_message_without_cuda():
    proc = gpu_check("--quick", timeout=120)
    assert proc.returncode == 2
    assert "no CUDA device" in proc.stderr and "torch.cuda.is_available() == False" in proc.stderr
    assert not torch.cuda.is_initialized()


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="torch here has no CUDA (no NVIDIA GPU, or the CPU build scripts/test.sh installs): the check "
    "needs both (python scripts/gpu_check.py on an NVIDIA GPU with a CUDA build of torch)",
)
def test_the_check_runs_on_the_gpu():
    """Where a GPU is, the quick check runs on it: every exact figure equal, and the CUDA context measured
    device-wide (a number, not the CPU run's n/a; NVML's per-process figure may be unknown in a container)."""
    pytest.importorskip("transformers", reason="transformers is not installed: the check builds its model")
    proc = gpu_check("--quick", timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "exact figures: all equal" in proc.stdout
    context = _field(r"1\. CUDA context \(NVML per-process used − reserved, 1 tensor\): (.*)", proc.stdout)[0]
    assert re.search(r"device-wide total − free − reserved -?\d+\.\d{3} GiB", context), context


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


def _tiny_planner_figures(c: dict, element: int) -> tuple[int, int]:
    """Weights and KV bytes per token of a Llama config, written out here (not via the planner)."""
    h, i, v, n, kv, d, layers = (
        c["hidden_size"],
        c["intermediate_size"],
        c["vocab_size"],
        c["num_attention_heads"],
        c["num_key_value_heads"],
        c["head_dim"],
        c["num_hidden_layers"],
    )
    per_layer = h * n * d + 2 * h * kv * d + n * d * h + 3 * h * i + 2 * h
    weights = element * (layers * per_layer + 2 * v * h + h)
    return weights, 2 * layers * kv * d * element


def _field(pattern: str, text: str) -> list[str]:
    found = re.findall(pattern, text)
    assert found, f"{pattern!r} not in the smoke run's output:\n{text}"
    return found


def _int(s: str) -> int:
    return int(s.replace(",", ""))


@pytest.mark.parametrize(("fmt", "element"), [("bf16", 2), ("fp32", 4)])
def test_cpu_smoke_run_executes_every_code_path_with_exact_figures(fmt, element):
    pytest.importorskip(
        "transformers", reason="transformers is not installed: the check's model/cache code cannot run"
    )
    proc = gpu_check("--device", "cpu", "--dtype", fmt, timeout=300)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    # transformers 5.x deprecates past_key_values (removal announced): the check must use the current name
    assert "is deprecated" not in proc.stderr, proc.stderr
    c = _module().TINY_LLAMA_CONFIG
    weights, kv_per_token = _tiny_planner_figures(c, element)
    assert (c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]) == (64, 2, 4)
    assert (c["num_key_value_heads"], c["vocab_size"]) == (2, 128)

    # 1. and 6.: what needs CUDA / NVML says so, with no number
    assert "1. CUDA context (NVML per-process used − reserved, 1 tensor): n/a on CPU" in out
    assert "NVML n/a on CPU" in out

    # 2. the agent's tracked weights = planner + the non-parameter buffers (rotary inv_freq tables)
    tracked, planned, extra, names = _field(
        r"agent tracked ([\d,]+) B = planner ([\d,]+) B \+ non-parameter buffers ([\d,]+) B \((.*)\): exact",
        out,
    )[0]
    assert _int(planned) == weights
    buffers = re.findall(r"(\S+) ([\d,]+) B", names)
    assert buffers and all("inv_freq" in name for name, _ in buffers)
    # each table holds head_dim / 2 frequencies in the model's dtype
    assert all(_int(size) == c["head_dim"] // 2 * element for _, size in buffers)
    assert _int(extra) == sum(_int(size) for _, size in buffers)
    assert _int(tracked) == weights + _int(extra)

    # 3. DynamicCache growth per token per sequence, from the agent's records, equals the planner's
    assert f"predicted {kv_per_token:,} B" in out
    growth = _field(
        r"batch (\d+), prompt (\d+), \+(\d+) .*measured +([\d,]+) B .* exact; whole cache ([\d,]+) B exact",
        out,
    )
    assert len(growth) == 2
    for batch, prompt, new, measured, whole in growth:
        assert _int(measured) == kv_per_token
        assert _int(whole) == int(batch) * (int(prompt) + int(new)) * kv_per_token

    # 4. the StaticCache holds max_cache_len tokens at once, allocated once; the DynamicCache what it saw
    static = _field(
        r"StaticCache\((\d+) tokens\) ([\d,]+) B at construction, ([\d,]+) B after prefill, "
        r"([\d,]+) B at the end; planner ([\d,]+) B: exact",
        out,
    )
    assert len(static) == 1
    max_len, built, prefill, end, planner_static = static[0]
    batch = 2
    assert _int(end) == _int(prefill) == _int(planner_static) == batch * int(max_len) * kv_per_token
    # transformers 5.x allocates at the first update, 4.4x at construction
    assert _int(built) in (0, _int(end))
    dynamic = _field(r"DynamicCache ([\d,]+) B for (\d+) tokens; planner ([\d,]+) B: exact", out)
    assert len(dynamic) == 2  # plain and with expandable_segments
    for got, tokens, planned_kv in dynamic:
        assert _int(got) == _int(planned_kv) == batch * int(tokens) * kv_per_token
    assert out.count("gaps n/a on CPU") == 3

    # 5. the overhead loop ran with the agent on and off (timings are CPU figures, not asserted)
    assert re.search(
        r"5\. agent overhead on 8 decode steps: off [\d.]+ ms; "
        r"on \(10 Hz asked, [\d.]+ records/s, tick \d+ us\) [\d.]+ ms, ratio [\d.]+; "
        r"on \(100 Hz asked, [\d.]+ records/s, tick \d+ us\)",
        out,
    )
    # 6. the second process's own agent (started by `memsight run`'s bootstrap) wrote records
    second = _field(r"its agent \(device -1, (\d+) records\): .* rss ([\d.]+) GiB, cuda_state ([^\n]+)", out)
    second = second[0]
    assert int(second[0]) > 0 and float(second[1]) > 0
    assert second[2] == "CUDA not initialized"
    assert out.rstrip().endswith("exact figures: all equal")
