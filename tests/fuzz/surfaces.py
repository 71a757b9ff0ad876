"""The surfaces the fuzz suite drives: each a name, its seeds (real files), a mutator and a runner.

A runner takes the mutated bytes and a private folder and returns "ok" (read) or "refused" (the one error type
its contract names: PlannerError, CollectorError, ConfigError, exit status 2 from the CLI with one
`memsight: ...` line). Anything else it raises is a crash; a case still running after HANG_S seconds is a
hang (SIGALRM).

Seeds come from ../shared/ where it is beside the checkout, else from the project's own data (the catalog's
configs, the bundled recordings, the vLLM logs and /metrics bodies in tests/data, files the real writers
produce); each seed function says which (`Seeds.origin`), and the test run says so when ../shared is absent.

Adding a surface is a few lines (tests/fuzz/README.md):

    @surface("llama.cpp log (explain)", log_seeds("llamacpp_logs"), mutate.mutate_log)
    def run_llamacpp_log(data: bytes, folder: pathlib.Path) -> str:
        return run_cli("explain", _write(folder, "server.log", data), "--json")
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import pathlib
import signal
import struct
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from collectors.errors import CollectorError
from planner.errors import PlannerError
from tests.conftest import REPO_ROOT, SHARED_CONFIGS, SHARED_FIXTURES
from tests.fuzz import mutate

HANG_S = 20  # one case running this long is a hang (the slowest real case here takes well under a second)
FAST_CASES = 120  # per surface in the test run (.ci/run); a surface may ask for fewer (the live screen)
LONG_CASES = 10_000  # per surface in the long profile (MEMSIGHT_FUZZ=long, scripts/fuzz_report.py)
TEST_DATA = REPO_ROOT / "tests" / "data"


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


# ------------------------------------------------------------------------------------------ the registry
@dataclass(frozen=True)
class Seeds:
    data: tuple[bytes, ...]
    origin: str  # where they come from, said in the test run and the long run's report


Runner = Callable[[bytes, pathlib.Path], str]


@dataclass(frozen=True)
class Surface:
    name: str
    seeds: Callable[[], Seeds]
    mutate: Callable  # (seed bytes, random.Random) -> bytes
    run: Runner
    fast_cases: int = FAST_CASES

    def cases(self, long: bool) -> int:
        return LONG_CASES if long else self.fast_cases


SURFACES: dict[str, Surface] = {}


def surface(name: str, seeds: Callable[[], Seeds], mutator: Callable, fast_cases: int = FAST_CASES):
    """Register the decorated runner as the surface `name`."""

    def register(run: Runner) -> Runner:
        SURFACES[name] = Surface(name, seeds, mutator, run, fast_cases)
        return run

    return register


def run_case(name: str, seed_index: int, rnd) -> str:
    """One case: mutate a seed, run the surface in a fresh private folder under the hang guard."""
    s = SURFACES[name]
    seeds = s.seeds().data
    data = s.mutate(seeds[seed_index % len(seeds)], rnd)
    with tempfile.TemporaryDirectory(prefix="memsight-fuzz-") as d, hang_guard():
        return s.run(data, pathlib.Path(d))


# ------------------------------------------------------------------------------------------ seeds
def _shared(what: str) -> str:
    return f"{what} in ../shared"


_NO_SHARED = "(../shared absent: the project's own data)"


@functools.cache
def config_seeds() -> Seeds:
    if SHARED_CONFIGS.is_dir():
        paths = [p for p in sorted(SHARED_CONFIGS.glob("*.json")) if p.name != "EXPECTED.json"]
        return Seeds(tuple(p.read_bytes() for p in paths), _shared(f"the {len(paths)} model configs"))
    catalog = json.loads((REPO_ROOT / "planner" / "data" / "catalog.json").read_text())["models"]
    configs = tuple(json.dumps(entry["config"]).encode() for entry in catalog.values())
    return Seeds(configs, f"the {len(configs)} configs of planner/data/catalog.json {_NO_SHARED}")


@functools.cache
def vllm_metrics_seeds() -> Seeds:
    """Recorded vLLM /metrics bodies (../shared/fixtures), and the project's own in tests/data."""
    own = tuple(p.read_bytes() for p in sorted(TEST_DATA.glob("vllm_metrics_*.txt")))
    recorded = tuple(p.read_bytes() for p in sorted(SHARED_FIXTURES.glob("vllm_metrics*.txt")))
    if recorded:
        return Seeds(recorded + own, _shared(f"{len(recorded)} /metrics bodies") + " and tests/data's")
    return Seeds(own, f"the /metrics bodies in tests/data {_NO_SHARED}")


