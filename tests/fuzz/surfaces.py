"""The reader surfaces the fuzz suite drives, their seeds (real files) and what each may answer.

A surface takes the mutated bytes and a private folder and returns "ok" (read) or "refused" (the one error
type its contract names: PlannerError, CollectorError, ConfigError, exit status 2 from the CLI). Anything
else it raises is a crash; a case still running after HANG_S seconds is a hang (SIGALRM).
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import pathlib
import signal
import struct
import tempfile
import time
from collections.abc import Callable

from collectors.errors import CollectorError
from planner.errors import PlannerError
from tests.conftest import SHARED_CONFIGS, SHARED_FIXTURES
from tests.fuzz import mutate

HANG_S = 20  # one case running this long is a hang (the slowest real case here takes well under a second)


class Hang(BaseException):  # not an Exception: the readers' own "except Exception" must not swallow it
    pass


@contextlib.contextmanager
def hang_guard(seconds: float = HANG_S):
    def on_alarm(signum, frame):
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ------------------------------------------------------------------------------------------ seeds
@functools.cache
def config_seeds() -> tuple[bytes, ...]:
    return tuple(p.read_bytes() for p in sorted(SHARED_CONFIGS.glob("*.json")) if p.name != "EXPECTED.json")


@functools.cache
def safetensors_seeds() -> tuple[bytes, ...]:
    import numpy as np
    from safetensors.numpy import save

    rng = np.random.default_rng(0)
    plain = {
        "model.embed_tokens.weight": rng.random((8, 4), dtype=np.float32).astype(np.float16),
        "model.layers.0.mlp.down_proj.weight": rng.random((4, 4), dtype=np.float32),
        "lm_head.weight": rng.random((8, 4), dtype=np.float32),
    }
    awq = {
        "model.layers.0.self_attn.q_proj.qweight": np.zeros((4, 1), dtype=np.int32),
        "model.layers.0.self_attn.q_proj.scales": np.zeros((1, 8), dtype=np.float16),
        "model.layers.0.self_attn.q_proj.qzeros": np.zeros((1, 1), dtype=np.int32),
    }
    return (save(plain, metadata={"format": "pt"}), save(awq))


@functools.cache
def gguf_seed() -> bytes:
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter, quants

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.gguf")
        writer = GGUFWriter(path, "llama")
        writer.add_block_count(2)
        writer.add_string("general.name", "fuzz")
        writer.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(40)])
        x = np.random.default_rng(0).random((2, 64), dtype=np.float32)
        writer.add_tensor("blk.0.q8", quants.quantize(x, GGMLQuantizationType.Q8_0),
                          raw_dtype=GGMLQuantizationType.Q8_0)  # fmt: skip
        writer.add_tensor("blk.0.f32", x)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return pathlib.Path(path).read_bytes()


@functools.cache
def recording_seeds() -> tuple[bytes, ...]:
    """The bundled real recording's first 120 lines, and one written by the real Recorder with NVML
    snapshots (recorded nvidia-smi of a GB10 under vLLM) and vLLM scrapes (a recorded /metrics body)."""
    from collectors.nvidia_smi import SmiBackend
    from collectors.nvml_collector import NVMLCollector
    from collectors.recorder import Recorder
    from collectors.replay import demo_recording_path
    from collectors.vllm_metrics import vllm_snapshot_from_text

    bundled = b"\n".join(demo_recording_path().read_bytes().split(b"\n")[:120])
    smi = (SHARED_FIXTURES / "nvidia-smi_gb10_vllm-50408MiB.txt").read_text()
    metrics = (SHARED_FIXTURES / "vllm_metrics_v0.10.0_production-stack-617_excerpt.txt").read_text()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.jsonl")
        rec = Recorder(path, hz=2.0)
        nvml = NVMLCollector(SmiBackend.from_text(smi))
        for i in range(3):
            rec.nvml(nvml.sample())
            body = metrics + f'\nvllm:num_requests_running{{model_name="m"}} {i}\n'
            rec.vllm(vllm_snapshot_from_text(body, url="http://x/metrics", t=1_700_000_000.0 + i))
        rec.close()
        written = pathlib.Path(path).read_bytes()
    return bundled, written


@functools.cache
def ring_seed() -> bytes:
    """A ring file written by the real agent (no torch needed: CUDA "not initialized"), 20 records."""
    from collectors.agent import Agent

    with tempfile.TemporaryDirectory() as d:
        agent = Agent(hz=10, directory=d, fine_capacity=16, coarse_capacity=4)
        agent.open()
        for _ in range(20):
            agent.tick()
        data = pathlib.Path(agent.path).read_bytes()
        agent.stop()
    return data


TOML_SEED = b"""refresh_hz = 2.0
[thresholds]
headroom_warn_gib = 8
headroom_critical_gib = 2
new_process_gib = 1
growth_gib = 2
growth_window_s = 30
fragmentation_fraction = 0.30
fragmentation_gib = 1
[plan]
model = "llama-3.1-8b"
format = "bf16"
kv_dtype = "auto"
context = 8192
users = 8
tp = 1
unified_os_reserve_gib = 10
"""


@functools.cache
def text_fixtures(prefix: str) -> tuple[bytes, ...]:
    return tuple(p.read_bytes() for p in sorted(SHARED_FIXTURES.glob(prefix + "*.txt")))


# ------------------------------------------------------------------------------------------ runners
def _write(folder: pathlib.Path, name: str, data: bytes) -> pathlib.Path:
    path = folder / name
    path.write_bytes(data)
    return path


def run_plan_config(data: bytes, folder: pathlib.Path) -> str:
    """`memsight plan CONFIG.json --json`, in process: exit 0 or 2 (one line), nothing else."""
    from tui.cli import main

    path = _write(folder, "config.json", data)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", str(path), "--json"])
    if code == 2:
        lines = err.getvalue().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("memsight: "), err.getvalue()[-500:]
        return "refused"
    assert code == 0, f"exit {code}: {err.getvalue()[-500:]}"
    return "ok"


def run_checkpoint(data: bytes, folder: pathlib.Path, name: str) -> str:
    from planner.checkpoint import read_checkpoint

    _write(folder, name, data)
    try:
        read_checkpoint(folder)
    except PlannerError:
        return "refused"
    return "ok"


def run_index(data: bytes, folder: pathlib.Path) -> str:
    from planner.checkpoint import read_checkpoint

    _write(folder, "a.safetensors", safetensors_seeds()[0])
    _write(folder, "model.safetensors.index.json", data)
    try:
        read_checkpoint(folder)
    except PlannerError:
        return "refused"
    return "ok"


def run_recording(data: bytes, folder: pathlib.Path) -> str:
    """read_recording, the --json summary, and a replay stepped to its end: an event that passed the checks
    on reading and still failed in the replay is a crash (the live view would count and skip it)."""
    from collectors.recorder import read_recording, summarize
    from collectors.replay import ReplayMonitor

    path = _write(folder, "r.jsonl", data)
    try:
        recording = read_recording(path)
    except CollectorError:
        return "refused"
    summarize(recording)
    try:
        replay = ReplayMonitor(path)
    except CollectorError:
        return "refused"
    replay.describe()
    replay.advance_to(replay.duration_s)
    while not replay.at_end:
        replay.step()
    assert replay.bad_events == 0, replay.first_bad_event
    return "refused" if recording.bad_lines else "ok"


def run_ring(data: bytes, folder: pathlib.Path) -> str:
    from collectors.agent_reader import AgentReader, is_stale

    path = _write(folder, "agent-1-1.ring", data)
    os.chmod(path, 0o600)
    try:
        reader = AgentReader(path)
    except CollectorError:
        return "refused"
    try:
        result = reader.read_new()
        reader.read_coarse()
        reader.process_status()
        is_stale(reader, time.time())
        _ = reader.closed_by_agent, reader.count
    finally:
        reader.close()
    return "refused" if result.bad else "ok"


def run_toml(data: bytes, folder: pathlib.Path) -> str:
    from tui.config import ConfigError, load_config

    path = _write(folder, "config.toml", data)
    try:
        load_config(path, required=True)
    except ConfigError:
        return "refused"
    return "ok"


def run_vllm_metrics(data: bytes, folder: pathlib.Path) -> str:
    """The /metrics parser: its contract is never to raise; a malformed body becomes a status."""
    from collectors.vllm_metrics import vllm_snapshot_from_text

    snap = vllm_snapshot_from_text(data.decode("utf-8", "replace"), url="http://x/metrics", t=1.0)
    return "ok" if snap.available else "refused"


@functools.cache
def engine_log_seeds(folder: str) -> tuple[bytes, ...]:
    """The published logs of tests/data/<folder> (SGLang's, Ollama's)."""
    data = pathlib.Path(__file__).resolve().parents[1] / "data" / folder
    return tuple(p.read_bytes() for p in sorted(data.glob("*.log")))


def run_engine_log(data: bytes, folder: pathlib.Path, engine: str, options: dict) -> str:
    """`memsight explain` on an engine's log, in process: read (the log reader never raises), then explained
    against a fixed catalog architecture or refused in one PlannerError; streamed in pieces as a followed
    child log is, to the same result."""
    from planner.engines import get_engine

    text = data.decode("utf-8", "replace")
    eng = get_engine(engine)
    log = eng.read_log(text)
    reader = eng.new_reader()
    for i in range(0, len(text), 97):
        reader.feed_text(text[i : i + 97])
    if hasattr(reader, "flush"):
        reader.flush()
    if reader.result() != log:
        raise AssertionError("the log read in pieces differs from the log read whole")
    eng.live_buckets(log)
    if eng.log_problem(log) is not None:
        return "refused"
    try:
        eng.explain(log, options)
    except PlannerError:
        return "refused"
    return "ok"


def run_engine_metrics(data: bytes, folder: pathlib.Path) -> str:
    """--engine-url's parsers (SGLang / llama-server /metrics, Ollama /api/ps, llama-server /slots): never
    raise; a malformed body is a status."""
    from collectors.engine_metrics import slots_from_json, snapshot_from_metrics, snapshot_from_ps

    text = data.decode("utf-8", "replace")
    metrics = snapshot_from_metrics(text, url="http://x/metrics", t=1.0)
    ps = snapshot_from_ps(text, url="http://x/api/ps", t=1.0)
    try:
        slots_from_json(text)
    except CollectorError:
        pass
    return "ok" if metrics.available or ps.available else "refused"


def engine_metrics_seeds() -> tuple[bytes, ...]:
    data = pathlib.Path(__file__).resolve().parents[1] / "data" / "engine_metrics"
    return tuple(p.read_bytes() for p in sorted(data.iterdir()) if p.suffix in (".txt", ".json"))


# name -> (seeds, mutator, runner)
Runner = Callable[[bytes, pathlib.Path], str]
SURFACES: dict[str, tuple[Callable[[], tuple[bytes, ...]], Callable, Runner]] = {
    "config.json (memsight plan)": (config_seeds, mutate.mutate_json_text, run_plan_config),
    "safetensors header": (
        safetensors_seeds,
        lambda data, rnd: _mutate_safetensors(data, rnd),
        lambda data, folder: run_checkpoint(data, folder, "model.safetensors"),
    ),
    "safetensors index": (
        lambda: (b'{"metadata": {"total_size": 208}, "weight_map": {"model.embed_tokens.weight": '
                 b'"a.safetensors", "model.layers.0.mlp.down_proj.weight": "a.safetensors", '
                 b'"lm_head.weight": "a.safetensors"}}',),  # fmt: skip
        mutate.mutate_json_text,
        run_index,
    ),
    "GGUF header": (
        lambda: (gguf_seed(),),
        mutate.mutate_binary,
        lambda data, folder: run_checkpoint(data, folder, "model.gguf"),
    ),
    "recording (replay)": (recording_seeds, mutate.mutate_lines, run_recording),
    "agent ring file": (lambda: (ring_seed(),), mutate.mutate_binary, run_ring),
    "config.toml": (lambda: (TOML_SEED,), mutate.mutate_toml, run_toml),
    "vLLM /metrics": (lambda: text_fixtures("vllm_metrics"), mutate.mutate_bytes, run_vllm_metrics),
    "SGLang server log (explain)": (
        lambda: engine_log_seeds("sglang_logs"),
        mutate.mutate_lines,
        lambda data, folder: run_engine_log(data, folder, "sglang", {"model": "qwen2.5-7b"}),
    ),
    "Ollama server log (explain)": (
        lambda: engine_log_seeds("ollama_logs"),
        mutate.mutate_lines,
        lambda data, folder: run_engine_log(
            data, folder, "ollama", {"model": "qwen3-4b", "given": {"format": "q4_k_m", "ctx_size": 4096}}
        ),
    ),
    "engine /metrics, /api/ps, /slots": (engine_metrics_seeds, mutate.mutate_bytes, run_engine_metrics),
}


def _mutate_safetensors(data: bytes, rnd) -> bytes:
    """The JSON header damaged and re-framed with its (usually right, sometimes wrong) length, or bytes."""
    (n,) = struct.unpack("<Q", data[:8])
    header, body = data[8 : 8 + n], data[8 + n :]
    if rnd.random() < 0.7:
        header = mutate.mutate_json_text(header, rnd)
        length = len(header) if rnd.random() < 0.9 else rnd.choice((0, 2**64 - 1, len(header) + 1, 2**27))
        return struct.pack("<Q", length) + header + body
    return mutate.mutate_binary(data, rnd, hot=len(header) + 8)


def run_case(surface: str, seed_index: int, rnd) -> str:
    """One case: mutate a seed, run the surface in a fresh private folder under the hang guard."""
    seeds, mutator, runner = SURFACES[surface]
    all_seeds = seeds()
    data = mutator(all_seeds[seed_index % len(all_seeds)], rnd)
    with tempfile.TemporaryDirectory(prefix="memsight-fuzz-") as d, hang_guard():
        return runner(data, pathlib.Path(d))

