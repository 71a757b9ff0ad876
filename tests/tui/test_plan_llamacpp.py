"""`memsight plan FILE.gguf --engine llamacpp`'s arguments, end to end (real `python -m tui.cli` processes):
each bad argument is one `memsight:` line and exit 2, each llama.cpp spelling the plan prints is accepted."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize("ngl", ["-1", "auto", "all", "-2", "ALL"])
def test_ngl_takes_llama_cpps_own_spellings_of_every_layer(gguf, ngl):
    # common/arg.cpp (0c1e570): auto is -1, all is -2; llama-model.cpp reads any negative count as every layer
    done = plan(gguf, "-ngl", ngl)
    assert done.returncode == 0, done.stderr
    assert "-ngl: 5/5 layers on the GPU" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-ngl", "-3"), "argument --n-gpu-layers/-ngl: must be at least -2, got -3"),
        (("-ngl", "half"), "argument --n-gpu-layers/-ngl: 'half' is not a number of layers, auto or all"),
        (("-np", "-2"), "argument --parallel/-np: must be at least 1, got -2"),
    ],
)
def test_a_negative_count_says_its_minimum(gguf, args, message):
    assert refusal(plan(gguf, *args)) == f"memsight plan: {message}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--users", "4"), "--users is -np (--parallel) for llama.cpp"),
        (("--tp", "4"), "--tp is --gpus / -ts (--tensor-split) for llama.cpp"),
        (("--kv-dtype", "fp8"), "--kv-dtype is -ctk / -ctv (--cache-type-k / --cache-type-v) for llama.cpp"),
        (("--format", "bf16"), "--format: llama.cpp runs the GGUF's own tensor types; plan another GGUF file "
         "instead"),
        (("--gpu-memory-utilization", "0.5"), "--gpu-memory-utilization is vLLM's; llama.cpp allocates what "
         "its buffers need"),
    ],
)  # fmt: skip
def test_another_engines_flag_is_refused_not_ignored(gguf, args, message):
    assert refusal(plan(gguf, *args)) == f"memsight: {message}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # argparse names the option itself: the parser's own "--tensor-split: " came twice
        (("-ts", "abc"), "memsight plan: argument --tensor-split/-ts: 'abc' is not proportions like 3,1"),
        (("-mg", "7"), "memsight: -mg 7: there is 1 GPU (-mg 0)"),
        (("--gpus", "3", "-mg", "7"), "memsight: -mg 7: there are 3 GPUs (-mg 0 to 2)"),
        # llama_context_params.n_ctx is a uint32: 10^10 was planned as given
        (("--context", "10000000000"),
         "memsight: --context (-c) 10,000,000,000: llama.cpp's n_ctx is a uint32, at most 4,294,967,295"),
    ],
)  # fmt: skip
def test_small_refusals_read_as_one_sentence(gguf, args, message):
    assert refusal(plan(gguf, *args)) == message


def test_machine_gives_a_fit_verdict_from_the_fullest_device(gguf):
    # --machine was read by nothing: exit 0, the same plan, no verdict
    out = json.loads(plan(gguf, "--machine", "h100", "--json").stdout)
    gpu = next(d for d in out["devices"] if d["device"] == "CUDA0")
    need = gpu["model_bytes"] + gpu["kv_bytes"] + gpu["compute_bytes"]
    assert out["fit"] == {"machine": "h100", "memory": "CUDA0", "need_bytes": need,
                          "capacity_bytes": 80 * 2**30, "fits": True}  # fmt: skip
    short = plan(gguf, "--capacity-gib", "10MiB")
    assert short.returncode == 0, short.stderr
    over = (need - 10 * 2**20) / 2**20
    assert f"SHORT by {over:,.2f} MiB: CUDA0 {need / 2**20:,.2f} of 10.00 MiB" in short.stdout
    # on unified memory GPU and host buffers share the pool, less the OS reserve
    spark = json.loads(plan(gguf, "--machine", "spark", "--json").stdout)
    total = sum(d["model_bytes"] + d["kv_bytes"] + d["compute_bytes"] for d in spark["devices"])
    assert spark["fit"]["memory"] == "one pool" and spark["fit"]["need_bytes"] == total
    assert spark["fit"]["capacity_bytes"] == (128 - 10) * 2**30


def test_a_cpu_build_on_a_gpu_machine_is_refused(gguf):
    assert refusal(plan(gguf, "--machine", "h100", "--gpu-backend", "CPU")) == (
        "memsight: --machine h100 sizes a GPU's memory; --gpu-backend CPU keeps every buffer in host memory"
    )