@functools.cache
def log_seeds(folder: str) -> Callable[[], Seeds]:
    """The start-up logs in tests/data/<folder> (the project's own, cited in its SOURCES.md)."""

    @functools.cache
    def seeds() -> Seeds:
        paths = sorted((TEST_DATA / folder).glob("*.log"))
        return Seeds(tuple(p.read_bytes() for p in paths), f"the {len(paths)} logs in tests/data/{folder}")

    return seeds


@functools.cache
def safetensors_seeds() -> Seeds:
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
    return Seeds((save(plain, metadata={"format": "pt"}), save(awq)), "two files written by safetensors")


INDEX_SEED = (
    b'{"metadata": {"total_size": 208}, "weight_map": {"model.embed_tokens.weight": "a.safetensors", '
    b'"model.layers.0.mlp.down_proj.weight": "a.safetensors", "lm_head.weight": "a.safetensors"}}'
)


@functools.cache
def gguf_seeds() -> Seeds:
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
        return Seeds((pathlib.Path(path).read_bytes(),), "a file written by gguf's GGUFWriter")


def _device_stats(device: int) -> dict[str, int]:
    """memory_stats() keys the agent reads, for a process holding device+1 GiB on `device`."""
    allocated = (device + 1) * 2**30
    return {
        "allocated_bytes.all.current": allocated,
        "allocated_bytes.all.peak": allocated,
        "reserved_bytes.all.current": allocated + 2**28,
        "num_alloc_retries": 0,
        "num_ooms": 0,
    }


def _agent(directory: str, devices: int):
    """A real agent in this process (its ring named after this pid, so a monitor here reads it): CUDA not
    initialized (devices=0), or `devices` CUDA devices served by RecordedCuda, as device_map="auto" uses."""
    from collectors.agent import Agent
    from collectors.torch_stats import RecordedCuda

    cuda = None
    if devices:
        stats = {d: _device_stats(d) for d in range(devices)}
        free_total = {d: (40 * 2**30, 80 * 2**30) for d in range(devices)}
        cuda = RecordedCuda(stats, mem_info=free_total, integrated=False)
    return Agent(hz=10, directory=directory, cuda=cuda, fine_capacity=16, coarse_capacity=4)


@functools.cache
def ring_seeds() -> Seeds:
    """Ring files written by the real agent of this process, 20 ticks each: without CUDA, and on 2 devices."""
    rings = []
    for devices in (0, 2):
        with tempfile.TemporaryDirectory() as d:
            agent = _agent(d, devices)
            agent.open()
            for _ in range(20):
                agent.tick()
            rings.append(pathlib.Path(agent.path).read_bytes())
            agent.stop()
    return Seeds(tuple(rings), "ring files written by the real agent (no CUDA; 2 recorded devices)")


def _no_nvml():
    from collectors.nvml_collector import NVMLCollector

    class NoNVML:
        def init(self):
            raise ImportError("no NVML in the fuzz suite")

    return NVMLCollector(NoNVML())


def _monitor_recording(devices: int) -> bytes:
    """A recording written by the real Monitor (this machine's /proc) of a real agent on `devices` devices."""
    from collectors.monitor import Monitor

    with tempfile.TemporaryDirectory() as d:
        agents = os.path.join(d, "agents")
        os.mkdir(agents, 0o700)
        agent = _agent(agents, devices)
        agent.open()
        path = os.path.join(d, "r.jsonl")
        monitor = Monitor(hz=2, agent_dir=agents, record_to=path, nvml=_no_nvml(), discover_interval_s=0.0)
        try:
            for _ in range(3):
                agent.tick()
                monitor.sample_once()
        finally:
            monitor.stop()
            agent.stop()
        return pathlib.Path(path).read_bytes()


@functools.cache
def recording_seeds() -> Seeds:
    """The bundled real recording's first 120 lines; one written by the real Recorder with vLLM scrapes of
    recorded /metrics bodies (and NVML snapshots of a GB10's recorded nvidia-smi, from ../shared); one
    written by the real Monitor of an agent on 8 devices."""
    from collectors.recorder import Recorder
    from collectors.replay import demo_recording_path
    from collectors.vllm_metrics import vllm_snapshot_from_text

    bundled = b"\n".join(demo_recording_path().read_bytes().split(b"\n")[:120])
    smi_path = SHARED_FIXTURES / "nvidia-smi_gb10_vllm-50408MiB.txt"
    metrics = vllm_metrics_seeds().data[-1].decode()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.jsonl")
        rec = Recorder(path, hz=2.0)
        nvml = None
        if smi_path.is_file():
            from collectors.nvidia_smi import SmiBackend
            from collectors.nvml_collector import NVMLCollector

            nvml = NVMLCollector(SmiBackend.from_text(smi_path.read_text()))
        for i in range(3):
            if nvml is not None:
                rec.nvml(nvml.sample())
            body = metrics + f'\nvllm:num_requests_running{{model_name="m"}} {i}\n'
            rec.vllm(vllm_snapshot_from_text(body, url="http://x/metrics", t=1_700_000_000.0 + i))
        rec.close()
        written = pathlib.Path(path).read_bytes()
    origin = "the bundled recording, one of vLLM scrapes"
    origin += " and a GB10's nvidia-smi (../shared)" if nvml is not None else f" {_NO_SHARED}"
    return Seeds((bundled, written, _monitor_recording(8)), origin + ", one of an agent on 8 devices")


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


