"""A real llama.cpp on this machine's CPU against memsight's plan for the same GGUF and arguments.

llama-server is built outside the clone by `bash scripts/llamacpp_build.sh` (the llama.cpp that
llama-cpp-python 0.3.36 vendors, ggml-org/llama.cpp@0c1e57098); where it is absent the test says so and skips.
The GGUF is written here (tests/tiny_gguf.py); llama-server loads it, logs its buffers and is stopped.
"""

from __future__ import annotations

import os
import pathlib
import select
import subprocess
import time

import pytest

from planner.engines.llamacpp.log import parse_log
from planner.engines.llamacpp.plan import predict
from planner.engines.llamacpp.predict import LlamaCppArgs
from tests.tiny_gguf import write_tiny_gguf

MiB = 2**20
BIN = pathlib.Path(os.environ.get("MEMSIGHT_LLAMACPP_DIR", "/work/cache/llamacpp")) / "bin" / "llama-server"
pytestmark = pytest.mark.skipif(
    not BIN.is_file(), reason=f"no llama.cpp build at {BIN}: build it with `bash scripts/llamacpp_build.sh`"
)


def server_log(gguf: pathlib.Path, *args: str, timeout: float = 60.0) -> str:
    """llama-server's start-up log, up to the model being ready (then the server is stopped)."""
    # -lv 4: this build's llama-server keeps the loader's INFO lines (the buffers) below its default verbosity
    cmd = [str(BIN), "-m", str(gguf), "--host", "127.0.0.1", "--port", "0", "-t", "1", "--no-warmup",
           "-lv", "4", *args]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "model loaded" in line or "listening" in line:
                break
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return "".join(lines)


@pytest.mark.parametrize(
    "args, plan_args",
    [
        (("-c", "2048", "-np", "1"), LlamaCppArgs(n_ctx=2048, n_gpu_layers=0)),
        (("-c", "4096", "-np", "2", "-ctk", "q8_0", "-ctv", "q8_0"),
         LlamaCppArgs(n_ctx=4096, n_gpu_layers=0, n_seq_max=2, type_k="q8_0", type_v="q8_0")),
    ],
)  # fmt: skip
def test_plan_matches_the_buffers_llama_cpp_logs(tmp_path, args, plan_args):
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")
    text = server_log(gguf, *args)
    log = parse_log(text)
    assert log.kv_caches, text[-2000:]
    plan = predict(str(gguf), plan_args)
    host = sum(f.value for f in log.by_device("model_buffer").values()) * MiB
    assert abs(host / plan.model.cpu_bytes - 1) <= 0.01, (host, plan.model.cpu_bytes)
    (cache,) = log.kv_caches
    assert abs(cache.total_mib * MiB / plan.kv.bytes - 1) <= 0.01, (cache, plan.kv.terms)
    assert cache.cells == plan.kv.caches[0].cells
