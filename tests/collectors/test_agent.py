"""The in-process agent, its ring file and the reader, with real torch (CPU), real files, real processes."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from collectors import agent_format as fmt
from collectors.agent import Agent, CpuCredit, kv_bytes_by_device, model_bytes_by_device
from collectors.agent_reader import AgentReader
from collectors.buckets import measure
from collectors.errors import CollectorError
from collectors.monitor import Monitor
from collectors.snapshots import NVMLSnapshot
from collectors.state import StateBuilder
from collectors.torch_stats import RecordedCuda, derive, parse_memory_stats_text, parse_memory_summary
from tests.conftest import REPO_ROOT, SHARED_FIXTURES, needs_shared

torch = pytest.importorskip("torch")
MiB = 2**20


class DynamicCacheLike:
    """transformers 5.x shape: cache.layers[i].keys / .values (layers grow lazily)."""

    class Layer:
        def __init__(self):
            self.keys = None
            self.values = None

    def __init__(self, n):
        self.layers = [self.Layer() for _ in range(n)]


def test_weights_bytes_equal_param_plus_buffer_bytes_exactly():
    model = torch.nn.Sequential(
        torch.nn.Embedding(1000, 64), torch.nn.Linear(64, 64), torch.nn.BatchNorm1d(64)
    )
    model[1].to(torch.bfloat16)
    expected = sum(p.numel() * p.element_size() for p in model.parameters()) + sum(
        b.numel() * b.element_size() for b in model.buffers()
    )
    assert model_bytes_by_device(model) == {-1: expected}
    # tied weights count once
    tied = torch.nn.Linear(10, 10, bias=False)
    pair = torch.nn.ModuleList([tied, torch.nn.Linear(10, 10, bias=False)])
    pair[1].weight = tied.weight
    assert model_bytes_by_device(pair) == {-1: 400}


def test_kv_bytes_for_5x_layers_4x_lists_and_plain_tensors():
    cache = DynamicCacheLike(3)
    assert kv_bytes_by_device(cache) == {}
    cache.layers[0].keys = torch.zeros(1, 4, 10, 8, dtype=torch.bfloat16)
    cache.layers[0].values = torch.zeros(1, 4, 10, 8, dtype=torch.bfloat16)
    assert kv_bytes_by_device(cache) == {-1: 2 * 4 * 10 * 8 * 2}

    class Old:
        def __init__(self):
            self.key_cache = [torch.zeros(2, 2, 5, 4)] * 1 + [torch.zeros(2, 2, 5, 4)]
            self.value_cache = [torch.zeros(2, 2, 5, 4), torch.zeros(2, 2, 5, 4)]

    assert kv_bytes_by_device(Old()) == {-1: 4 * 2 * 2 * 5 * 4 * 4}
    assert kv_bytes_by_device([(torch.zeros(3), torch.zeros(3))]) == {-1: 24}


def test_wait_recorded_gives_each_short_step_a_record_of_its_own(tmp_path):
    # steps far shorter than the tick (2 Hz): without the wait the ring would hold one of the five at most
    agent = Agent(hz=2, directory=str(tmp_path), cpu_budget=0)
    assert agent.wait_recorded(timeout_s=0.1) is False  # no sampler thread: says so at once
    agent.start()
    try:
        for i in range(5):
            agent.mark_step(f"short {i}")
            assert agent.wait_recorded(timeout_s=5.0), i
    finally:
        agent.stop(remove=False)
    labels = [r.step_label for r in AgentReader(agent.path).read_new().records]
    assert [f"short {i}" for i in range(5)] == [label for label in dict.fromkeys(labels) if label]


def test_agent_with_real_cpu_model_never_initializes_cuda(tmp_path):
    model = torch.nn.Linear(256, 256)
    cache = DynamicCacheLike(2)
    agent = Agent(hz=50, directory=str(tmp_path))
    agent.track_model(model)
    agent.track_kv(cache)
    agent.start()
    try:
        for layer in cache.layers:
            layer.keys = torch.zeros(1, 2, 16, 32)
            layer.values = torch.zeros(1, 2, 16, 32)
        agent.mark_step("decode")
        # five records at least: 0.3 s at 50 Hz were meant to give them, but the agent's CPU budget holds it
        # to about 20 Hz here and a loaded machine to less (4 records once, in a full run beside a replay)
        watcher, seen, deadline = AgentReader(agent.path), 0, time.monotonic() + 30
        while seen < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
            seen += len(watcher.read_new().records)
    finally:
        agent.stop(remove=False)
    assert not torch.cuda.is_initialized()
    mode = os.stat(agent.path).st_mode
    assert stat.S_IMODE(mode) == 0o600 and stat.S_IMODE(os.stat(tmp_path).st_mode) == 0o700
    reader = AgentReader(agent.path)
    records = reader.read_new().records
    assert len(records) >= 5 and reader.closed_by_agent
    last = records[-1]
    assert last.cuda_state == "CUDA not initialized" and last.device == -1
    assert last.weights_bytes == 256 * 256 * 4 + 256 * 4
    assert last.kv_bytes == 2 * 2 * (2 * 16 * 32 * 4) and last.step_label == "decode" and last.step_index == 1
    assert last.allocated is None and last.rss > 0


def test_default_stop_removes_the_file(tmp_path):
    agent = Agent(hz=20, directory=str(tmp_path)).start()
    path = agent.path
    assert os.path.exists(path)
    agent.stop()
    assert not os.path.exists(path)


def _recorded_cuda_agent(tmp_path, stats, **kw):
    cuda = RecordedCuda({0: stats}, mem_info={0: (10 * 2**30, 80 * 2**30)}, **kw)
    agent = Agent(hz=10, directory=str(tmp_path), cuda=cuda)
    agent.open()
    return agent, cuda


@needs_shared
def test_recorded_memory_stats_flow_through_agent_file_and_buckets(tmp_path):
    text = (SHARED_FIXTURES / "memory_stats_minkowskiengine-359_ordereddict_partial.txt").read_text()
    stats = parse_memory_stats_text(text)
    assert stats["allocated_bytes.all.current"] == 1185385472  # the 'allocate\nd' paste break is rejoined
    assert derive(stats)["peak_allocated"] == 15763564032
    agent, cuda = _recorded_cuda_agent(tmp_path, stats)
    agent.tick()
    agent.mark_step("decode", reset_peak=True)
    assert cuda.peak_resets == [0]
    agent.tick()
    reader = AgentReader(agent.path)
    a, b = reader.read_new().records
    assert a.allocated == 1185385472 and a.peak_allocated == 15763564032
    assert b.peak_allocated == 1185385472  # the user asked for the reset through the step mark
    assert a.cuda_free == 10 * 2**30 and a.cuda_total == 80 * 2**30 and a.device == 0
    agent.stop()


def _nested(flat: dict[str, int]) -> dict:
    """The nested form torch's memoryStats returns, from a recorded flat memory_stats() dict."""
    nested: dict = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


