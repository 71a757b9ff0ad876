"""`memsight explain` on llama.cpp logs and `memsight plan --engine llamacpp`, end to end (real
`python -m tui.cli` processes): the worksheet line first, the shared --json keys, one line and exit 2 for a
log that cannot be explained, and vLLM's flags refused on a llama.cpp log."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from tests.tiny_gguf import write_tiny_gguf

LOG = REPO_ROOT / "tests" / "data" / "llamacpp_logs" / "ci_b4446_t4vulkan_pythia28b_q8_0.log"


def memsight(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
        input=stdin,
    )  # fmt: skip


def test_text_starts_with_the_worksheet_and_lists_every_figure():
    done = memsight("explain", str(LOG))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("llama.cpp: predicted KV 640.00 MiB (2,048 cells x 32 layers, K f16, V f16)")
    assert lines[2] == "memsight explain: 2.8B, llama.cpp b4446 (4d2b3d88)"
    kv = next(line for line in lines if line.strip().startswith("KV cache (MiB)"))
    assert "640.00" in kv and "+0.0%" in kv and "(line 65)" in kv
    gpu = next(line for line in lines if line.strip().startswith("model buffer, GPU (MiB)"))
    assert "2,684.57" in gpu and "2,685.51" in gpu


def test_json_has_the_shared_keys_and_exact_figures():
    done = memsight("explain", str(LOG), "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert list(out) == [
        "worksheet", "model", "llamacpp_build", "engine", "stage", "inputs", "terms", "rows", "notes"
    ]
    assert out["rows"]["kv_total"]["logged"] == 640.0 and out["rows"]["kv_total"]["predicted"] == 640.0
    assert out["rows"]["kv_cells"]["logged"] == 2048 and out["rows"]["model_host"]["logged"] == 130.49
    assert {t["name"]: t["how"] for t in out["terms"]}["compute buffer, GPU"] == "DERIVED"
    compute = out["rows"]["compute_gpu"]  # derived from the graph; the log rounds to 2 decimals
    assert compute["logged"] == 162.0 and abs(compute["predicted"] - 162.0) <= 0.005


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("llama_model_loader: - kv   0: general.architecture str = llama\nprint_info: n_layer = 32\n",
         "memsight: a llama.cpp log that stops after reading the model's metadata, before the weights were "
         "loaded"),
        ("print_info: n_layer = 32\nload_tensors: CUDA0 model buffer size = 10.00 MiB\n"
         "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9536.19 MiB on device 0: cudaMalloc failed: "
         "out of memory\n",
         "memsight: llama.cpp died after loading the weights, before the KV cache was allocated (line 3): "
         "cudaMalloc failed: out of memory"),
    ],
)  # fmt: skip
def test_a_log_that_stops_early_is_one_line_and_exit_2(text, message):
    done = memsight("explain", "-", stdin=text)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(message), done.stderr
    assert done.stderr.count("\n") == 1


def test_vllm_flags_are_refused_on_a_llama_cpp_log():
    done = memsight("explain", str(LOG), "--gpu", "h100", "--max-model-len", "4096")
    assert done.returncode == 2
    assert done.stderr == "memsight: --max-model-len is a vLLM setting; this is llama.cpp's log\n"


def test_plan_engine_llamacpp_on_a_real_gguf(tmp_path: pathlib.Path):
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")
    done = memsight("plan", str(gguf), "--engine", "llamacpp", "--context", "2048", "-np", "2", "-ctk",
                    "q8_0",
                    "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    # 2 streams of 1024 cells x 4 layers x (K 128 x q8_0 = 136 B + V 128 x f16 = 256 B)
    assert (out["n_ctx_seq"], out["kv_bytes"]) == (1024, 1024 * 2 * 4 * (136 + 256))
    assert out["model_host_bytes"] + out["model_gpu_bytes"] == gguf_tensor_bytes(gguf)
    text = memsight("plan", str(gguf), "--engine", "llamacpp", "-ngl", "0")
    assert text.returncode == 0 and "0/5 layers on the GPU" in text.stdout


def gguf_tensor_bytes(path: pathlib.Path) -> int:
    import gguf  # noqa: PLC0415

    return sum(int(t.n_bytes) for t in gguf.GGUFReader(str(path)).tensors)


def test_plan_engine_llamacpp_wants_a_gguf_and_its_flags_want_the_engine():
    done = memsight("plan", "llama-3.1-8b", "--engine", "llamacpp")
    assert done.returncode == 2 and "plans a GGUF file" in done.stderr
    done = memsight("plan", "llama-3.1-8b", "-ctk", "q8_0")
    assert (
        done.returncode == 2
        and done.stderr == "memsight: --cache-type-k only make sense with --engine llamacpp\n"
    )


LOCAL = REPO_ROOT / "tests" / "data" / "llamacpp_local" / "b1_0c1e570_cpu_tiny_c4096_np2.log"


def test_a_gguf_that_is_not_the_logs_model_is_named_as_the_cause(tmp_path: pathlib.Path):
    # the log's model is tiny_gguf's Q8_0 file (print_info: Q8_0, 2.53 MiB); an F16 file was blamed on
    # llama.cpp ("+88.2% ... repacked or extra buffers")
    f16 = write_tiny_gguf(tmp_path / "tiny_f16.gguf", matrix_type="F16")
    out = json.loads(memsight("explain", str(LOCAL), "--model", str(f16), "--json").stdout)
    said = "this GGUF is not the log's model (F16 4.76 MiB vs Q8_0 2.53 MiB)"
    assert said in out["notes"]
    assert out["rows"]["model_host"]["cause"] == said
    same = json.loads(memsight("explain", str(LOCAL), "--model", str(write_tiny_gguf(tmp_path / "q8.gguf")),
                               "--json").stdout)  # fmt: skip
    assert not any("not the log's model" in n for n in same["notes"])
    assert same["rows"]["model_host"]["cause"] == "within 1%"
