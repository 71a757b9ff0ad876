"""From a MonitorState (collectors) and Plans (planner) to the plain values the widgets draw.

This is the one place that knows both the collectors' and the widgets' field names. It is pure: the same state
and plans always give the same values (no clock, no hostname, no /proc), so snapshot tests are deterministic.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping
from dataclasses import dataclass, replace

from collectors.alerts import AlertOptions
from collectors.snapshots import AgentView, DeviceInfo, MeasuredBuckets, MonitorState, short_command
from tui.widgets.data import (
    AgentRow,
    AlertRow,
    BucketComparison,
    ChartSeries,
    HeadroomData,
    MachineBar,
    ProcessRow,
    Segment,
)

GIB = 2**30
# an agent sampling at under this share of its asked rate shows both rates in its row
HELD_RATE_SHOWN_BELOW = 0.8


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


def _process_held(b: MeasuredBuckets) -> int | None:
    """What the driver sees this agent hold on the device; reserved + non-PyTorch when NVML does not say."""
    if b.driver_used_bytes is not None:
        return b.driver_used_bytes
    if b.reserved is None:
        return None
    return b.reserved + (b.non_torch_bytes or 0)


def measured_segments(state: MonitorState, pool: PoolCapacity) -> tuple[tuple[Segment, ...], str]:
    """Measured buckets of one pool, in MEASURED_KEYS order, and one line on what is missing."""
    buckets = _buckets_for(state, pool)
    missing: list[str] = []
    weights = _sum([b.weights_bytes for b in buckets])
    kv = _sum([b.kv_bytes for b in buckets])
    untracked = _sum([b.other_allocated_bytes for b in buckets])
    activations = _sum([b.activations_bytes for b in buckets])
    gap = _sum([b.allocator_gap_bytes for b in buckets])
    non_torch = _sum([b.non_torch_bytes for b in buckets])
    held = _sum([_process_held(b) for b in buckets]) or 0
    if not buckets:
        missing.append("no memsight agent attached: weights/KV/activations/gap unknown (memsight run -- CMD)")
    elif weights is None or kv is None:
        missing.append("agent tracks no model/KV: their bytes count as untracked tensors")
    free: int | None
    other: int | None
    if pool.unified:
        os_snap = state.os
        if os_snap is None:
            free = other = None
            missing.append("no /proc/meminfo sample")
        else:
            free = os_snap.mem_available
            other = other_processes_bytes(state, pool)
    else:
        device = _device(state, pool.index)
        free = device.free if device else None
        used = device.used if device else None
        other = None if used is None else max(0, used - held)
        if device is not None and device.unsupported:
            missing.append(f"NVML: not supported: {', '.join(device.unsupported)}")
    if not state.nvml.available:
        missing.append(f"no GPU data: {state.nvml.status}")
    missing[:0] = state.input_warnings.values()  # bad input skipped (counted) first: the line is cut short
    segments = (
        Segment("other", other),
        Segment("weights", weights),
        Segment("kv", kv),
        Segment("tensors", untracked),
        Segment("activations", activations),
        Segment("gap", gap),
        Segment("nonpytorch", non_torch),
        Segment("free", free),
    )
    return segments, "; ".join(missing)


def other_processes_bytes(state: MonitorState, pool: PoolCapacity) -> int | None:
    """On a unified pool (or host RAM): what the OS and every process but the memsight agents' hold now,
    MemTotal - MemAvailable - the agents' held bytes. The Live screen's "other" and the OS reserve of the
    plan for "this machine" (tui/app.py) are this one figure."""
    if state.os is None:
        return None
    held = _sum([_process_held(b) for b in _buckets_for(state, pool)]) or 0
    return max(0, state.os.mem_total - state.os.mem_available - held)


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
    verdict = (
        f"fits, max {plan.max_users} users" if plan.fits else f"does NOT fit (max {plan.max_users} users)"
    )
    if plan.warnings:  # a context past the model's max_position_embeddings (planner/budget.py)
        verdict += f", past its {plan.spec.max_position_embeddings:,}-token limit"
    tp = f", tp={i.tp}" if i.tp > 1 else ""
    # a config path is the model's name to the planner; its file name is what fits on one line
    name = plan.spec.name
    if name.endswith(".json"):
        name = pathlib.PurePath(name).name
    return f"{name} {fmt}, KV {i.kv_dtype}, {i.context:,} ctx × {i.users} users{tp}: {verdict}"


def bucket_comparisons(
    state: MonitorState, plans: Mapping[str, object], plan_errors: Mapping[str, str]
) -> tuple[BucketComparison, ...]:
    """One comparison per pool; `plans[pool.key]` is the plan made for that pool's capacity."""
    out = []
    for pool in pools(state):
        measured, missing = measured_segments(state, pool)
        plan = plans.get(pool.key)
        if plan is not None:
            planned = planned_segments(plan, rank=pool.index if pool.index >= 0 else None)
            label = plan_label(plan)
        else:
            planned = None
            label = plan_errors.get(pool.key, "no plan inputs (set a model on the Plan screen, key 2)")
        out.append(BucketComparison(pool.title, pool.capacity_bytes, measured, planned, label, missing))
    return tuple(out)