# ------------------------------------------------------------------------------------------ helpers
def _write(folder: pathlib.Path, name: str, data: bytes) -> pathlib.Path:
    path = folder / name
    path.write_bytes(data)
    return path


def run_cli(*args: str | os.PathLike) -> str:
    """memsight ARGS in process: exit 0 ("ok"), or exit 2 with one "memsight: ..." line ("refused")."""
    from tui.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    if code == 2:
        lines = err.getvalue().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("memsight: "), err.getvalue()[-500:]
        return "refused"
    assert code == 0, f"exit {code}: {err.getvalue()[-500:]}"
    return "ok"


def _size_of_case(data: bytes) -> tuple[int, int]:
    """The live screen's size for this case: 160x48 or 80x24, half the cases each (fixed by the bytes, so a
    failing case replays and shrinks at its size)."""
    from tests.fuzz.screen import SIZES

    return SIZES[zlib.crc32(data) % len(SIZES)]


# ------------------------------------------------------------------------------------------ the surfaces
@surface("config.json (memsight plan)", config_seeds, mutate.mutate_json_text)
def run_plan_config(data: bytes, folder: pathlib.Path) -> str:
    return run_cli("plan", _write(folder, "config.json", data), "--json")


VLLM_VERSIONS = ("0.6.4", "0.8.5", "0.10.2", "0.19.0", "0.24.0")  # V0, V1 before/after each pool change


@surface("config.json (plan --engine vllm)", config_seeds, mutate.mutate_json_text)
def run_plan_vllm(data: bytes, folder: pathlib.Path) -> str:
    version = VLLM_VERSIONS[zlib.crc32(data) % len(VLLM_VERSIONS)]
    return run_cli("plan", _write(folder, "config.json", data), "--engine", "vllm", "--vllm-version", version,
                   "--json")  # fmt: skip


@surface("vLLM start-up log (explain)", log_seeds("vllm_logs"), mutate.mutate_log)
def run_explain_vllm(data: bytes, folder: pathlib.Path) -> str:
    return run_cli("explain", _write(folder, "vllm.log", data), "--json")


def run_checkpoint(data: bytes, folder: pathlib.Path, name: str) -> str:
    from planner.checkpoint import read_checkpoint

    _write(folder, name, data)
    try:
        read_checkpoint(folder)
    except PlannerError:
        return "refused"
    return "ok"


def _mutate_safetensors(data: bytes, rnd) -> bytes:
    """The JSON header damaged and re-framed with its (usually right, sometimes wrong) length, or bytes."""
    (n,) = struct.unpack("<Q", data[:8])
    header, body = data[8 : 8 + n], data[8 + n :]
    if rnd.random() < 0.7:
        header = mutate.mutate_json_text(header, rnd)
        length = len(header) if rnd.random() < 0.9 else rnd.choice((0, 2**64 - 1, len(header) + 1, 2**27))
        return struct.pack("<Q", length) + header + body
    return mutate.mutate_binary(data, rnd, hot=len(header) + 8)


@surface("safetensors header", safetensors_seeds, _mutate_safetensors)
def run_safetensors(data: bytes, folder: pathlib.Path) -> str:
    return run_checkpoint(data, folder, "model.safetensors")


@surface("safetensors index", lambda: Seeds((INDEX_SEED,), "a 3-tensor index"), mutate.mutate_json_text)
def run_index(data: bytes, folder: pathlib.Path) -> str:
    _write(folder, "a.safetensors", safetensors_seeds().data[0])
    return run_checkpoint(data, folder, "model.safetensors.index.json")


@surface("GGUF header", gguf_seeds, mutate.mutate_binary)
def run_gguf(data: bytes, folder: pathlib.Path) -> str:
    return run_checkpoint(data, folder, "model.gguf")


@surface("recording (replay)", recording_seeds, mutate.mutate_lines)
def run_recording(data: bytes, folder: pathlib.Path) -> str:
    """read_recording, the --json summary, and a replay stepped to its end: an event that passed the checks
    on reading and still failed in the replay is a crash (the live view would count and skip it)."""
    from collectors.recording import read_recording
    from collectors.recording_summary import summarize
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


