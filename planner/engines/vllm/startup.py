"""Will vLLM start? Its start-up admission rule, per version, and what would make a refused start pass.

vLLM V1 (from 0.9.1) refuses to start when the free memory it reads on the device is under what
`gpu_memory_utilization` asks for, before it loads anything ("ValueError: Free memory on device (F/T GiB) on
startup is less than desired GPU memory utilization (u, R GiB)"). Read in the release sdists on PyPI:
* V0 engine, V1 up to 0.9.0: no start-up check (v0.9.0 vllm/v1/worker/gpu_worker.py has none).
* 0.9.1 - 0.11.0: R = T x u (a float), checked in init_device (v0.9.1 gpu_worker.py:135-138, v0.11.0
  :182-185); F = cudaMemGetInfo's free (v0.11.0 vllm/utils/__init__.py:2734), which on a GB10 is MemFree:
  the page cache counts as used.
* 0.11.1 - 0.13.x: the same check (v0.12.0 gpu_worker.py:232-237); F = MemAvailable (psutil's
  available) for compute capabilities (8,7), (11,0), (12,1), "Orin, Thor, Spark" (v0.11.1
  vllm/utils/mem_utils.py:86-102).
* 0.14.0 - 0.19.x: R = ceil(T x u) in request_memory (v0.14.0 vllm/v1/worker/utils.py:253-262); F as above
  (v0.19.1 mem_utils.py:105-122).
* 0.20.0 on: F = MemAvailable on every integrated GPU, torch's is_integrated (vLLM PR 35356; v0.20.0
  mem_utils.py:109-116, v0.24.0 :147-154); request_memory at v0.24.0 utils.py:405-414, v0.33.0 :716-761.

T is cudaMemGetInfo's total in every version (on a GB10 it is MemTotal: torch's "total capacity of
121.69 GiB" is 127,600,748 kB). `--kv-cache-memory-bytes` does not skip the check: request_memory runs in
init_device whatever the KV setting (v0.24.0 gpu_worker.py:341-342; the KV size only replaces the profiled
pool later, 412-430), so a start with it needs a utilization that passes too. vLLM's own advice after a
start (v0.33.0 gpu_worker.py:1012-1046) sizes the KV cache to "fully utilize gpu memory" as F - (weights +
non-torch + activation peak + CUDA graphs) - 150 MiB; N here is that sum with memsight's predicted terms.

Pure arithmetic: bytes inside, no I/O. The caller measures F, MemFree, MemAvailable and T.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from planner.engines.vllm.version import parse_version

GIB = 2**30
REDUNDANCY_BYTES = 150 * 2**20  # vLLM's redundancy_buffer_memory (v0.33.0 gpu_worker.py:1026)
UMA_CAPABILITIES = ((8, 7), (11, 0), (12, 1))  # v0.11.1-0.19.x mem_utils.py: "Orin, Thor, Spark"
DROP_CACHES = "sync; echo 3 | sudo tee /proc/sys/vm/drop_caches"


@dataclass(frozen=True, slots=True)
class DeviceMemory:
    """What the machine says now. `cuda_free`/`total` as cudaMemGetInfo reports them (an agent's mem_get_info,
    NVML on a discrete GPU, MemFree/MemTotal on a GB10 where they are the same figures)."""

    total: int
    cuda_free: int | None  # cudaMemGetInfo free (None: not measured)
    mem_free: int | None = None  # /proc/meminfo MemFree
    mem_available: int | None = None  # /proc/meminfo MemAvailable (what psutil's available reads)
    integrated: bool = False  # torch's is_integrated (GB10, Thor, Orin; GH200 by vLLM PR 35356's account)
    capability: tuple[int, int] | None = None  # CUDA compute capability (GB10: 12.1)


@dataclass(frozen=True, slots=True)
class Admission:
    """The start-up check for one version on one machine now, and what would make it pass."""

    version: str
    checked: bool  # False: this version has no start-up check
    reads: str  # which figure the version compares ("MemAvailable", "cudaMemGetInfo free (MemFree)", ...)
    free: int | None  # that figure (None: not measured here)
    requested: int | None
    gpu_memory_utilization: float
    total: int
    rule: str  # the source it follows, file:line
    passes: bool | None  # None: the figure it reads is not measured
    fixes: tuple[str, ...] = ()  # what would make a refused start pass (or a tight one keep passing)
    passing_utilization: float | None = None  # the largest two-decimal utilization that passes now
    kv_cache_memory_bytes: int | None = None  # N for --kv-cache-memory-bytes (with passing_utilization)

    @property
    def margin(self) -> int | None:
        if self.free is None or self.requested is None:
            return None
        return self.free - self.requested


def reads_mem_available(ver: tuple[int, int, int], device: DeviceMemory) -> bool:
    """Whether this version compares MemAvailable (else cudaMemGetInfo's free) on this device."""
    if ver >= (0, 20, 0):
        return device.integrated
    if ver >= (0, 11, 1):
        return device.capability in UMA_CAPABILITIES
    return False


def _rule(ver: tuple[int, int, int]) -> str:
    if ver >= (0, 20, 0):
        return "v0.20.0+ v1/worker/utils.py request_memory (ceil), mem_utils.py is_integrated (vLLM PR 35356)"
    if ver >= (0, 14, 0):
        return "v0.14.0-0.19.x v1/worker/utils.py request_memory (ceil), mem_utils.py capability list"
    if ver >= (0, 11, 1):
        return "v0.11.1-0.13.x v1/worker/gpu_worker.py init_device (T x u), mem_utils.py capability list"
    return "v0.9.1-0.11.0 v1/worker/gpu_worker.py init_device (T x u), free = cudaMemGetInfo"


def requested_bytes(version: str, total: int, utilization: float) -> int:
    """What the version asks for: ceil(T x u) from 0.14.0, T x u (a float vLLM compares as is) before;
    the float is rounded up here, which decides the same comparisons against a whole number of bytes."""
    return math.ceil(total * utilization)


MAX_UTILIZATION_HUNDREDTHS = 100  # vLLM takes --gpu-memory-utilization in (0, 1]


def largest_passing_utilization(free: int, total: int) -> float:
    """The largest utilization in hundredths whose request fits in `free` (0.0 when none does), at most 1.00
    even where the free figure read is above the total (a discrete GPU's NVML free against a recorded
    cudaMemGetInfo total): vLLM refuses a utilization above 1."""
    hundredths = min(free * 100 // total, MAX_UTILIZATION_HUNDREDTHS)
    while hundredths > 0 and math.ceil(total * hundredths / 100) > free:
        hundredths -= 1
    return hundredths / 100


def admission(
    version: str,
    engine: str,
    gpu_memory_utilization: float,
    device: DeviceMemory,
    non_kv_bytes: int | None = None,
) -> Admission:
    """The verdict of the version's start-up check, by how much, and the fixes; `non_kv_bytes` (weights +
    non-torch + activation peak + CUDA graphs, predicted) sizes N for --kv-cache-memory-bytes."""
    ver = parse_version(version)
    total = device.total
    if engine.upper() != "V1" or ver < (0, 9, 1):
        return Admission(
            version,
            False,
            "",
            None,
            None,
            gpu_memory_utilization,
            total,
            f"vLLM {version} {engine.upper()}: no start-up free-memory check",
            True,
        )
    uses_available = reads_mem_available(ver, device)
    if uses_available:
        reads, free = "MemAvailable", device.mem_available
    elif device.integrated:
        reads, free = "cudaMemGetInfo free (MemFree here)", device.cuda_free
        free = free if free is not None else device.mem_free
    else:
        reads, free = "cudaMemGetInfo free", device.cuda_free
    requested = requested_bytes(version, total, gpu_memory_utilization)
    verdict = Admission(
        version,
        True,
        reads,
        free,
        requested,
        gpu_memory_utilization,
        total,
        _rule(ver),
        None if free is None else free >= requested,
    )
    if free is None:
        return verdict
    return _with_fixes(verdict, device, uses_available, non_kv_bytes)


_NUM = r"(\d+(?:\.\d+)?)"
PRINTED = re.compile(
    rf"Free memory on device(?: \S+)? \({_NUM}/{_NUM} GiB\)(?: on startup(?: is less than desired GPU memory "
    rf"utilization|\. Desired GPU memory utilization is) \({_NUM}, {_NUM} GiB\))?"
)


@dataclass(frozen=True, slots=True)
class PrintedCheck:
    """vLLM's own account of its start-up check: the refusal (ValueError) or the post-start summary line."""

    free: int  # bytes, from the two-decimal GiB it printed
    total: int
    utilization: float | None  # None: the line was cut before it
    requested: int | None
    refused: bool


def read_printed(text: str) -> PrintedCheck | None:
    """The first "Free memory on device (F/T GiB) ..." in `text`, refusal or summary; None when absent."""
    m = PRINTED.search(text)
    if m is None:
        return None
    free, total, util, requested = m.groups()
    return PrintedCheck(
        free=round(float(free) * GIB),
        total=round(float(total) * GIB),
        utilization=float(util) if util is not None else None,
        requested=round(float(requested) * GIB) if requested is not None else None,
        refused="is less than desired" in m.group(0),
    )


def _g(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def _with_fixes(v: Admission, device: DeviceMemory, uses_available: bool, non_kv: int | None) -> Admission:
    from dataclasses import replace  # noqa: PLC0415

    fixes = []
    u_pass = largest_passing_utilization(v.free, v.total)
    if not v.passes:
        if u_pass > 0:
            asked = _g(math.ceil(v.total * u_pass))
            fixes.append(
                f"--gpu-memory-utilization {u_pass:.2f} passes now ({asked} requested of {_g(v.free)} "
                f"{v.reads})"
            )
        else:
            least = _g(math.ceil(v.total / 100))
            fixes.append(
                f"no --gpu-memory-utilization passes: even 0.01 asks for {least}, more than the "
                f"{_g(v.free)} {v.reads}; what holds the memory now has to give it back first"
            )
        if device.integrated and not uses_available and device.mem_available is not None:
            fixes.append(_page_cache_fix(device.mem_available - v.free, v.requested - v.free))
        elif device.integrated and uses_available:
            fixes.append("dropping the page cache gains nothing here: MemAvailable already counts it as free")
    kv = None
    if non_kv is not None and u_pass > 0:
        kv = v.free - non_kv - REDUNDANCY_BYTES
        terms = f"the predicted weights, activation peak, non-torch and CUDA graphs ({_g(non_kv)})"
        if kv > 0:
            fixes.append(
                f"--kv-cache-memory-bytes {kv} ({_g(kv)}: the {v.reads} {_g(v.free)} less {terms} and "
                f"vLLM's 150 MiB) with --gpu-memory-utilization {u_pass:.2f}: the check still runs on "
                "the utilization"
            )
        else:
            fixes.append(f"no KV cache fits: {terms} already need more than the {_g(v.free)} {v.reads}")
            kv = None
    return replace(v, fixes=tuple(fixes), passing_utilization=u_pass or None, kv_cache_memory_bytes=kv)


def _page_cache_fix(reclaimable: int, short: int) -> str:
    """The version reads MemFree on a unified machine: would giving back the page cache cover the gap?"""
    if reclaimable < short:
        return f"dropping the page cache gives back about {_g(reclaimable)}: not the {_g(short)} missing"
    return (
        f"the page cache the kernel can give back ({_g(reclaimable)}, MemAvailable - MemFree) covers the "
        f"{_g(short)} missing: drop it before starting ({DROP_CACHES}), or use vLLM 0.11.1 or later, which "
        "reads MemAvailable on a GB10"
    )


def verdict_line(v: Admission) -> str:
    """One line: 'vLLM 0.24.0 start-up check: FAILS by 3.45 GiB: reads MemAvailable 56.33 GiB < ...'."""
    if not v.checked:
        return f"vLLM {v.version} start-up check: none ({v.rule})"
    if v.passes is None:
        return f"vLLM {v.version} start-up check: reads {v.reads}, not measured here ({v.rule})"
    word = "passes" if v.passes else "FAILS"
    by = abs(v.margin)
    return (
        f"vLLM {v.version} start-up check: {word} by {_g(by)}: reads {v.reads} {_g(v.free)} "
        f"{'>=' if v.passes else '<'} requested {v.gpu_memory_utilization} x {_g(v.total)} = "
        f"{_g(v.requested)} ({v.rule})"
    )