def headroom(state: MonitorState, thresholds: AlertOptions) -> HeadroomData:
    if state.unified or not state.nvml.available or not any(not d.unified for d in state.nvml.devices):
        total = state.os.mem_total if state.os else None
    else:
        discrete = [d for d in state.nvml.devices if not d.unified and d.free is not None]
        tightest = min(discrete, key=lambda d: d.free or 0) if discrete else None
        total = tightest.total if tightest else None
    missing = "" if state.headroom_bytes is not None else f"unknown ({state.headroom_source})"
    return HeadroomData(
        state.headroom_bytes,
        total,
        state.headroom_source,
        thresholds.headroom_warning_bytes,
        thresholds.headroom_critical_bytes,
        missing,
    )


def own_pids(state: MonitorState) -> frozenset[int]:
    """The experiments' processes: every agent's (under `memsight run` the app keeps only the command's own,
    tui/cmd_run.py RunChild.family)."""
    return frozenset(a.pid for a in state.agents)


def process_rows(
    state: MonitorState, thresholds: AlertOptions, own: frozenset[int] = frozenset()
) -> tuple[ProcessRow, ...]:
    if state.os is None:
        return ()
    return tuple(
        ProcessRow(
            pid=p.pid,
            name=p.name,
            user=p.user,
            rss=p.rss,
            gpu_bytes=p.gpu_bytes,
            growth_bytes=p.growth_bytes,
            is_new=p.is_new,
            fast_growing=p.growth_bytes is not None and p.growth_bytes > thresholds.growth_bytes,
            cmdline=p.cmdline,
            command=p.label,
            own=p.pid in own,
        )
        for p in state.os.processes
    )


def agent_rows(state: MonitorState) -> tuple[AgentRow, ...]:
    """One row per agent and device (a rank); the one holding the most (reserved) is the busiest."""
    rows: list[AgentRow] = []
    for agent in state.agents:
        records = [r for r in agent.latest if r.device >= 0] or list(agent.latest[:1])
        for rec in records:
            gap = None if rec.reserved is None or rec.allocated is None else rec.reserved - rec.allocated
            where = f"cuda:{rec.device}" if rec.device >= 0 else _short_state(rec.cuda_state)
            if not agent.alive:
                where = "exited"  # its last figures stay in the row
            rows.append(
                AgentRow(
                    pid=agent.pid,
                    label=f"{_short_cmd(agent)}{_held_rate(agent)}",
                    allocated=rec.allocated,
                    reserved=rec.reserved,
                    gap=gap,
                    retries=rec.alloc_retries,
                    ooms=rec.num_ooms,
                    busiest=False,
                    where=where,
                )
            )
    if len(rows) > 1:
        busiest = max(range(len(rows)), key=lambda i: (rows[i].reserved or 0, rows[i].allocated or 0))
        r = rows[busiest]
        rows[busiest] = replace(r, busiest=True)
    return tuple(rows)


def _held_rate(agent: AgentView) -> str:
    """' · 38/100 Hz' when the agent's CPU budget holds it well below the asked rate, else nothing."""
    sampled = agent.sampled_hz
    if sampled is None or not agent.alive or sampled >= HELD_RATE_SHOWN_BELOW * agent.hz:
        return ""
    return f" · {sampled:.0f}/{agent.hz:.0f} Hz"


def _short_state(cuda_state: str) -> str:
    short = {"CUDA not initialized": "no CUDA yet", "torch not imported": "no torch"}
    return short.get(cuda_state, cuda_state)


def _short_cmd(agent: AgentView) -> str:
    return short_command(agent.cmdline, max_words=2, width=28) or f"pid {agent.pid}"


def alert_rows(state: MonitorState, origin_t: float) -> tuple[AlertRow, ...]:
    """Alert times relative to `origin_t` (the first state the app saw), never the wall clock."""
    return tuple(AlertRow(f"t+{a.t - origin_t:.1f}s", a.severity, a.message) for a in state.alerts)