@needs_shared
def test_the_agent_reads_the_nested_stats_and_gets_what_torchs_own_flattening_gives(monkeypatch):
    # memory_stats() flattens memory_stats_as_nested_dict() in Python (~70 us); the agent picks its ten
    # entries from the nested dict instead. torch's own flattening code is the reference: only the C++ call
    # that needs a GPU is replaced, by the recorded real values in their nested form.
    torch = pytest.importorskip("torch")
    from collectors.torch_stats import STAT_KEYS, TorchCuda, stats_from_nested

    flat = parse_memory_stats_text(
        (SHARED_FIXTURES / "memory_stats_minkowskiengine-359_ordereddict_partial.txt").read_text()
    )
    nested = _nested(flat)
    monkeypatch.setattr(torch.cuda.memory, "memory_stats_as_nested_dict", lambda device=None: nested)
    by_torch = torch.cuda.memory.memory_stats(0)
    assert dict(by_torch) == flat  # the recorded dict round-trips through torch's flattening
    picked = stats_from_nested(nested)
    assert picked == {k: flat[k] for k in STAT_KEYS.values() if k in flat}
    assert derive(picked) == derive(by_torch)
    assert derive(picked)["peak_allocated"] == 15763564032
    # TorchCuda goes through the nested dict and never through memory_stats()
    monkeypatch.setattr(torch.cuda, "memory_stats_as_nested_dict", lambda device=None: nested)
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: pytest.fail("flattened in Python"))
    assert TorchCuda().memory_stats(0) == picked
    # a key this build lacks is left out, as memory_stats() would leave it out
    assert stats_from_nested({"num_ooms": 2, "allocated_bytes": {"all": {}}}) == {"num_ooms": 2}


