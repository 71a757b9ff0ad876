"""Fixed MonitorStates for deterministic TUI tests and snapshots (no clock, no hostname, no live /proc).

`gb10_state()` is shaped after the real GB10 recording in ../shared/fixtures/ nvidia-
smi_gb10_vllm-50408MiB.txt and free-h_gb10_vllm-50408MiB.txt (NVML memory "Not Supported", Xorg 179
MiB and gnome-shell 48 MiB on the GPU, 119 GiB MemTotal, 58 GiB available), with one PyTorch agent
serving Llama 3.1 8B in BF16: the figures an agent would report (tracked weights = the checkpoint's
16,060,522,496 bytes; 8 users x 8192 tokens x 128 KiB of KV). `bare_state()` is a machine with no
GPU, no NVML and no agent.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from collectors.snapshots import (
    AgentRecord,
    AgentView,
    Alert,
    DeviceInfo,
    GpuProcess,
    MeasuredBuckets,
    MonitorState,
    NVMLSnapshot,
    OSSnapshot,
    ProcessInfo,
)

GIB = 2**30
MIB = 2**20
KIB = 2**10

T0 = 1000.0  # an arbitrary, fixed origin: snapshots never see the wall clock
MEM_TOTAL = 124_545_236 * KIB  # "119Gi" in free -h
MEM_AVAILABLE = 60_817_408 * KIB  # "58Gi"
WEIGHTS = 16_060_522_496  # Llama 3.1 8B BF16: 8,030,261,248 parameters x 2 bytes, tracked by the agent
KV = 8 * 8192 * 131_072  # 8 users x 8192 tokens x (32 layers x 2 x 8 heads x 128 x 2 bytes)
ALLOCATED = WEIGHTS + KV + 310 * MIB  # + untracked live tensors
RESERVED = ALLOCATED + 2_300 * MIB  # the caching allocator's gap
NON_TORCH = 870 * MIB  # CUDA context, cuBLAS workspace
AGENT_PID = 2_590_604


def _processes(extra_growth: int = 0) -> tuple[ProcessInfo, ...]:
    return (
        ProcessInfo(
            AGENT_PID,
            "python",
            "python serve.py --model llama-3.1-8b",
            "lab",
            31_402 * MIB,
            412 * MIB + extra_growth,
            False,
            RESERVED + NON_TORCH,
        ),
        ProcessInfo(
            4_411, "chrome", "/opt/google/chrome/chrome", "lab", 2_210 * MIB, 2_600 * MIB, True, None
        ),
        ProcessInfo(2_804, "Xorg", "/usr/lib/xorg/Xorg", "root", 301 * MIB, 0, False, 179 * MIB),
        ProcessInfo(3_060, "gnome-shell", "/usr/bin/gnome-shell", "lab", 512 * MIB, 1 * MIB, False, 48 * MIB),
        ProcessInfo(1_077, "dockerd", "/usr/bin/dockerd -H fd://", "root", 97 * MIB, 0, False, None),
        ProcessInfo(5_120, "jupyter-lab", "jupyter-lab --no-browser", "lab", 1_480 * MIB, None, True, None),
    )


def _record(t: float, allocated: int, reserved: int) -> AgentRecord:
    return AgentRecord(
        t=t,
        device=0,
        cuda_state="ok",
        allocated=allocated,
        reserved=reserved,
        peak_allocated=allocated + 640 * MIB,
        active=allocated,
        inactive_split=300 * MIB,
        alloc_retries=0,
        num_ooms=0,
        segments=211,
        large_pool_reserved=reserved - 64 * MIB,
        small_pool_reserved=64 * MIB,
        cuda_free=None,
        cuda_total=None,
        is_integrated=True,
        rss=31_402 * MIB,
        weights_bytes=WEIGHTS,
        kv_bytes=KV,
        step_index=42,
        step_label="decode",
        step_t=t,
        tick_cost_s=0.0002,
    )


def gb10_state(t: float = T0 + 60.0) -> MonitorState:
    gpu = DeviceInfo(
        index=0,
        name="NVIDIA GB10",
        uuid="GPU-fixed",
        total=None,
        reserved=None,
        used=None,
        free=None,
        unified=True,
        utilization_gpu=0.0,
        processes=(
            GpuProcess(2_804, 179 * MIB, "graphics"),
            GpuProcess(3_060, 48 * MIB, "graphics"),
            GpuProcess(AGENT_PID, RESERVED + NON_TORCH, "compute"),
        ),
        unsupported=("memory.total", "memory.used", "memory.free"),
    )
    times = tuple(T0 + 2.0 * k for k in range(31))
    # allocated climbs while the KV fills, reserved follows in allocator-sized steps: a growing gap
    allocated = tuple(WEIGHTS + KV * k // 30 + 310 * MIB for k in range(31))
    reserved = tuple(a + (2_300 * MIB * k) // 30 for k, a in enumerate(allocated))
    gap = tuple(r - a for r, a in zip(reserved, allocated, strict=True))
    history = {
        "allocated": (times, allocated),
        "reserved": (times, reserved),
        "gap": (times, gap),
        "available": (times, tuple(MEM_AVAILABLE for _ in times)),
    }
    agent = AgentView(
        pid=AGENT_PID,
        start_ticks=123_456,
        cmdline="python serve.py --model llama-3.1-8b",
        path="/run/user/1000/memsight/agent-2590604-123456.ring",
        status="ok",
        alive=True,
        latest=(_record(t, ALLOCATED, RESERVED),),
        history=(),
        hz=2.0,
    )
    buckets = MeasuredBuckets(
        pid=AGENT_PID,
        device=0,
        weights_bytes=WEIGHTS,
        kv_bytes=KV,
        activations_bytes=640 * MIB,
        allocator_gap_bytes=RESERVED - ALLOCATED,
        non_torch_bytes=NON_TORCH,
        other_allocated_bytes=310 * MIB,
        allocated=ALLOCATED,
        reserved=RESERVED,
        peak_allocated=ALLOCATED + 640 * MIB,
        driver_used_bytes=RESERVED + NON_TORCH,
        step_label="decode",
    )
    alerts = (
        Alert(T0 + 12.0, "new_process", "warning", "new process pid 4411 (chrome) holds 2.16 GiB", pid=4_411),
        Alert(T0 + 30.0, "process_growth", "critical", "pid 4411 (chrome) grew 2.54 GiB in 30 s", pid=4_411),
        Alert(
            T0 + 58.0,
            "fragmentation",
            "warning",
            "cuda:0 pid 2590604: gap 2.25 GiB is 9% of reserved 25.27 GiB",
            pid=AGENT_PID,
            device=0,
        ),
    )
    os_snap = OSSnapshot(
        t=t,
        mem_total=MEM_TOTAL,
        mem_available=MEM_AVAILABLE,
        cached=37 * GIB,
        shmem=88 * MIB,
        swap_total=15 * GIB,
        swap_free=15 * GIB - 747 * MIB,
        psi_some_avg10=0.0,
        psi_full_avg10=0.0,
        oom_kill=0,
        processes=_processes(),
    )
    return MonitorState(
        t=t,
        os=os_snap,
        nvml=NVMLSnapshot(status="ok", available=True, devices=(gpu,), t=t, driver_version="580.126.09"),
        agents=(agent,),
        buckets=(buckets,),
        alerts=alerts,
        unified=True,
        headroom_bytes=MEM_AVAILABLE,
        headroom_total_bytes=MEM_TOTAL,
        headroom_source="MemAvailable",
        history=MappingProxyType(history),
    )


def bare_state(t: float = T0) -> MonitorState:
    """No GPU, no NVML library, no agent: only /proc."""
    os_snap = OSSnapshot(
        t=t,
        mem_total=16 * GIB,
        mem_available=11 * GIB,
        cached=3 * GIB,
        shmem=64 * MIB,
        swap_total=0,
        swap_free=0,
        psi_some_avg10=None,
        psi_full_avg10=None,
        oom_kill=None,
        processes=(ProcessInfo(321, "python", "python -m http.server", "dev", 48 * MIB, 0, False, None),),
    )
    return MonitorState(
        t=t,
        os=os_snap,
        nvml=NVMLSnapshot(status="no NVML library: libnvidia-ml.so.1 not found", available=False, devices=()),
        agents=(),
        buckets=(),
        alerts=(),
        unified=False,
        headroom_bytes=11 * GIB,
        headroom_total_bytes=os_snap.mem_total,
        headroom_source="MemAvailable",
        history=MappingProxyType({}),
    )


class FixedMonitor:
    """A monitor whose state is whatever the test sets: the app's start/stop/state interface, no threads."""

    def __init__(self, state: MonitorState) -> None:
        self.current = state
        self.started = 0
        self.stopped = 0

    def start(self) -> None:
        self.started += 1

    def stop(self) -> None:
        self.stopped += 1

    def state(self) -> MonitorState:
        return self.current


