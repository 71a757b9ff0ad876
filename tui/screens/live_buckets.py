"""The Live screen's bucket comparisons, from a MonitorState (collectors) and Plans (planner).

The pools it draws (pools, PoolCapacity), each pool's measured buckets (measured_segments,
other_processes_bytes) over its planned ones (planned_segments, plan_label), one comparison per pool or per
agent process in it (comparison_groups, bucket_comparisons), the headroom gauge (headroom), and the Plan
screen's machine bars (machine_bar). The notes under a comparison come from tui/screens/plan_sources.py; the
vLLM process's own comparison is tui/screens/vllm_view.py's.

Pure: the same state and plans always give the same values (no clock, no hostname, no /proc), so snapshot
tests are deterministic.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping
from dataclasses import dataclass

from collectors.alerts import AlertOptions
from collectors.snapshots import DeviceInfo, MeasuredBuckets, MonitorState
from tui.screens.plan_sources import PlanSource, agent_notes, phase_line, weights_check
from tui.widgets.data import BucketComparison, HeadroomData, MachineBar, Segment
from tui.widgets.fmt import size


@dataclass(frozen=True, slots=True)
class PoolCapacity:
    """What one measured pool (a device, or the unified pool) holds, for planning against it."""

    key: str  # "gpu0", "unified", "host"
    index: int  # CUDA/NVML device index; -1 for the host pool
    title: str
    capacity_bytes: int | None
    unified: bool


def pools(state: MonitorState) -> tuple[PoolCapacity, ...]:
    """The pools the Live screen draws: every discrete device, or the one unified pool, or host RAM."""
    devices = state.nvml.devices if state.nvml.available else ()
    discrete = [d for d in devices if not d.unified]
    mem_total = state.os.mem_total if state.os else None
    if state.unified or (devices and not discrete):
        name = devices[0].name if devices else "unified memory"
        return (PoolCapacity("unified", 0, f"{name} · one unified pool (MemTotal)", mem_total, True),)
    if discrete:
        return tuple(
            PoolCapacity(f"gpu{d.index}", d.index, f"GPU {d.index} · {d.name}", d.total, False)
            for d in discrete
        )
    where = "recorded machine" if state.replay else "this machine"
    return (PoolCapacity("host", -1, f"{where} · host RAM (no GPU)", mem_total, True),)


def _sum(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _buckets_for(state: MonitorState, pool: PoolCapacity) -> list[MeasuredBuckets]:
    if pool.index < 0:
        return [b for b in state.buckets if b.device < 0]
    if pool.unified:
        return [b for b in state.buckets if b.device >= 0]
    return [b for b in state.buckets if b.device == pool.index]


def _host_rss(state: MonitorState, pid: int) -> int | None:
    for view in state.agents:
        if view.pid == pid:
            return next((r.rss for r in view.latest if r.device < 0 and r.rss is not None), None)
    return None


def _process_held(b: MeasuredBuckets) -> int | None:
    """What the driver sees this agent hold on the device; reserved + non-PyTorch when NVML does not say."""
    if b.driver_used_bytes is not None:
        return b.driver_used_bytes
    if b.reserved is None:
        return None
    return b.reserved + (b.non_torch_bytes or 0)


def measured_segments(
    state: MonitorState, pool: PoolCapacity, pid: int | None = None
) -> tuple[tuple[Segment, ...], str]:
    """Measured buckets of one pool (of one agent's process when `pid` is given), in MEASURED_KEYS order, and
    one line on what is missing."""
    buckets = [b for b in _buckets_for(state, pool) if pid is None or b.pid == pid]
    missing: list[str] = []
    weights = _sum([b.weights_bytes for b in buckets])
    kv = _sum([b.kv_bytes for b in buckets])
    untracked = _sum([b.other_allocated_bytes for b in buckets])
    activations = _sum([b.activations_bytes for b in buckets])
    gap = _sum([b.allocator_gap_bytes for b in buckets])
    non_torch = _sum([b.non_torch_bytes for b in buckets])
    if not buckets:
        missing.append("no memsight agent attached: weights/KV/activations/gap unknown (memsight run -- CMD)")
    elif weights is None or kv is None:
        where = "the rest of the process" if pool.index < 0 else "untracked tensors"
        missing.append(f"agent tracks no model/KV: their bytes count as {where}")
    if pool.unified:
        free, other = _unified_free_and_other(state, pool, missing)
    else:
        device = _device(state, pool.index)
        free = device.free if device else None
        used = device.used if device else None
        other = None if used is None else max(0, used - _held(state, pool, buckets))
        if device is not None and device.unsupported:
            missing.append(f"NVML: not supported: {', '.join(device.unsupported)}")
    if not state.nvml.available:
        missing.append(f"no GPU data: {state.nvml.status}")
    missing[:0] = state.input_warnings.values()  # bad input skipped (counted) first: the line is cut short
    if pool.index < 0:  # host RAM: no allocator gap, no non-PyTorch part to measure (CUDA's), no row for them
        rest = _host_rest(state, buckets, weights, kv)
        head = (Segment("process", rest), Segment("activations", activations))
    else:
        head = (
            Segment("tensors", untracked),
            Segment("activations", activations),
            Segment("gap", gap),
            Segment("nonpytorch", non_torch),
        )
    segments = (
        Segment("other", other),
        Segment("weights", weights),
        Segment("kv", kv),
        *head,
        Segment("free", free),
    )
    return segments, "; ".join(missing)


def _unified_free_and_other(
    state: MonitorState, pool: PoolCapacity, missing: list[str]
) -> tuple[int | None, int | None]:
    """(free, other) of a unified pool or host RAM: MemAvailable and other_processes_bytes; neither without a
    /proc/meminfo sample, which `missing` then says."""
    if state.os is None:
        missing.append("no /proc/meminfo sample")
        return None, None
    return state.os.mem_available, other_processes_bytes(state, pool)


def _host_rest(
    state: MonitorState, buckets: list[MeasuredBuckets], weights: int | None, kv: int | None
) -> int | None:
    """A CPU-only program is shown as itself: its RSS is its total (weights + KV + the rest of the process:
    the interpreter, libtorch, tensors not tracked), not part of "other processes / OS"
    (other_processes_bytes); no allocator tells its tensors from the rest, so none is called a tensor."""
    if not buckets:
        return None
    rss = _sum([_host_rss(state, pid) for pid in {b.pid for b in buckets}])
    return None if rss is None else max(0, rss - (weights or 0) - (kv or 0))


def other_processes_bytes(state: MonitorState, pool: PoolCapacity) -> int | None:
    """On a unified pool (or host RAM): what the OS and every process but the memsight agents' hold now,
    MemTotal - MemAvailable - the agents' held bytes. The Live screen's "other" and the OS reserve of the
    plan for "this machine" (tui/app.py) are this one figure."""
    if state.os is None:
        return None
    return _beside_on_host(state.os, _held(state, pool, _buckets_for(state, pool)))


def other_and_free(state: MonitorState, pool: PoolCapacity, held: int) -> tuple[int | None, int | None]:
    """(what the rest of the pool holds beside an engine's `held` bytes, what is free), as the system sees
    them: the OS on a unified pool or host RAM (MemTotal - MemAvailable - held, MemAvailable), NVML on a GPU
    (used - held, free); None where it does not say. The engines' comparisons (vllm_view, engine_live)."""
    if pool.unified:
        if state.os is None:
            return None, None
        return _beside_on_host(state.os, held), state.os.mem_available
    device = _device(state, pool.index)
    if device is None or device.used is None:
        return None, None
    return max(0, device.used - held), device.free


def _beside_on_host(os_snap, held: int) -> int:
    """MemTotal - MemAvailable - `held`: what the OS and every other process hold in host RAM or a unified
    pool beside `held` bytes."""
    return max(0, os_snap.mem_total - os_snap.mem_available - held)


def _held(state: MonitorState, pool: PoolCapacity, buckets: list[MeasuredBuckets]) -> int:
    """What the agents' processes hold in the pool: per device their driver-visible figure; in host RAM (a
    CPU-only program) their RSS, its total."""
    if pool.index < 0:
        rss = _sum([_host_rss(state, pid) for pid in {b.pid for b in buckets}])
        if rss is not None:
            return rss
    return _sum([_process_held(b) for b in buckets]) or 0


def _device(state: MonitorState, index: int) -> DeviceInfo | None:
    for device in state.nvml.devices:
        if device.index == index:
            return device
    return None


def planned_segments(plan, rank: int | None = None) -> tuple[Segment, ...]:
    """The plan's buckets (the given rank's when tp*pp > 1, else the busiest), in PLANNED_KEYS order."""
    weights, kv, activations, overhead = (
        plan.weight_bytes,
        plan.kv_bytes,
        plan.activation_bytes,
        plan.overhead_bytes,
    )
    if rank is not None and 0 <= rank < len(plan.ranks) and len(plan.ranks) > 1:
        r = plan.ranks[rank]
        weights, kv, activations, overhead = r.weight_bytes, r.kv_bytes, r.activation_bytes, r.overhead_bytes
    used = plan.os_reserve_bytes + weights + kv + activations + overhead
    return (
        Segment("other", plan.os_reserve_bytes),
        Segment("weights", weights),
        Segment("kv", kv),
        Segment("activations", activations),
        Segment("overhead", overhead),
        Segment("free", max(0, plan.capacity_bytes - used)),
    )


def plan_label(plan) -> str:
    i = plan.inputs
    fmt = plan.weights.format
    most = count(plan.max_users, "user")
    verdict = f"fits, max {most}" if plan.fits else f"does NOT fit (max {most})"
    if plan.warnings:  # a context past the model's max_position_embeddings (planner/budget.py)
        verdict += f", past its {plan.spec.max_position_embeddings:,}-token limit"
    if plan.inputs.overhead_bytes == 0:  # tui/app.py plans a machine without a GPU so
        verdict += "; overhead 0: no GPU, no CUDA context"
    tp = f", tp={i.tp}" if i.tp > 1 else ""
    # a config path is the model's name to the planner; its file name is what fits on one line
    name = plan.spec.name
    if name.endswith(".json"):
        name = pathlib.PurePath(name).name
    if i.extra_weight_bytes:  # a draft beside its target (plan_sources)
        name += f" + {size(i.extra_weight_bytes)} of other models' weights"
    return f"{name} {fmt}, KV {i.kv_dtype}, {i.context:,} ctx × {count(i.users, 'user')}{tp}: {verdict}"


def count(n: int, noun: str) -> str:
    """"1 user", "8,192 users": a count with its separators and its noun in the right number."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def comparison_groups(state: MonitorState, pool: PoolCapacity, sources) -> list[tuple[str, int | None]]:
    """(plan key, pid) of each comparison drawn for `pool`: the pool once (pid: the one agent in it that
    published a model, or None), or one per agent when several in it published their own model."""
    published = {s.pid for s in sources}
    pids = sorted({b.pid for b in _buckets_for(state, pool) if b.pid in published})
    if len(pids) <= 1:
        return [(pool.key, pids[0] if pids else None)]
    return [(f"{pool.key}:{pid}", pid) for pid in pids]


# "this" machine's plan re-samples what other processes and the OS use (its reserve) at most this often:
# re-planning at every tick would cost a make_plan per tick for figures that move by megabytes. Between two
# samples the measured row moves and the planned one waits, which the note says.
THIS_MACHINE_RESAMPLE_S = 5.0
# the "other procs / OS" row's missing difference, explained (a difference of a figure with itself)
RESERVE_MEASURED_NOTE = (
    f"other procs / OS planned as measured every {THIS_MACHINE_RESAMPLE_S:g} s: no diff "
    "(--os-reserve-gib X compares)"
)


def bucket_comparisons(
    state: MonitorState,
    plans: Mapping[str, object],
    plan_errors: Mapping[str, str],
    sources: tuple[PlanSource, ...] = (),
    reserve_measured: bool = False,
) -> tuple[BucketComparison, ...]:
    """One comparison per pool (per agent process in it, when several published their own loaded model);
    `plans[key]` is the plan made for that pool's capacity (and that process's inputs). `reserve_measured`:
    the plans' OS reserve of a unified pool or host RAM is the measured "other procs / OS" (the default)."""
    out = []
    by_pid = {s.pid: s for s in sources}
    infos = {v.pid: v.info for v in state.agents}
    for pool in pools(state):
        groups = comparison_groups(state, pool, sources)
        for key, pid in groups:
            measured, missing = measured_segments(state, pool, pid if len(groups) > 1 else None)
            plan = plans.get(key)
            notes: list[str] = []
            source = by_pid.get(pid) if pid is not None else None
            info = infos.get(pid) if pid is not None else None
            if plan is not None:
                planned = planned_segments(plan, rank=pool.index if pool.index >= 0 else None)
                label = plan_label(plan)
            else:
                planned = None
                label = plan_errors.get(key, "no plan inputs (set a model on the Plan screen, key 2)")
            if source is not None:
                if source.provenance:
                    notes.append(" · ".join(source.provenance))
                if source.error:
                    notes.append(source.error)
            if info is not None:
                line = phase_line(info)
                if line:
                    notes.append(line)
                if plan is not None and source is not None and source.spec is not None:
                    rank = pool.index if 0 <= pool.index < len(plan.ranks) and len(plan.ranks) > 1 else None
                    planned_w = plan.ranks[rank].weight_bytes if rank is not None else plan.weight_bytes
                    check = weights_check(info, planned_w, pool.index)
                    if check:
                        notes.append(check)
                notes.extend(agent_notes(info))
            title = pool.title if len(groups) == 1 else f"{pool.title} · pid {pid}"
            as_measured = reserve_measured and pool.unified and planned is not None
            if as_measured:
                notes.append(RESERVE_MEASURED_NOTE)
            out.append(
                BucketComparison(
                    title, pool.capacity_bytes, measured, planned, label, missing, tuple(notes), as_measured
                )
            )
    return tuple(out)


def headroom(state: MonitorState, thresholds: AlertOptions) -> HeadroomData:
    """The headroom gauge: the free figure collectors/state.py headroom_of chose, out of the total that goes
    with it (MemTotal for MemAvailable, the device's total for NVML's device free, the agent's cuda_total for
    its mem_get_info: a container without NVML)."""
    missing = "" if state.headroom_bytes is not None else f"unknown ({state.headroom_source})"
    return HeadroomData(
        state.headroom_bytes,
        state.headroom_total_bytes,
        state.headroom_source,
        thresholds.headroom_warning_bytes,
        thresholds.headroom_critical_bytes,
        missing,
    )


def machine_bar(key: str, label: str, plan, context: int) -> MachineBar:
    return MachineBar(
        key=key,
        label=label,
        capacity_bytes=plan.capacity_bytes,
        segments=planned_segments(plan),
        fits=plan.fits,
        max_users=plan.max_users,
        context=context,
    )