@needs_shared
def test_memory_summary_table_parses_to_stats_keys():
    text = (SHARED_FIXTURES / "memory_summary_zerollama_minicpm.txt").read_text()
    s = parse_memory_summary(text)
    assert s["allocated_bytes.all.current"] == 5624 * MiB and s["reserved_bytes.all.current"] == 5684 * MiB
    assert s["inactive_split_bytes.all.current"] == 60505 * 1024 and s["segment.all.current"] == 324
    assert s["num_ooms"] == 0 and s["num_alloc_retries"] == 0
    d = derive(s)
    assert d["reserved"] - d["allocated"] == 60 * MiB and d["large_pool_reserved"] == 5600 * MiB


@needs_shared
def test_buckets_from_recorded_summary_and_gpu_process_usage(tmp_path):
    from collectors.snapshots import DeviceInfo, GpuProcess

    s = parse_memory_summary((SHARED_FIXTURES / "memory_summary_unsloth_h100_standby.txt").read_text())
    agent, _ = _recorded_cuda_agent(tmp_path, s)
    weights = torch.nn.Linear(128, 128)
    agent.track_model(weights)  # on the CPU: counts for device -1, not GPU 0
    agent.tick()
    agent.tick()
    reader = AgentReader(agent.path)
    builder = StateBuilder()
    key = (reader.pid, reader.start_ticks)
    builder.agent_track(reader.pid, reader.start_ticks, reader.cmdline, reader.path, reader.hz)
    builder.update_agent(key, reader.read_new().records)
    view = builder.build(1.0).agents[0]
    driver_used = s["reserved_bytes.all.current"] + 500 * MiB
    nvml = NVMLSnapshot(
        "ok",
        True,
        (
            DeviceInfo(
                0,
                "NVIDIA H100 80GB HBM3",
                "",
                None,
                None,
                None,
                None,
                False,
                None,
                (GpuProcess(os.getpid(), driver_used, "compute"),),
                (),
            ),
        ),
    )
    by_device = {b.device: b for b in measure(view, nvml)}
    gpu = by_device[0]
    assert gpu.allocator_gap_bytes == s["reserved_bytes.all.current"] - s["allocated_bytes.all.current"]
    assert gpu.non_torch_bytes == 500 * MiB and gpu.weights_bytes == 0
    assert by_device[-1].weights_bytes == 128 * 128 * 4 + 128 * 4
    # without NVML the non-PyTorch part is unknown, with the reason
    unknown = {b.device: b for b in measure(view, NVMLSnapshot("no NVML library: x", False, ()))}[0]
    assert unknown.non_torch_bytes is None and any("no NVML library" in n for n in unknown.notes)
    agent.stop()


def test_corrupt_truncated_and_foreign_files(tmp_path):
    foreign = tmp_path / "agent-1-1.ring"
    foreign.write_bytes(b"PK\x03\x04" + bytes(5000))
    with pytest.raises(CollectorError, match="not a memsight agent ring"):
        AgentReader(foreign)
    short = tmp_path / "agent-2-2.ring"
    short.write_bytes(b"MSAGENT1")
    with pytest.raises(CollectorError, match="truncated"):
        AgentReader(short)
    agent = Agent(hz=10, directory=str(tmp_path))
    agent.open()
    agent.tick()
    cut = tmp_path / "agent-3-3.ring"
    cut.write_bytes(open(agent.path, "rb").read()[: fmt.HEADER_SIZE + 10])
    with pytest.raises(CollectorError, match="truncated"):
        AgentReader(cut)
    # a torn slot (a writer killed mid-record) is skipped and counted, not returned
    data = bytearray(open(agent.path, "rb").read())
    fmt.write_u64(data, fmt.HEADER_SIZE, 1)  # record 0's begin marker says "being written"
    torn = tmp_path / "agent-4-4.ring"
    torn.write_bytes(bytes(data))
    result = AgentReader(torn).read_new()
    assert result.records == () and result.torn == 1
    agent.stop()