H100_TOTAL = 81_559 * MIB  # nvidia-smi's total for an H100 80GB HBM3 (../shared/fixtures/nvidia-smi_h100-*)


def two_rank_state(t: float = T0 + 30.0) -> MonitorState:
    """Two discrete GPUs, one agent (tensor-parallel rank) on each; rank 1 holds more (the busiest)."""
    devices = []
    agents = []
    buckets = []
    for rank, (pid, extra) in enumerate(((7_001, 0), (7_002, 3 * GIB))):
        weights = WEIGHTS // 2
        kv = KV // 2 + extra
        allocated = weights + kv + 100 * MIB
        reserved = allocated + 900 * MIB
        used = reserved + NON_TORCH
        devices.append(
            DeviceInfo(
                index=rank,
                name="NVIDIA H100 80GB HBM3",
                uuid=f"GPU-{rank}",
                total=H100_TOTAL,
                reserved=None,
                used=used,
                free=H100_TOTAL - used,
                unified=False,
                utilization_gpu=50.0,
                processes=(GpuProcess(pid, used, "compute"),),
                unsupported=(),
            )
        )
        record = replace(_record(t, allocated, reserved), device=rank, weights_bytes=weights, kv_bytes=kv)
        agents.append(
            AgentView(
                pid=pid,
                start_ticks=1_000 + rank,
                cmdline=f"torchrun worker rank {rank}",
                path=f"/run/user/1000/memsight/agent-{pid}.ring",
                status="ok",
                alive=True,
                latest=(record,),
                history=(),
                hz=2.0,
            )
        )
        buckets.append(
            MeasuredBuckets(
                pid=pid,
                device=rank,
                weights_bytes=weights,
                kv_bytes=kv,
                activations_bytes=0,
                allocator_gap_bytes=reserved - allocated,
                non_torch_bytes=NON_TORCH,
                other_allocated_bytes=100 * MIB,
                allocated=allocated,
                reserved=reserved,
                peak_allocated=allocated,
                driver_used_bytes=used,
            )
        )
    os_snap = OSSnapshot(
        t=t,
        mem_total=2_000 * GIB,
        mem_available=1_900 * GIB,
        cached=50 * GIB,
        shmem=GIB,
        swap_total=0,
        swap_free=0,
        psi_some_avg10=None,
        psi_full_avg10=None,
        oom_kill=0,
        processes=(),
    )
    return MonitorState(
        t=t,
        os=os_snap,
        nvml=NVMLSnapshot(
            status="ok", available=True, devices=tuple(devices), t=t, driver_version="565.57.01"
        ),
        agents=tuple(agents),
        buckets=tuple(buckets),
        alerts=(),
        unified=False,
        headroom_bytes=min(d.free for d in devices),
        headroom_total_bytes=min(devices, key=lambda d: d.free).total,
        headroom_source="device free (NVML)",
        history=MappingProxyType({}),
    )
