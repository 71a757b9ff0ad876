"""Machines the plan is checked against: the presets (their figures and sources: planner/presets.py) and
"this" machine read from /proc/meminfo. Capacities are in bytes; bandwidths decimal GB/s."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from planner import limits
from planner.errors import PlannerError
from planner.meminfo import parse_meminfo
from planner.presets import CUSTOM_MACHINE, PRESETS, THIS_MACHINE, machine_names
from planner.units import GiB


@dataclass(frozen=True, slots=True)
class Machine:
    name: str
    label: str  # one line a user reads: what the capacity is and where it comes from
    capacity_bytes: int
    unified: bool  # one pool shared by the OS, CPU processes and the GPU (DGX Spark / GB10)
    os_reserve_bytes: int  # kept back for the OS and everything else on unified memory; 0 on discrete GPUs
    bandwidth_gbs: float | None  # decimal GB/s
    peak_tflops_bf16: float | None  # dense BF16 tensor-core peak, decimal TFLOP/s
    # What vLLM keys its scheduler defaults and kernel workspaces on (torch.cuda.get_device_name/capability).
    device_name: str | None = None
    cuda_capability: tuple[int, int] | None = None


# the presets, from planner/presets.py's plain table (kept apart so `plan --help` lists them cheaply)
MACHINES: Mapping[str, Machine] = MappingProxyType(
    {name: Machine(name=name, **fields) for name, fields in PRESETS.items()}  # type: ignore[arg-type]
)


def read_meminfo(
    path: str | os.PathLike[str] = "/proc/meminfo",
    *,
    needs: tuple[str, ...] = ("MemTotal", "MemAvailable"),
    purpose: str = "size 'this' machine",
) -> dict[str, int]:
    """/proc/meminfo as bytes (the file says kB, which the kernel means as KiB); `needs` are the fields the
    caller reads, `purpose` what it reads them for (said when one is missing)."""
    # bytes first: a saved copy given by --meminfo may be anything, and the kernel writes plain ASCII
    data = limits.read_regular(path, "MAX_MEMINFO_BYTES", PlannerError, "meminfo file")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise PlannerError(f"{path}: binary data, not a copy of /proc/meminfo") from None
    if "\x00" in text:
        raise PlannerError(f"{path}: binary data, not a copy of /proc/meminfo")
    values = parse_meminfo(text)
    for key in ("MemTotal", *needs):
        if key not in values:
            raise PlannerError(f"{path} has no {key} line; cannot {purpose}")
    _check_meminfo(path, values)
    return values


def _check_meminfo(path: str | os.PathLike[str], values: dict[str, int]) -> None:
    """The kernel never writes MemFree or MemAvailable outside [0, MemTotal]: a file that does was edited
    or is not a meminfo, and a check against it would pass by memory the machine does not have."""
    total = values["MemTotal"]
    if total <= 0:
        raise PlannerError(f"{path}: MemTotal {total // 1024} kB: not a /proc/meminfo the kernel wrote")
    for key in ("MemFree", "MemAvailable"):
        value = values.get(key)
        if value is not None and not 0 <= value <= total:
            raise PlannerError(
                f"{path}: {key} {value // 1024} kB is outside 0 .. MemTotal {total // 1024} kB: "
                "not a /proc/meminfo the kernel wrote"
            )


def this_machine(
    *,
    meminfo_path: str | os.PathLike[str] = "/proc/meminfo",
    gpu_total_bytes: int | None = None,
    gpu_name: str | None = None,
    unified: bool | None = None,
    probe_note: str | None = None,
) -> Machine:
    """The machine memsight runs on.

    `gpu_total_bytes` comes from NVML (probed by the CLI, never here: the planner stays stdlib-only). With a
    discrete GPU its total is the capacity and nothing is reserved for the OS. Without one, or on unified
    memory (NVML answers "Not Supported" for the device memory on GB10), the capacity is MemTotal and the
    reserve is what the OS and every other process hold right now (MemTotal - MemAvailable).
    """
    if gpu_total_bytes is not None and not unified:
        if gpu_total_bytes <= 0:
            raise PlannerError(f"GPU total memory must be positive, got {gpu_total_bytes} bytes")
        name = gpu_name or "GPU 0"
        return Machine(
            name=THIS_MACHINE,
            label=f"this machine: {name}, {gpu_total_bytes / GiB:.2f} GiB as NVML reports it",
            capacity_bytes=gpu_total_bytes,
            unified=False,
            os_reserve_bytes=0,
            bandwidth_gbs=None,
            peak_tflops_bf16=None,
        )
    info = read_meminfo(meminfo_path)
    total, available = info["MemTotal"], info["MemAvailable"]
    in_use = max(0, total - available)
    if unified:
        what = f"{gpu_name}, unified memory" if gpu_name else "unified memory"
    else:
        what = f"host RAM, no GPU used ({probe_note})" if probe_note else "host RAM, no GPU used"
    return Machine(
        name=THIS_MACHINE,
        label=(
            f"this machine: {what}; MemTotal {total / GiB:.2f} GiB, reserve = MemTotal - MemAvailable "
            f"= {in_use / GiB:.2f} GiB in use now"
        ),
        capacity_bytes=total,
        unified=True,
        os_reserve_bytes=in_use,
        bandwidth_gbs=None,
        peak_tflops_bf16=None,
    )


def _with_given(label: str, given: str, name: str) -> str:
    """A machine's label with a figure the user gave: beside the preset's own ("... instead"), or alone on a
    custom machine, whose label is only what was given."""
    if name == CUSTOM_MACHINE:
        return f"{label}; {given}" if label else given
    return f"{label}; {given} instead"


def get_machine(
    name: str,
    *,
    capacity_bytes: int | None = None,
    os_reserve_bytes: int | None = None,
    this: Machine | None = None,
) -> Machine:
    """A preset by name (or `this`, already resolved) with the user's capacity / reserve overrides."""
    if name == THIS_MACHINE:
        machine = this if this is not None else this_machine()
    elif name == CUSTOM_MACHINE:
        if capacity_bytes is None:
            raise PlannerError("machine 'custom' needs a capacity (--capacity-gib)")
        machine = Machine(CUSTOM_MACHINE, "", capacity_bytes, False, 0, None, None)
    elif name in MACHINES:
        machine = MACHINES[name]
    else:
        raise PlannerError(f"unknown machine {name!r}; choose one of {', '.join(machine_names())}")
    if capacity_bytes is not None:
        if capacity_bytes <= 0:
            raise PlannerError(f"capacity must be positive, got {capacity_bytes} bytes")
        label = _with_given(machine.label, f"{capacity_bytes / GiB:.2f} GiB capacity given", name)
        machine = replace(machine, label=label, capacity_bytes=capacity_bytes)
    if os_reserve_bytes is not None:
        if os_reserve_bytes < 0:
            raise PlannerError(f"OS reserve must not be negative, got {os_reserve_bytes} bytes")
        # the preset's label names its own reserve ("10 GiB assumed for the OS"): say the given one beside it
        given = f"{os_reserve_bytes / GiB:.2f} GiB for the OS and other processes given"
        machine = replace(
            machine, label=_with_given(machine.label, given, name), os_reserve_bytes=os_reserve_bytes
        )
    if machine.os_reserve_bytes >= machine.capacity_bytes:
        raise PlannerError(
            f"OS reserve ({machine.os_reserve_bytes / GiB:.2f} GiB) leaves nothing of the "
            f"{machine.capacity_bytes / GiB:.2f} GiB capacity"
        )
    return machine