def chart_series(state: MonitorState) -> ChartSeries:
    history = state.history
    if "allocated" not in history or "reserved" not in history or not history["allocated"][0]:
        if state.agents:
            states = sorted({r.cuda_state for a in state.agents for r in a.latest} - {"ok"})
            why = f"agent attached, no allocator counters yet ({', '.join(states) or 'no samples'})"
        else:
            why = "no PyTorch agent: allocated / reserved / gap need `memsight run -- CMD`"
        times, values = history.get("headroom", ((), ()))
        if state.headroom_source == "MemAvailable" and len(history.get("available", ((),))[0]) > len(times):
            times, values = history["available"]  # the same quantity, sampled with every OS tick
        n = min(len(times), len(values))
        if n < 2:
            return ChartSeries((), (), (), (), why)
        return ChartSeries(
            (), (), (), (), why,
            fallback_label=f"headroom ({state.headroom_source})",
            fallback_t=tuple(round(t - times[0], 3) for t in times[:n]),
            fallback=tuple(values[:n]),
        )
    times, allocated = history["allocated"]
    _, reserved = history["reserved"]
    if "gap" in history:
        _, gap = history["gap"]
    else:
        gap = tuple(r - a for r, a in zip(reserved, allocated, strict=False))
    n = min(len(times), len(allocated), len(reserved), len(gap))
    t0 = times[0]
    return ChartSeries(
        tuple(round(t - t0, 3) for t in times[:n]),
        tuple(allocated[:n]),
        tuple(reserved[:n]),
        tuple(gap[:n]),
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


def vllm_line(state: MonitorState) -> str:
    """One line for the vLLM server scraped with --vllm-url ("" when none was given): per model, KV cache
    usage, running / waiting requests, preemptions and the prefix cache hit rate; or why there is nothing."""
    snap = state.vllm
    if snap is None:
        return ""
    if not snap.available:
        return f"vLLM {snap.url}: {snap.status}"
    if not snap.models:
        return f"vLLM {snap.url}: no model series"

    def pct(x: float | None) -> str:
        return "—" if x is None else f"{x * 100:.1f}%"

    def num(x: int | None) -> str:
        return "—" if x is None else f"{x:,}"

    parts = []
    for m in snap.models:
        name = m.model_name or "model"
        if m.engine is not None and len(snap.models) > 1:
            name += f" [{m.engine}]"
        parts.append(
            f"{name}: KV cache {pct(m.kv_cache_usage)} · running {num(m.requests_running)} / "
            f"waiting {num(m.requests_waiting)} · preemptions {num(m.preemptions_total)} · "
            f"prefix cache hits {pct(m.prefix_cache_hit_rate)}"
        )
    return "vLLM " + " | ".join(parts)


def vllm_log_line(log, buckets, plan_pool_bytes: int | None, plan_note: str, nvml_bytes: int | None) -> str:
    """One line for the vLLM server whose log `memsight run` reads (planner.vllm_log.VLLMLog and
    collectors.vllm_log_follow.LogBuckets): its buckets "from vLLM's log", the pool the plan predicts for the
    same model and arguments, and NVML's per-process figure minus vLLM's own total ("outside vLLM's
    accounting"); "" when the child's log is not a vLLM log."""
    if log is None or not log.is_vllm:
        return ""

    def g(x: int | None) -> str:
        return "—" if x is None else f"{x / 2**30:,.2f}"

    head = f"vLLM {log.version} (from vLLM's log" if log.version else "vLLM (from vLLM's log"
    if buckets.ranks > 1:
        head += f", one of {buckets.ranks} ranks"
    head += "):"
    if log.error:
        head += f" ERROR line {log.error_line}: {log.error[:80]} ·"
    parts = [
        f"weights {g(buckets.weights)}",
        f"KV pool {g(buckets.kv_pool)}",
        f"activation peak {g(buckets.activation)}",
        f"non-torch+graphs {g(buckets.overhead)} GiB",
    ]
    text = f"{head} {' · '.join(parts)}"
    if plan_pool_bytes is not None:
        text += f" | plan, same model/args: KV pool {g(plan_pool_bytes)} GiB PREDICTED"
    elif plan_note:
        text += f" | plan: {plan_note}"
    total = buckets.total
    if total is not None and nvml_bytes is not None and buckets.ranks <= 1:
        outside = g(nvml_bytes - total)
        text += f" | outside vLLM's accounting {outside} GiB (NVML {g(nvml_bytes)} - vLLM {g(total)})"
    elif buckets.stage != "ready" and not log.error:
        text += f" | starting: {buckets.stage}"
    return text
