"""The Live screen's line about a vLLM start under `memsight run`: will it start, what its profile cost.

* Before vLLM has loaded its weights: its own start-up check (planner/engines/vllm/startup.py) against
  what the monitor measures now (the engine's agent's mem_get_info where CUDA is up, NVML,
  /proc/meminfo), with the fix when it would fail. After a refusal ("Free memory on device ... is less
  than desired"): vLLM's own figures, and the fix.
* After start-up: when the non-torch memory vLLM counted is far above what the version normally counts
  (planner predicted_non_torch), what grew on the host during its profile run, from the samples memsight took
  then: the page cache (a version that reads MemFree counts it as used) and the engine's resident memory (a
  torch.compile / Triton compiler heap), and how far MemAvailable fell. The profile run is the time between
  the log saying the weights were loaded and the log sizing the KV cache, as memsight saw the lines arrive.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

from collectors.snapshots import MonitorState
from planner.engines.vllm.log import STAGES
from planner.engines.vllm.overheads import Device, device_total, predicted_non_torch
from planner.engines.vllm.startup import (
    DeviceMemory,
    admission,
    read_printed,
    reads_mem_available,
    verdict_line,
)
from planner.engines.vllm.version import default_engine, default_gpu_memory_utilization, parse_version
from planner.errors import PlannerError

GIB = 2**30
FAR_ABOVE_BYTES = GIB  # logged non-torch this much over the prediction (and over twice it) is "far above"
KEEP_SAMPLES = 3600  # about 30 minutes of samples at 2 Hz: a start-up fits


@dataclass(frozen=True, slots=True)
class HostSample:
    t: float
    page_cache: int | None
    mem_available: int
    engine_rss: int  # the vLLM processes' resident memory (what a CPU-side compiler heap grows)


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def device_memory(state: MonitorState, pids: frozenset[int]) -> DeviceMemory | None:
    """What vLLM's check reads, as the monitor measures it: the engine's agent's mem_get_info when its CUDA
    is up, else NVML (discrete) or /proc/meminfo (unified: cudaMemGetInfo's free and total are MemFree and
    MemTotal on a GB10)."""
    cuda = [r for a in state.agents if a.pid in pids for r in a.latest if r.cuda_free is not None]
    integrated = next((r.is_integrated for r in cuda if r.is_integrated is not None), None)
    unified = state.unified if integrated is None else integrated
    capability = (12, 1) if any("GB10" in d.name for d in state.nvml.devices) else None
    os_snap = state.os
    if unified and os_snap is not None:
        return DeviceMemory(
            total=cuda[0].cuda_total if cuda and cuda[0].cuda_total else os_snap.mem_total,
            cuda_free=cuda[0].cuda_free if cuda else os_snap.mem_free,
            mem_free=os_snap.mem_free,
            mem_available=os_snap.mem_available,
            integrated=True,
            capability=capability,
        )
    if cuda and cuda[0].cuda_total:
        return DeviceMemory(total=cuda[0].cuda_total, cuda_free=cuda[0].cuda_free)
    devices = [d for d in state.nvml.devices if d.free is not None and d.total is not None]
    if devices:
        d = devices[0]
        return DeviceMemory(total=d.total - (d.reserved or 0), cuda_free=d.free)
    return None


class StartupWatch:
    """Follows one vLLM start: when each stage of its log first showed, and the host samples around them."""

    def __init__(self) -> None:
        self.stage_t: dict[str, float] = {}
        self.samples: deque[HostSample] = deque(maxlen=KEEP_SAMPLES)

    def observe(self, log, state: MonitorState, pids: frozenset[int], now: float) -> None:
        if log is not None and log.is_vllm:
            for stage in STAGES[: STAGES.index(log.stage) + 1]:
                self.stage_t.setdefault(stage, now)
        os_snap = state.os
        if os_snap is None or (self.samples and self.samples[-1].t >= os_snap.t):
            return
        pool = state.pool
        rss = sum(p.rss for p in os_snap.processes if p.pid in pids)
        page_cache = pool.page_cache if pool is not None else None
        self.samples.append(HostSample(os_snap.t, page_cache, os_snap.mem_available, rss))

    def line(self, log, state: MonitorState, pids: frozenset[int], hints: dict[str, str]) -> str:
        if log is None or not log.is_vllm:
            return ""
        version = log.version or hints.get("version")
        printed = read_printed(log.error) if log.error else None
        if not version:
            if printed is not None and printed.refused:
                return (
                    f"vLLM refused to start: it read {_gib(printed.free)} free of {_gib(printed.total)} "
                    "(its log names no version: --vllm-version V says which rule and what to change)"
                )
            return "vLLM start-up check: the log has not said its version yet (--vllm-version V)"
        try:
            ver = parse_version(version)
        except PlannerError as exc:
            return f"vLLM start-up check: {exc}"
        engine = log.engine or default_engine(ver)
        if printed is not None and printed.refused:
            return refusal_line(version, engine, printed, device_memory(state, pids))
        if STAGES.index(log.stage) < STAGES.index("weights"):
            device = device_memory(state, pids)
            if device is None:
                return f"vLLM {version} start-up check: nothing measured to check it against yet"
            utilization = float(log.setting("gpu_memory_utilization") or default_gpu_memory_utilization(ver))
            verdict = admission(version, engine, utilization, device)
            fixes = f" · fix: {verdict.fixes[0]}" if verdict.fixes and not verdict.passes else ""
            return "will it start? " + verdict_line(verdict) + fixes
        return self.profile_line(log, version, engine, state)

    def profile_line(self, log, version: str, engine: str, state: MonitorState) -> str:
        """After the profile run: what grew on the host while vLLM measured, when its non-torch is high."""
        logged = _logged_non_torch(log)
        tp = int(log.setting("tensor_parallel_size") or 1)
        pp = int(log.setting("pipeline_parallel_size") or 1)
        device = _measured_device(state)
        predicted = predicted_non_torch(version, engine, tp * pp, tp=tp, device=device).bytes
        if logged is None or logged - predicted <= max(FAR_ABOVE_BYTES, predicted):
            return ""
        start, end = self.stage_t.get("weights"), self.stage_t.get("profiling") or self.stage_t.get("pool")
        head = (
            f"vLLM counted {_gib(logged)} as non-torch memory, {_gib(logged - predicted)} above the "
            f"{_gib(predicted)} vLLM {version} normally counts"
        )
        window = [s for s in self.samples if start is not None and end is not None and start < s.t <= end]
        before = [s for s in self.samples if start is not None and s.t <= start]
        if not window or not before:
            return head + ": memsight has no samples from its profile run"
        base = before[-1]
        grew = [f"during its profile run ({end - start:.0f} s, {len(window)} samples)"]
        if base.page_cache is not None:
            cache = max(s.page_cache for s in window if s.page_cache is not None) - base.page_cache
            grew.append(f"the page cache grew {_gib(cache)}")
        heap = max(s.engine_rss for s in window) - base.engine_rss
        grew.append(f"the engine's resident memory {_gib(heap)} (a compiler heap: torch.compile, Triton)")
        grew.append(f"MemAvailable fell {_gib(base.mem_available - min(s.mem_available for s in window))}")
        return f"{head}: {', '.join(grew)}; vLLM took that from its KV cache"


def _measured_device(state: MonitorState) -> Device | None:
    """The GPU NVML names, as the planner's table knows it (its resident threads size the non-torch part
    vLLM counts); None where NVML names none or the table lacks it, and the prediction says so."""
    if not state.nvml.devices:
        return None
    try:
        return device_total(state.nvml.devices[0].name)
    except PlannerError:
        return None


def _logged_non_torch(log) -> int | None:
    """The non-torch bytes vLLM logged, or the part of its consumed memory that is not the weights."""
    figure = log.first("non_torch")
    if figure is not None:
        return round(figure.value * GIB)
    consumed, weights = log.first("consumed"), log.first("weights")
    if consumed is not None and weights is not None and weights.unit == "GiB":
        return round((consumed.value - weights.value) * GIB)
    return None


def refusal_line(version: str, engine: str, printed, measured: DeviceMemory | None) -> str:
    """vLLM refused to start: its own figures, and the fix computed from them (what it read is `printed.free`:
    MemAvailable or cudaMemGetInfo's free, whichever the version reads on this device)."""
    device = measured or DeviceMemory(total=printed.total, cuda_free=printed.free)
    if reads_mem_available(parse_version(version), device):
        device = replace(device, total=printed.total, mem_available=printed.free)
    else:
        device = replace(device, total=printed.total, cuda_free=printed.free)
    utilization = printed.utilization or default_gpu_memory_utilization(parse_version(version))
    verdict = admission(version, engine, utilization, device)
    fixes = " · ".join(verdict.fixes[:2])
    return (
        f"vLLM {version} refused to start: it read {_gib(printed.free)} free of {_gib(printed.total)} "
        f"({verdict.reads}) < {_gib(verdict.requested)} requested" + (f" · fix: {fixes}" if fixes else "")
    )
