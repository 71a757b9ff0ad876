"""`memsight plan ... --engine vllm --machine this` (or `--meminfo FILE`): will vLLM start there now?

The rule is planner/engines/vllm/startup.py's (vLLM's own, per version, cited there); this module measures
what it reads: /proc/meminfo (MemTotal, MemFree, MemAvailable) and NVML's device 0 (a discrete GPU's free
and total; on a GB10 NVML says Not Supported and cudaMemGetInfo's free and total are MemFree and
MemTotal). The terms vLLM holds before its KV cache (weights, activation peak, non-torch, CUDA graphs) are
the pool's predictions, which size N for --kv-cache-memory-bytes.
"""

from __future__ import annotations

import argparse
from typing import Any

from planner.engines.vllm.startup import Admission, DeviceMemory, admission, verdict_line
from planner.errors import PlannerError
from planner.machines import MACHINES, THIS_MACHINE, read_meminfo
from planner.units import GiB


def _capability(name: str | None) -> tuple[int, int] | None:
    """A preset's compute capability for a device name NVML gave ("NVIDIA GB10" -> (12, 1))."""
    for machine in MACHINES.values():
        if name and machine.device_name and machine.device_name.lower() in name.lower():
            return machine.cuda_capability
    return None


def measured_device(args: argparse.Namespace, plan: Any, pool: Any) -> tuple[DeviceMemory | None, str]:
    """(what vLLM's check would read, where each figure came from) or (None, why nothing can be checked)."""
    this = plan.inputs.machine == THIS_MACHINE
    if not this and args.meminfo is None:
        return None, "give --machine this (or --meminfo FILE from the machine) to check it against one now"
    source = args.meminfo or "/proc/meminfo"
    info = read_meminfo(
        source, needs=("MemFree", "MemAvailable"), purpose="check vLLM's start-up rule against it"
    )
    gpu = None
    if this:
        from tui.cmd_plan import probe_gpu  # noqa: PLC0415  (NVML, lazily)

        gpu, why = probe_gpu()
        if gpu is None:
            return None, f"no NVIDIA GPU here ({why}): vLLM's CUDA start-up check does not apply"
    unified = plan.machine.unified if gpu is None else gpu["unified"]
    name = gpu["name"] if gpu is not None else plan.machine.device_name
    if not unified and args.meminfo is not None:
        # a discrete GPU's check reads cudaMemGetInfo's free, which no host file holds: refused rather than
        # checked against a figure the file cannot give
        raise PlannerError(
            f"--meminfo gives host memory only; {name or 'a discrete GPU'}'s free memory, which vLLM's "
            "start-up check reads, comes from NVML: run --machine this on that machine, or drop --meminfo"
        )
    if unified:
        device = DeviceMemory(
            total=info["MemTotal"],
            cuda_free=info.get("MemFree"),
            mem_free=info.get("MemFree"),
            mem_available=info["MemAvailable"],
            integrated=True,
            capability=_capability(name) or plan.machine.cuda_capability,
        )
        return device, (
            f"{source}: MemTotal, MemFree, MemAvailable; on {name or 'a unified-memory GPU'} "
            "cudaMemGetInfo's total is MemTotal and its free is MemFree"
        )
    total, where = _device_total(name, pool, gpu)
    device = DeviceMemory(
        total=total,
        cuda_free=gpu["free"],
        mem_free=info.get("MemFree"),
        mem_available=info["MemAvailable"],
        integrated=False,
        capability=_capability(name) or plan.machine.cuda_capability,
    )
    return device, f"NVML device 0 ({name}): free now; total {where}"


def _device_total(name: str | None, pool: Any, gpu: dict[str, Any]) -> tuple[int, str]:
    """cudaMemGetInfo's total: the recorded one for this GPU where memsight holds it, else the pool's."""
    from planner.engines.vllm.overheads import known_device  # noqa: PLC0415

    recorded = known_device(name)
    if recorded is None:
        total = pool.total_bytes if pool.total_bytes is not None else gpu["total"]
        return total, "as the pool above takes it (no recorded mem_get_info total for this GPU)"
    return recorded.total_bytes, f"as vLLM reads it (mem_get_info): {recorded.source}"


def startup_check(args: argparse.Namespace, plan: Any, pool: Any) -> tuple[Admission | None, str] | None:
    """None without --engine vllm; else (the verdict or None, a line saying what was measured or why not)."""
    if pool is None:
        return None
    device, measured = measured_device(args, plan, pool)
    if device is None:
        return None, measured
    non_kv = pool.weights_bytes + pool.activation_bytes + pool.non_torch_bytes + pool.cudagraph_bytes
    verdict = admission(pool.version, pool.engine, args.gpu_memory_utilization, device, non_kv_bytes=non_kv)
    return verdict, measured


def startup_lines(
    startup: tuple[Admission | None, str] | None, pool: Any, meminfo: str | None = None
) -> list[str]:
    """The check as the plan prints it; `meminfo` is the --meminfo file the figures came from, if any."""
    if startup is None:
        return []
    verdict, measured = startup
    where = f"with {meminfo}'s memory" if meminfo is not None else "on this machine now"
    lines = ["", f"  will it start? vLLM's start-up check {where}:"]
    if verdict is None:
        return [*lines, f"    {measured}"]
    lines.append(f"    {verdict_line(verdict)}")
    # a start that passes needs no fix: what is left to say is how large a KV cache the memory allows
    label = "or size the KV cache" if verdict.passes else "fix"
    lines.extend(f"    {label}: {fix}" for fix in verdict.fixes)
    lines.append(f"    measured: {measured}")
    return lines


def startup_to_json(startup: tuple[Admission | None, str]) -> dict[str, Any]:
    verdict, measured = startup
    if verdict is None:
        return {"checked": False, "why": measured}
    return {
        "checked": verdict.checked,
        "version": verdict.version,
        "rule": verdict.rule,
        "reads": verdict.reads,
        "free_bytes": verdict.free,
        "total_bytes": verdict.total,
        "gpu_memory_utilization": verdict.gpu_memory_utilization,
        "requested_bytes": verdict.requested,
        "passes": verdict.passes,
        "margin_bytes": verdict.margin,
        "passing_utilization": verdict.passing_utilization,
        "kv_cache_memory_bytes": verdict.kv_cache_memory_bytes,
        "fixes": list(verdict.fixes),
        "measured": measured,
        "margin_gib": None if verdict.margin is None else round(verdict.margin / GiB, 2),
    }