def test_reader_counts_records_lost_to_wraparound(tmp_path):
    agent = Agent(hz=10, directory=str(tmp_path), fine_capacity=8, coarse_capacity=4)
    agent.open()
    reader = AgentReader(agent.path)
    for _ in range(20):
        agent.tick()
    result = reader.read_new()
    assert len(result.records) == 8 and result.lost == 12
    agent.stop()


CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    import collectors.agent as agent
    agent.start(hz=20, directory={dir!r})
    block = bytearray(200 * 2**20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    print("ready", flush=True)
    time.sleep(60)
""")


def test_second_reader_of_a_live_agent_sees_its_history_then_pid_gone(tmp_path):
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(root=str(REPO_ROOT), dir=str(tmp_path))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        # Each try is a monitor started after the child's records were written. The agent's rate follows
        # its CPU budget, so on a loaded machine five records can take longer than at the nominal 20 Hz.
        deadline = time.monotonic() + 15
        while True:
            time.sleep(0.3)
            monitor = Monitor(hz=5, agent_dir=str(tmp_path), nvml=_no_nvml())
            state = monitor.sample_once()
            (view,) = [v for v in state.agents if v.pid == child.pid]
            if len(view.history) >= 5 or time.monotonic() > deadline:
                break
            monitor.stop()
        assert view.alive and view.status.startswith("CUDA not initialized")
        assert len(view.history) >= 5  # records written before this monitor existed
        assert max(r.rss for r in view.history) > 200 * MiB
    finally:
        child.kill()
        child.wait()
    monitor.sample_agents()
    view = [v for v in monitor.state().agents if v.pid == child.pid][0]
    assert not view.alive and view.status == "exited"
    monitor.stop()


def test_reused_pid_is_detected_by_start_time(tmp_path):
    agent = Agent(hz=10, directory=str(tmp_path))
    agent.open()
    agent.tick()
    reader = AgentReader(agent.path)
    assert reader.process_status() == "alive"
    # the same pid with another start time: copy the file under a name/header claiming an older process
    data = bytearray(open(agent.path, "rb").read())
    data[: fmt.HEADER_SIZE] = fmt.pack_header(
        os.getpid(), reader.start_ticks - 1, 0.0, 10.0, "old", 4096, 8640, 10.0
    )
    old = tmp_path / fmt.ring_file_name(os.getpid(), reader.start_ticks - 1)
    old.write_bytes(bytes(data))
    assert AgentReader(old).process_status() == "pid reused"
    monitor = Monitor(hz=5, agent_dir=str(tmp_path), nvml=_no_nvml())
    state = monitor.sample_once()
    assert [(v.pid, v.start_ticks) for v in state.agents] == [(os.getpid(), reader.start_ticks)]
    monitor.stop()
    agent.stop()


def _no_nvml():
    from collectors.nvml_collector import NVMLCollector

    class Absent:
        def init(self):
            raise ImportError("no pynvml here")

    return NVMLCollector(Absent())


def test_snap_prints_one_line_with_nan_where_unknown(capsys):
    from collectors.agent import snap

    row = snap("probe")
    line = capsys.readouterr().out.strip()
    assert line.startswith("label=probe ") and "alloc=nan" in line and "rss=" in line
    assert row["os_available"] > 0 and row["cuda_total"] != row["cuda_total"]
    assert not torch.cuda.is_initialized()


def test_public_functions_never_raise_into_user_code(tmp_path, capsys):
    import collectors.agent as agent_api

    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the agent directory should be")
    assert agent_api.current() is None
    assert agent_api.start(directory=str(blocked)) is None  # reported, not raised
    assert "memsight agent: start failed" in capsys.readouterr().err
    assert agent_api.current() is None


@needs_shared
def test_nvml_process_lists_are_read_at_most_once_a_second():
    from collectors.nvidia_smi import SmiBackend
    from collectors.nvml_collector import NVMLCollector

    backend = SmiBackend.from_text((SHARED_FIXTURES / "nvidia-smi_gb10_vllm-61383MiB.txt").read_text())
    calls = []
    original = backend.compute_processes
    backend.compute_processes = lambda index: calls.append(index) or original(index)
    now = [100.0]
    collector = NVMLCollector(backend, clock=lambda: now[0])
    for step in range(10):  # 10 samples over 0.9 s: one process read
        now[0] = 100.0 + step * 0.1
        snap = collector.sample()
        assert [p.pid for p in snap.devices[0].processes][:1] == [2283430]
    assert calls == [0]
    now[0] = 101.0
    collector.sample()
    assert calls == [0, 0]


def _run_credit(credit: CpuCredit, loop_cpu_s: float, nominal_s: float, loops: int) -> tuple[float, float]:
    """CPU and wall seconds of `loops` loops that each cost `loop_cpu_s`, scheduled as the agent does."""
    cpu = wall = 0.0
    wait = nominal_s
    for _ in range(loops):
        elapsed = max(nominal_s, wait)
        cpu, wall = cpu + loop_cpu_s, wall + elapsed
        wait = credit.settle(loop_cpu_s, elapsed)
    return cpu, wall


def test_cpu_credit_holds_the_long_run_share_to_the_budget_whatever_a_tick_costs():
    # 100 Hz asked, 0.5% of a core: a 200 us loop (a VM's wake-up + tick) affords 25 Hz, a 20 us one 100 Hz
    costly = CpuCredit(0.005, slowest_wait_s=1.0)
    cpu, wall = _run_credit(costly, 200e-6, 0.01, 10_000)
    assert cpu / wall == pytest.approx(0.005, rel=1e-3)
    assert costly.settle(200e-6, 0.04) == pytest.approx(0.04, rel=1e-6)  # steady state: 1 / 25 Hz
    cheap = CpuCredit(0.005, slowest_wait_s=1.0)
    cpu, wall = _run_credit(cheap, 20e-6, 0.01, 10_000)
    assert wall == pytest.approx(100.0) and cpu / wall == pytest.approx(0.002)  # on schedule, never held
    assert cheap.balance == pytest.approx(0.005)  # saved credit is capped at one second's budget


def test_cpu_credit_never_waits_longer_than_the_heartbeat():
    credit = CpuCredit(0.005, slowest_wait_s=1.0)
    assert credit.settle(0.5, 0.01) == 1.0  # a 0.5 s first walk of a huge model: back within a second
    assert credit.settle(0.0, 1.0) == 1.0  # still in debt (0.5 - 0.005 s): the 1 Hz floor, not silence
    assert credit.balance == pytest.approx(-0.5 + 0.005 * (0.01 + 1.0))  # 0.5 s spent, 1.01 s earned


def test_cpu_budget_stretches_the_period_instead_of_slowing_the_host(tmp_path):
    # A budget no tick can meet (a millionth of a core) must slow the agent, never the host; budget 0 turns
    # the limit off and the agent keeps the asked rate.
    starved = Agent(hz=200, directory=str(tmp_path), cpu_budget=1e-6).start()
    free = Agent(hz=200, directory=str(tmp_path / "free"), cpu_budget=0).start()
    time.sleep(1.0)
    starved_records, free_records = starved._fine_count, free._fine_count  # noqa: SLF001
    starved.stop()
    free.stop()
    assert starved.effective_hz == 1.0  # down to the 1 Hz floor that keeps its heartbeat going
    assert free.effective_hz == 200
    assert starved_records < free_records / 5
    with pytest.raises(ValueError, match="cpu_budget"):
        Agent(hz=10, directory=str(tmp_path), cpu_budget=1.5)
