"""A real llama.cpp on this machine's CPU against memsight's plan for the same GGUF and arguments.

llama-server is built outside the clone by `bash scripts/llamacpp_build.sh` (the llama.cpp that
llama-cpp-python 0.3.36 vendors, ggml-org/llama.cpp@0c1e57098); where it is absent the test says so and skips.
The GGUF is written here (tests/tiny_gguf.py); llama-server loads it, logs its buffers and is stopped.
"""

from __future__ import annotations

import os
import pathlib
import re
import select
import subprocess
import time

import pytest

from planner.engines.llamacpp.log import parse_log
from planner.engines.llamacpp.plan import predict
from planner.engines.llamacpp.predict import LlamaCppArgs
from tests.tiny_gguf import TinyShape, write_tiny_gguf

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
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    # Read the pipe's bytes as they come (os.read), not with readline(): a buffered readline() takes in more
    # than one line, select() then sees an empty pipe while the lines that matter sit in Python's buffer,
    # and the loop waited out its deadline with the compute buffer's line unread (seen under load).
    received = b""
    deadline = time.monotonic() + timeout
    try:
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            received += chunk
            if b"model loaded" in received or b"listening" in received:
                break
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return received.decode(errors="replace")


@pytest.mark.parametrize(
    "args, plan_args",
    [
        (("-c", "2048", "-np", "1"), LlamaCppArgs(n_ctx=2048, n_gpu_layers=0)),
        (
            ("-c", "4096", "-np", "2", "-ctk", "q8_0", "-ctv", "q8_0"),
            LlamaCppArgs(n_ctx=4096, n_gpu_layers=0, n_seq_max=2, type_k="q8_0", type_v="q8_0"),
        ),
    ],
)
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


# Shapes and arguments that move the compute buffer's peak: the attention scores (-fa off) against the
# feed-forward and the residual stream (-fa on), a short context that cuts the micro-batch, grouped-query
# attention down to one KV head, several sequences with and without a unified cache.
COMPUTE_CASES = [
    (TinyShape(), ("-c", "2048", "-fa", "off")),
    (TinyShape(), ("-c", "8192", "-fa", "on")),
    (TinyShape(), ("-c", "300", "-fa", "off")),
    (TinyShape(n_layer=3, n_head=8, n_head_kv=1, n_ff=768), ("-c", "4096", "-ub", "256", "-fa", "off")),
    (
        TinyShape(n_layer=2, n_embd=512, n_head=8, n_head_kv=8, n_ff=1024),
        ("-c", "1024", "-ub", "1024", "-fa", "on"),
    ),
    (TinyShape(), ("-c", "4096", "-np", "4", "-fa", "on")),
    (TinyShape(), ("-c", "4096", "-np", "4", "--kv-unified", "-fa", "off")),
]


def _plan_args(args: tuple[str, ...]) -> LlamaCppArgs:
    value = dict(zip(args[::2], args[1::2], strict=False))
    return LlamaCppArgs(
        n_ctx=int(value["-c"]),
        n_gpu_layers=0,
        n_seq_max=int(value.get("-np", 1)),
        kv_unified="--kv-unified" in args,
        n_ubatch=int(value.get("-ub", 512)),
        flash_attn=value.get("-fa") == "on",
        cpu_only=True,
    )


@pytest.mark.parametrize("shape, args", COMPUTE_CASES, ids=[" ".join(a) for _, a in COMPUTE_CASES])
def test_compute_buffer_is_llama_cpps_to_the_logged_digit(tmp_path, shape, args):
    """The CPU compute buffer llama-server logs (2 decimals of MiB) is the one memsight derives from the
    graph: replayed ggml-alloc, no fitted term."""
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf", shape)
    text = server_log(
        gguf, *[a for a in args if a != "--kv-unified"], *(["-kvu"] if "--kv-unified" in args else [])
    )
    compute = parse_log(text).by_device("compute_buffer")
    assert "CPU" in compute, text[-3000:]  # llama-server's own log, when it stopped before its compute buffer
    logged = compute["CPU"]
    plan = predict(str(gguf), _plan_args(args))
    assert plan.compute.how == "DERIVED" and plan.compute.bytes == 0
    assert abs(plan.compute.host_bytes / MiB - logged.value) <= 0.005, (logged, plan.compute.terms)
    nodes = re.search(r"graph: nodes = (\d+)", text)  # the same graph, node for node
    assert nodes is not None and int(nodes.group(1)) == plan.compute.nodes
