"""The live path on a real llama.cpp run on this machine's CPU: `memsight run --headless --record` on
llama-server (built outside the clone by `bash scripts/llamacpp_build.sh`; the test says so and skips where it
is absent) loading a tiny GGUF written here. memsight follows the server's log as it streams, records
llama.cpp's own buffers, and memsight's plan for the same GGUF and arguments is within 1% of them."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from planner.engines.llamacpp.plan import predict
from planner.engines.llamacpp.predict import LlamaCppArgs
from tests.conftest import REPO_ROOT
from tests.tiny_gguf import write_tiny_gguf

MiB = 2**20
BIN = pathlib.Path(os.environ.get("MEMSIGHT_LLAMACPP_DIR", "/work/cache/llamacpp")) / "bin" / "llama-server"
pytestmark = pytest.mark.skipif(
    not BIN.is_file(), reason=f"no llama.cpp build at {BIN}: build it with `bash scripts/llamacpp_build.sh`"
)
# CMD for memsight run: llama-server with its output on CMD's stdout, stopped once its model is loaded
# (-lv 4: this build logs the loader's buffer lines only from that verbosity)
SERVE = """\
import subprocess, sys
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
for line in proc.stdout:
    sys.stdout.write(line)
    sys.stdout.flush()
    if "listening on" in line:
        break
proc.terminate()  # llama-server may want a second signal to stop: then it is killed
try:
    proc.wait(timeout=5)
except subprocess.TimeoutExpired:
    proc.kill()
    proc.wait()
"""


def serve_command(gguf: pathlib.Path, *args: str) -> list[str]:
    return [sys.executable, "-c", SERVE, str(BIN), "-m", str(gguf), "--host", "127.0.0.1", "--port", "0",
            "-t", "1", "--no-warmup", "-lv", "4", *args]  # fmt: skip


def test_memsight_run_records_llama_cpps_own_buffers_and_the_plan_matches(tmp_path):
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")
    record = tmp_path / "run.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "run", "--headless", "--record", str(record), "--hz", "5", "--",
         *serve_command(gguf, "-c", "4096", "-np", "1")],
        cwd=tmp_path, capture_output=True, text=True, timeout=180,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "llama_kv_cache" in done.stdout  # CMD's output still reaches the terminal
    events = [json.loads(line) for line in record.read_text().splitlines()]
    logged = [e for e in events if e["k"] == "engine_log"]
    assert logged and logged[-1]["engine"] == "llamacpp", [e["k"] for e in events]
    (cpu,) = logged[-1]["devices"]
    assert cpu["device"] == "CPU"
    plan = predict(str(gguf), LlamaCppArgs(n_ctx=4096, n_gpu_layers=0, cpu_only=True))
    # llama.cpp prints MiB to two decimals; the plan is exact bytes: within 1%
    assert abs(cpu["weights"] / plan.model.cpu_bytes - 1) <= 0.01, (cpu, plan.model)
    assert abs(cpu["kv"] / plan.kv.bytes - 1) <= 0.01, (cpu, plan.kv.terms)
    # the compute buffer, derived from llama.cpp's graph (planner/engines/llamacpp/compute.py)
    assert abs(cpu["activations"] / plan.compute.host_bytes - 1) <= 0.01, (cpu, plan.compute.terms)
    summary = json.loads(record.read_text().splitlines()[-1])
    assert summary["k"] == "summary"