@surface("agent ring file", ring_seeds, mutate.mutate_binary)
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


@surface("config.toml", lambda: Seeds((TOML_SEED,), "the documented config.toml"), mutate.mutate_toml)
def run_toml(data: bytes, folder: pathlib.Path) -> str:
    from tui.config import ConfigError, load_config

    try:
        load_config(_write(folder, "config.toml", data), required=True)
    except ConfigError:
        return "refused"
    return "ok"


@surface("vLLM /metrics", vllm_metrics_seeds, mutate.mutate_bytes)
def run_vllm_metrics(data: bytes, folder: pathlib.Path) -> str:
    """The /metrics parser: its contract is never to raise; a malformed body becomes a status."""
    from collectors.vllm_metrics import vllm_snapshot_from_text

    snap = vllm_snapshot_from_text(data.decode("utf-8", "replace"), url="http://x/metrics", t=1.0)
    return "ok" if snap.available and not snap.refused else "refused"


# The live screen: a case is a state built the way `replay` and `watch` build theirs, drawn by the real app
# (tests/fuzz/screen.py). Fewer cases in the test run: a draw costs tens of milliseconds, not microseconds.
LIVE_FAST_CASES = 24


@surface("live screen (replayed recording)", recording_seeds, mutate.mutate_lines, LIVE_FAST_CASES)
def run_live_replay(data: bytes, folder: pathlib.Path) -> str:
    """`memsight replay`: the fuzzed recording played to its end, drawn with the replay controls."""
    from collectors.replay import ReplayMonitor
    from tests.fuzz import screen

    try:
        replay = ReplayMonitor(_write(folder, "r.jsonl", data))
    except CollectorError:
        return "refused"
    replay.advance_to(replay.duration_s)
    screen.draw(replay, _size_of_case(data))
    return "refused" if replay.bad_lines or replay.bad_events else "ok"


@functools.cache
def _this_machine():
    """One real OS sample of this machine, taken once: the live cases' /proc side (a ring is what varies)."""
    from collectors.os_collector import OSCollector

    return OSCollector(top_n=20).sample()


@surface("live screen (agent ring)", ring_seeds, mutate.mutate_binary, LIVE_FAST_CASES)
def run_live_ring(data: bytes, folder: pathlib.Path) -> str:
    """`memsight watch`: the fuzzed ring, named after this process as its agent would be, read by the real
    Monitor (two rounds: discovery, then the records) beside a real OS sample, and drawn."""
    from collectors import agent_format as fmt
    from collectors.monitor import Monitor
    from tests.fuzz import screen

    agents = folder / "agents"
    agents.mkdir(mode=0o700)
    ring = _write(agents, fmt.ring_file_name(os.getpid(), fmt.process_start_ticks(os.getpid())), data)
    os.chmod(ring, 0o600)
    monitor = Monitor(hz=2, agent_dir=str(agents), nvml=_no_nvml(), discover_interval_s=0.0)
    try:
        monitor.builder.update_os(_this_machine())
        monitor.sample_agents()
        monitor.sample_agents()
        screen.draw(monitor, _size_of_case(data))
    finally:
        monitor.stop()
    state = monitor.state()
    return "refused" if "agents" in state.input_warnings or not state.agents else "ok"


# The other engines' start-up logs (i18sg): read whole and in pieces alike (a followed child log is read in
# pieces), then explained against a fixed catalog architecture or refused in one PlannerError.
def run_engine_log(data: bytes, engine: str, options: dict) -> str:
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


@surface("SGLang server log (explain)", log_seeds("sglang_logs"), mutate.mutate_log)
def run_sglang_log(data: bytes, folder: pathlib.Path) -> str:
    return run_engine_log(data, "sglang", {"model": "qwen2.5-7b"})


@surface("Ollama server log (explain)", log_seeds("ollama_logs"), mutate.mutate_log)
def run_ollama_log(data: bytes, folder: pathlib.Path) -> str:
    return run_engine_log(
        data, "ollama", {"model": "qwen3-4b", "given": {"format": "q4_k_m", "ctx_size": 4096}}
    )


@surface("llama.cpp log (explain)", log_seeds("llamacpp_logs"), mutate.mutate_log)
def run_llamacpp_log(data: bytes, folder: pathlib.Path) -> str:
    return run_engine_log(data, "llamacpp", {})


@functools.cache
def engine_metrics_seeds() -> Seeds:
    paths = sorted(p for p in (TEST_DATA / "engine_metrics").iterdir() if p.suffix in (".txt", ".json"))
    return Seeds(
        tuple(p.read_bytes() for p in paths), f"the {len(paths)} bodies in tests/data/engine_metrics"
    )


@surface("engine /metrics, /api/ps, /slots", engine_metrics_seeds, mutate.mutate_bytes)
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
