"""From a MonitorState (collectors) and Plans (planner) to the plain values the widgets draw.

This is the one place that knows both the collectors' and the widgets' field names. It is pure: the same state
and plans always give the same values (no clock, no hostname, no /proc), so snapshot tests are deterministic.
"""

from __future__ import annotations

import json
import math
import pathlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from collectors.alerts import AlertOptions
from collectors.snapshots import (
    AgentView,
    DeviceInfo,
    MeasuredBuckets,
    MonitorState,
    short_command,
    tightest_agent_record,
)
from collectors.summary import PEAK_KEYS, RunSummary, clock
from planner.budget import PlanInputs
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
from tui.widgets.fmt import figure, size, unit_for

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
    held = _held(state, pool, buckets)
    rest = None
    if pool.index < 0 and buckets:
        # a CPU-only program is shown as itself: its RSS is its total (weights + KV + the rest of the
        # process: the interpreter, libtorch, tensors not tracked), not part of "other processes / OS"
        # (other_processes_bytes); no allocator tells its tensors from the rest, so none is called a tensor
        rss = _sum([_host_rss(state, pid) for pid in {b.pid for b in buckets}])
        if rss is not None:
            rest = max(0, rss - (weights or 0) - (kv or 0))
    if not buckets:
        missing.append("no memsight agent attached: weights/KV/activations/gap unknown (memsight run -- CMD)")
    elif weights is None or kv is None:
        where = "the rest of the process" if pool.index < 0 else "untracked tensors"
        missing.append(f"agent tracks no model/KV: their bytes count as {where}")
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
    if pool.index < 0:  # host RAM: no allocator gap, no non-PyTorch part to measure (CUDA's), no row for them
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


def other_processes_bytes(state: MonitorState, pool: PoolCapacity) -> int | None:
    """On a unified pool (or host RAM): what the OS and every process but the memsight agents' hold now,
    MemTotal - MemAvailable - the agents' held bytes. The Live screen's "other" and the OS reserve of the
    plan for "this machine" (tui/app.py) are this one figure."""
    if state.os is None:
        return None
    held = _held(state, pool, _buckets_for(state, pool))
    return max(0, state.os.mem_total - state.os.mem_available - held)


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
    if state.headroom_source == "device free (agent)":  # no NVML (a container without its library)
        tightest = tightest_agent_record(state.agents)  # the device headroom_of read: out of its total
        total = None if tightest is None else tightest.cuda_total
    elif state.unified or not state.nvml.available or not any(not d.unified for d in state.nvml.devices):
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


def run_scope(state: MonitorState, own: frozenset[int]) -> MonitorState:
    """The state as `memsight run`'s bars and plans see it: only the command's own agents (`own`, from
    RunChild.family). Other agents in the same directory (another run's) drop out of the measured buckets,
    so what they hold is drawn with "other procs / OS" (their processes stay listed as processes)."""
    buckets = tuple(b for b in state.buckets if b.pid in own)
    agents = tuple(a for a in state.agents if a.pid in own)
    if len(buckets) == len(state.buckets) and len(agents) == len(state.agents):
        return state
    return replace(state, buckets=buckets, agents=agents)


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
                    key=f"{agent.pid}/{agent.start_ticks}/{rec.device}",
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


# --- the plan follows what the agents loaded (collectors/agent_info.py) ------------------------------
# torch dtype of a loaded model -> the planner's weight format
DTYPE_FORMATS = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


@dataclass(frozen=True, slots=True)
class PlanSource:
    """The plan inputs one agent's process implies: its loaded model (config, dtype) and its cache (batch,
    tokens), under the flags and config file, which win where given. `spec` is None when the process
    published no model (or one the planner cannot read: `error`)."""

    pid: int
    inputs: PlanInputs
    spec: Any  # planner.ModelSpec | None
    spec_key: str  # identifies the published config (memo key)
    provenance: tuple[str, ...]  # "model: from pid 4121's loaded model (...)", "context: from its cache, ..."
    error: str = ""


def _largest_model(info):
    with_config = [m for m in info.models if m.config is not None]
    if not with_config:
        return None
    return max(with_config, key=lambda m: sum(m.params_bytes.values()) + sum(m.buffers_bytes.values()))


def _cache_for_plan(info):
    live = [c for c in info.caches if c.tokens and c.batch]
    if live:
        return max(live, key=lambda c: c.total_bytes), "its cache"
    largest = info.largest_cache
    if largest is not None and largest.tokens and largest.batch:
        return largest, "its largest cache so far"
    return None, ""


def plan_sources(state: MonitorState, base: PlanInputs, explicit: frozenset[str]) -> tuple[PlanSource, ...]:
    """One PlanSource per agent that published a loaded model (pid order). Fields named in `explicit` (given
    as flags or in the config file) keep `base`'s value and say so."""
    from planner import load_spec  # noqa: PLC0415  (stdlib-only planner; loaded when a model is published)

    out = []
    for view in state.agents:
        info = view.info
        model = _largest_model(info) if info is not None else None
        if model is None:
            unreadable = [m for m in info.models if m.config_error] if info is not None else []
            if unreadable and "model" not in explicit:  # said where the plan would be, not planned silently
                m = unreadable[0]
                why = f"pid {view.pid}'s loaded {m.cls}: {m.config_error}; give --model to plan it"
                out.append(PlanSource(view.pid, base, None, "", (), why))
            continue
        notes = []
        fields: dict[str, Any] = {}
        spec = None
        error = ""
        key = json.dumps(dict(model.config), sort_keys=True, default=str)
        if "model" in explicit:
            notes.append(f"model: {base.model} (given; pid {view.pid} loaded a {model.cls})")
        else:
            try:
                spec = load_spec(dict(model.config))
            except ValueError as exc:  # PlannerError: shown, never a crash
                error = f"pid {view.pid}'s loaded {model.cls}: {exc}"
            else:
                spec = replace(spec, name=f"pid {view.pid}'s {model.cls}")
                fields["model"] = f"pid {view.pid}: {model.cls}"
                notes.append(f"model: from pid {view.pid}'s loaded model")
        cache, where = _cache_for_plan(info)
        if cache is not None:
            if "context" not in explicit:
                # the sequence's length, not a sliding window's (the planner holds the window itself)
                seen = max(cache.seq_tokens or 0, cache.tokens or 0)
                fields["context"], fields["output_tokens"] = seen, 0
                window = f" ({cache.tokens:,} held: a sliding window)" if seen > (cache.tokens or 0) else ""
                notes.append(f"context: from {where}, {seen:,} tokens{window}")
            if "users" not in explicit:
                fields["users"] = cache.batch
                notes.append(f"batch {cache.batch}")
        elif "context" not in explicit:
            notes.append(f"context: no cache seen yet, {base.context:,} tokens (default)")
        if "format" not in explicit and spec is not None:
            fmt_name = _loaded_format(model, spec)
            if fmt_name is not None:
                fields["format"] = fmt_name
                notes.append(f"{fmt_name} as loaded")
        kv_loaded = DTYPE_FORMATS.get(model.dtype or "")
        quantized_cache = cache is not None and "Quantized" in cache.cls
        if "kv_dtype" not in explicit and spec is not None and kv_loaded and not quantized_cache:
            # the cache holds keys and values in the dtype the model computes in (a config saying bfloat16
            # built in float32 keeps a float32 cache), not the config's torch_dtype KV "auto" reads
            fields["kv_dtype"] = kv_loaded
            notes.append(f"KV {kv_loaded} as loaded")
        if spec is not None:  # the other models it loaded (a draft beside its target): their weights too
            extra, said = _other_models_weights(info, model)
            fields["extra_weight_bytes"] = extra
            notes.extend(said)
        out.append(
            PlanSource(view.pid, replace(base, **fields), spec, key if spec else "", tuple(notes), error)
        )
    return tuple(out)


def _loaded_format(model, spec) -> str | None:
    """The planner's weight format of a model as loaded: its checkpoint's quantization, else its dtype."""
    if model.config.get("quantization_config") is not None:
        return spec.default_format
    return DTYPE_FORMATS.get(model.dtype or "")


def _other_models_weights(info, target) -> tuple[int, list[str]]:
    """(planned weight bytes of every model but `target` the process loaded, one note each): each planned
    from its own config and format as loaded, as the target is."""
    from planner import load_spec, weight_bytes  # noqa: PLC0415  (stdlib-only planner)

    total, notes = 0, []
    for other in info.models:
        if other is target or other.config is None:
            continue
        try:
            spec = load_spec(dict(other.config))
            planned = weight_bytes(spec, _loaded_format(other, spec)).total
        except ValueError as exc:  # PlannerError: said, never a crash; the weights check shows the difference
            notes.append(f"+ a {other.cls} (its weights not planned: {exc})")
            continue
        total += planned
        notes.append(f"+ a {other.cls} ({size(planned)} of weights planned)")
    return total, notes


def phase_line(info) -> str:
    """"activations: prefill peak 3.10 GiB at 12:03:41 UTC, decode peak 205 MiB at ..." from the agent's
    phases; a phase none of whose calls rose above an earlier high says so (a 0 would read as measured)."""
    parts = []
    for name in ("prefill", "decode"):
        p = info.phase(name)
        if p is None or p.calls == 0:
            continue
        if not p.peak_bytes:  # None: no call set a new high; 0: a new high, but not above the call's entry
            parts.append(f"{name}: no call set a new high above its entry level ({p.calls:,} calls)")
            continue
        when = time.strftime("%H:%M:%S", time.gmtime(p.peak_t)) if p.peak_t else "?"
        text = f"{name} peak {size(p.peak_bytes)} at {when}"
        if p.unresolved_calls:
            text += f" ({p.calls - p.unresolved_calls:,}/{p.calls:,} calls seen)"
        parts.append(text)
    if not parts:
        return ""
    where = "RSS high-water mark" if "ru_maxrss" in info.phase_counter else "allocator peak"
    return "activations: " + ", ".join(parts) + f" (UTC; {where}, never reset)"


def weights_check(info, planned_weight_bytes: int, device: int) -> str:
    """The tracked weights on `device` (-1: host) against the planner's bytes for the same config and format:
    equal up to the model's buffers (rotary tables...) is the boring, expected case; otherwise the likely
    cause."""
    model = _largest_model(info)
    if model is None:
        return ""
    # every tracked model, as the weights bucket counts them (a draft beside its target: the plan counts
    # both, plan_sources' extra_weight_bytes)
    models = info.models
    params = sum(m.params_bytes.get(device, 0) for m in models)
    buffers = sum(m.buffers_bytes.get(device, 0) for m in models)
    measured = params + buffers
    elsewhere = sum(v for m in models for d, v in m.params_bytes.items() if d != device)
    diff = params - planned_weight_bytes
    which = f"{len(models)} models ({' + '.join(m.cls for m in models)}), " if len(models) > 1 else ""
    if diff == 0:
        planned = size(planned_weight_bytes)
        return f"weights: {which}measured = planned {planned} + buffers {size(buffers)}: as planned"
    head = f"weights: {which}measured {size(measured)} (params {size(params)} + buffers {size(buffers)})"
    cause = "cause unknown"
    config = model.config or {}
    embed = config.get("vocab_size", 0) * config.get("hidden_size", 0)
    if elsewhere and diff < 0:
        cause = f"{size(elsewhere)} of weights kept off this device (device_map offload?)"
    elif planned_weight_bytes and params == 2 * planned_weight_bytes:
        cause = "twice the plan: weights duplicated (a second copy, or a model loaded twice)"
    elif embed and config.get("tie_word_embeddings") and diff > 0 and diff % embed == 0:
        cause = "tied embeddings untied (a separate head copy)"
    elif diff > 0:
        cause = "more than planned: a tensor upcast (e.g. kept in fp32), or a format other than planned"
    else:
        cause = "less than planned: part of the model elsewhere, or a format other than planned"
    return f"{head} vs planned {size(planned_weight_bytes)}: {diff:+,} B, {cause}"


def agent_notes(info) -> tuple[str, ...]:
    """Status worth a line: the agent's problems (a failed last sample, tracking lost at a fork), failed
    hooks, untracked caches (named once), autotrack off or failed."""
    if info is None:
        return ()
    notes = [f"agent: {p}" for p in info.problems]
    notes += [f"autotrack hook {h}" for h in info.failed_hooks]
    notes += [f"untracked: {u}" for u in info.untracked]
    if info.autotrack.startswith(("off", "failed")):
        notes.append(f"autotrack {info.autotrack}")
    return tuple(notes)


def vllm_log_line(log, buckets, plan_pool_bytes: int | None, plan_note: str, nvml_bytes: int | None) -> str:
    """One line for the vLLM server whose log `memsight run` reads (planner.engines.vllm.log.VLLMLog and
    collectors.vllm_log_follow.LogBuckets): its buckets "from vLLM's log", the pool the plan predicts for the
    same model and arguments, and NVML's per-process figure minus vLLM's own total ("outside vLLM's
    accounting"); "" when the child's log is not a vLLM log."""
    if log is None or not log.is_vllm:
        return ""

    def g(x: int | None) -> str:
        return "—" if x is None else f"{x / 2**30:,.2f}"

    head = f"vLLM {log.version} (from vLLM's log" if log.version else "vLLM (from vLLM's log"
    if buckets.world > 1:
        head += f"; {per_rank(buckets)}"
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
    if buckets.world > 1:  # before the plan: the line is cut at the screen's width
        text += f" | {job_total_text(buckets, 60)}"
    if plan_pool_bytes is not None:
        text += f" | plan, same model/args: KV pool {g(plan_pool_bytes)} GiB PREDICTED"
    elif plan_note:
        text += f" | plan: {plan_note}"
    total = buckets.accounted
    if total is not None and nvml_bytes is not None:
        outside = g(nvml_bytes - total)
        text += f" | outside vLLM's accounting {outside} GiB (NVML {g(nvml_bytes)} - vLLM {g(total)})"
    elif buckets.stage != "ready" and not log.error:
        text += f" | starting: {buckets.stage}"
    return text


def per_rank(buckets) -> str:
    """"per rank, TP=2 × PP=1: Worker_TP0's figures" for a job of several ranks (LogBuckets.world > 1)."""
    if buckets.tp or buckets.pp:
        shape = f"TP={buckets.tp or 1}" + (f" × PP={buckets.pp}" if buckets.pp > 1 else "")
    else:
        shape = f"{buckets.world} ranks logged"
    return f"per rank, {shape}: {buckets.rank or 'the unprefixed lines'}'s figures"


def job_total_text(buckets, cut: int = 200) -> str:
    """The whole job's total where every rank logged its four buckets, else why not (cut to `cut`)."""
    if buckets.job_total is not None:
        total = buckets.job_total / GIB
        return f"whole job, {buckets.world} ranks: {total:,.2f} GiB (every rank's buckets, log)"
    why = buckets.job_missing
    if len(why) > cut:
        why = why[: cut - 1] + "…"
    return f"whole job: not in the log ({why})"


# --- the vLLM process's buckets, from its log, in the bucket table (memsight run -- vllm serve ...) ------
@dataclass(frozen=True, slots=True)
class VLLMPlan:
    """The plan for the vLLM process: planner/engines/vllm/explain.explain() on the log's model and engine
    arguments (flags and the config file win), or why there is none."""

    explanation: Any  # planner.engines.vllm.explain.Explanation | None
    error: str
    provenance: str  # "plan follows vLLM's log: model ... (log) · max_model_len 8,192 (log) · ..."


def vllm_given(inputs: PlanInputs, explicit: frozenset[str]) -> tuple[str | None, dict[str, str]]:
    """(model, engine settings) the user gave as flags or in the config file: they win over the log's."""
    given: dict[str, str] = {}
    if "context" in explicit:
        given["max_model_len"] = str(inputs.context)
    if "tp" in explicit:
        given["tensor_parallel_size"] = str(inputs.tp)
    if "kv_dtype" in explicit and inputs.kv_dtype != "auto":
        given["kv_cache_dtype"] = inputs.kv_dtype
    return (inputs.model if "model" in explicit else None), given


def vllm_plan(
    log,
    *,
    total_bytes: int | None,
    model: str | None,
    given: dict[str, str],
    version: str | None = None,
    gpu: str | None = None,
) -> VLLMPlan:
    """vLLM's own model of its memory (planner.engines.vllm.explain.explain) for what the log says vLLM
    loaded; version / gpu: `memsight run --vllm-version / --vllm-gpu`, for what the log does not say."""
    from planner.engines.vllm.explain import explain  # noqa: PLC0415  (stdlib-only; only for a vLLM log)

    try:
        ex = explain(log, model=model, version=version, gpu=gpu, total_bytes=total_bytes, given=given)
    except (ValueError, KeyError) as exc:  # PlannerError is a ValueError: shown, never a crash
        # explain's own flags have other names under memsight run
        why = str(exc).replace("give --vllm-version", "give memsight run --vllm-version")
        why = why.replace("give --gpu NAME", "give memsight run --vllm-gpu NAME")
        why = why.replace(" or --total-gib", "").replace("; or give the total as --total-gib", "")
        return VLLMPlan(None, why, "")
    parts = []
    for name, value, how in ex.inputs:
        if name == "model" and value.endswith(".json"):
            value = pathlib.PurePath(value).name  # a config path: its file name fits the line
        if how in ("--model", "--vllm-version", "--gpu"):
            how = "given: flag or config file, wins over the log" if how == "--model" else "given: flag"
        elif how == "given":
            how = "given: flag or config file"
        elif name == "model" and how == "log":
            value = f"{value} (what vLLM loaded"
            how = "log)"
            parts.append(f"{name} {value}, {how}")
            continue
        parts.append(f"{name} {value} ({how})")
    return VLLMPlan(ex, "", "plan follows vLLM's log: " + " · ".join(parts))


def vllm_plan_label(ex) -> str:
    """vLLM's own model's verdict in one line (the Live screen's vLLM plan row, the Plan screen's)."""
    p = ex.pool
    inputs = {name: value for name, value, _ in ex.inputs}
    model = inputs.get("model", ex.model)
    if model.endswith(".json"):  # a config path: its file name is what fits on the line
        model = pathlib.PurePath(model).name
    return (
        f"KV pool {p.pool_bytes / GIB:,.2f} GiB = {p.kv_cache_tokens:,} tokens, max concurrency "
        f"{p.max_concurrency:.2f}x PREDICTED by vLLM {ex.version} {ex.engine}'s model "
        f"(planner/engines/vllm): {model}, {inputs.get('weights format', '?')}, max_model_len "
        f"{p.max_model_len:,}, TP/PP {inputs.get('tensor/pipeline parallel', '1/1')}, util "
        f"{inputs.get('gpu_memory_utilization', '?')}"
    )


def vllm_source(
    plan: VLLMPlan, log, pid: int, base: PlanInputs, explicit: frozenset[str]
) -> PlanSource | None:
    """The planner's inputs for what vLLM loaded, taken from the same explanation the Live screen's vLLM plan
    row is drawn from (vllm_plan: the log's model and engine arguments, flags winning): model, weights
    format, KV cache dtype, max_model_len as the context, max_num_seqs as the users, max_num_batched_tokens
    as the prefill chunk, TP/PP. A field the user gave (`explicit`) keeps `base`'s value. None when vLLM's
    plan has no explanation (its error says why)."""
    ex = plan.explanation
    if ex is None:
        return None
    p = ex.pool
    inputs = {name: (value, how) for name, value, how in ex.inputs}
    tp_pp = inputs.get("tensor/pipeline parallel", ("1/1", ""))[0].split("/")
    fields: dict[str, Any] = {
        "model": ex.model,
        "context": p.max_model_len,
        "output_tokens": 0,
        "tp": int(tp_pp[0]),
        "pp": int(tp_pp[1]) if len(tp_pp) > 1 else 1,
    }
    notes = [plan.provenance]
    if "format" not in explicit:
        fields["format"] = inputs.get("weights format", (base.format, ""))[0]
    if "kv_dtype" not in explicit:
        kv = (log.setting("kv_cache_dtype") or "auto").strip().lower()
        fields["kv_dtype"] = "auto" if kv in ("auto", "none") else kv
        where = "log" if log.setting("kv_cache_dtype") else "default"
        notes.append(f"KV cache dtype {fields['kv_dtype']} ({where})")
    if "users" not in explicit and p.max_num_seqs > 0:
        # sequences at max_model_len vLLM runs at once: max_num_seqs caps them, the pool holds
        # max_concurrency of them (what vLLM reserves; max_num_seqs alone would plan for every one full)
        fields["users"] = max(1, min(p.max_num_seqs, math.floor(p.max_concurrency)))
        where = "log" if log.setting("max_num_seqs") else f"vLLM {ex.version}'s default"
        notes.append(
            f"users {fields['users']} = min(max_num_seqs {p.max_num_seqs} ({where}), vLLM's max concurrency "
            f"{p.max_concurrency:.2f}x PREDICTED), each at max_model_len"
        )
    if p.max_num_batched_tokens > 0:
        fields["prefill_chunk"] = p.max_num_batched_tokens
        where = "log" if log.setting("max_num_batched_tokens") else f"vLLM {ex.version}'s default"
        notes.append(f"prefill chunk {p.max_num_batched_tokens:,} = max_num_batched_tokens ({where})")
    for name in explicit & {"format", "users", "kv_dtype"}:
        notes.append(f"{name} {getattr(base, name)} (given: flag, config file or Plan screen edit)")
    for name in ("model", "context", "tp"):  # explain already took these from the flags (vllm_given)
        if name in explicit:
            fields[name] = getattr(base, name)
    return PlanSource(pid, replace(base, **fields), None, "", tuple(notes))


def plan_follows(
    base: PlanInputs,
    explicit: frozenset[str],
    vllm: tuple[VLLMPlan, Any, int] | None,
    sources: tuple[PlanSource, ...],
) -> tuple[PlanSource | None, str]:
    """What the Plan screen plans: the same source the Live screen's plan row follows. vLLM's log first
    (`vllm`: its plan, the log, its pid; under `memsight run -- vllm serve ...`), then the first agent that
    published a loaded model it can plan (plan_sources), else the inputs as given (None). The flags, the
    config file and the user's edits win inside each (vllm_given, plan_sources). The line says what is
    followed, or why the startup inputs are kept."""
    why_not = ""
    if vllm is not None:
        plan, log, pid = vllm
        source = vllm_source(plan, log, pid, base, explicit)
        if source is not None:
            return source, f"following vLLM's log (pid {pid}): " + " · ".join(source.provenance).removeprefix(
                "plan follows vLLM's log: "
            )
        why_not = f"vLLM's log (pid {pid}) cannot be planned: {plan.error or 'no model or version yet'}"
    # an agent's source plans its loaded model, or (the model given) the given model at its cache's batch
    # and length: the Live screen's row plans the same source, so the two screens agree
    usable = [s for s in sources if not s.error]
    if usable:
        source = usable[0]
        more = f" (1 of {len(usable)} agents that published one)" if len(usable) > 1 else ""
        given = f"cache (its model: {source.inputs.model}, given)"
        what = "loaded model" if source.spec is not None else given
        line = f"following pid {source.pid}'s {what}{more}: " + " · ".join(source.provenance)
        return source, (f"{why_not}; " if why_not else "") + line
    reasons = ([why_not] if why_not else []) + [s.error for s in sources if s.error]
    if reasons:
        return None, "; ".join(reasons) + "; the bars plan the inputs below"
    return None, ""


def _vllm_metrics_note(log, buckets, snap) -> str:
    """The pool's size (vLLM's log) beside its use now (the /metrics scrape, --vllm-url)."""
    tokens_fig = log.smallest("kv_tokens")
    size = "—" if buckets.kv_pool is None else f"{buckets.kv_pool / GIB:,.2f} GiB"
    tokens = f" = {int(tokens_fig.value):,} tokens" if tokens_fig is not None else ""
    head = f"KV pool {size}{tokens} (vLLM's log)"
    if snap is None:
        return f"{head} · use now: give --vllm-url URL (vLLM's /metrics)"
    if not snap.available:
        return f"{head} · /metrics {snap.url}: {snap.status}"
    models = list(snap.models)
    named = [m for m in models if log.model and m.model_name == log.model]
    stats = (named or models or [None])[0]
    if stats is None:
        return f"{head} · /metrics {snap.url}: no model series"
    capacity = int(tokens_fig.value) if tokens_fig is not None else snap.kv_capacity_tokens
    use = "in use —"
    if stats.kv_cache_usage is not None:
        use = f"in use {stats.kv_cache_usage * 100:.1f}%"
        if buckets.kv_pool is not None:
            use += f" ≈ {stats.kv_cache_usage * buckets.kv_pool / GIB:,.2f} GiB"
        if capacity:
            use += f", {round(stats.kv_cache_usage * capacity):,} of {capacity:,} tokens"
    num = lambda x: "—" if x is None else f"{x:,}"  # noqa: E731
    return (
        f"{head} · {use} (/metrics) · running {num(stats.requests_running)} / waiting "
        f"{num(stats.requests_waiting)} · preemptions {num(stats.preemptions_total)}"
    )


def vllm_pool_for(state: MonitorState, pids: frozenset[int]) -> PoolCapacity:
    """The pool the vLLM process is on: the first device where NVML lists one of `pids`, else the first."""
    all_pools = pools(state)
    if state.nvml.available:
        for device in state.nvml.devices:
            if any(p.pid in pids for p in device.processes):
                for pool in all_pools:
                    if pool.index == device.index or pool.unified:
                        return pool
    return all_pools[0]


def vllm_comparison(
    state: MonitorState,
    pool: PoolCapacity,
    log,
    buckets,
    plan: VLLMPlan,
    nvml_bytes: int | None,
    pid: int,
) -> BucketComparison:
    """The vLLM process's buckets on `pool`: each from this run's agent where it measured it, else from vLLM's
    log (weights, KV pool, activation peak, non-torch + CUDA graphs as non-PyTorch), never both: the log's
    weights and KV are taken out of the agent's untracked tensors, its activation peak out of the allocator
    gap. Drawn over vLLM's own plan for the same model and arguments (planner/engines/vllm/explain.py)."""
    agent, missing = measured_segments(state, pool)
    a = {s.key: s.bytes for s in agent}
    has_agent = bool(_buckets_for(state, pool))
    where = "NVML" if state.nvml.available else "OS"
    sources: dict[str, list[str]] = {"vLLM's log": [], "agent": [], where: []}
    values: dict[str, int | None] = {}
    for key, logged, label in (
        ("weights", buckets.weights, "weights"),
        ("kv", buckets.kv_pool, "KV pool"),
        ("activations", buckets.activation, "activation peak"),
        ("nonpytorch", buckets.overhead, "non-torch+graphs as non-PyTorch"),
    ):
        if a.get(key) is not None and has_agent:
            values[key] = a[key]
            sources["agent"].append(label.split(" as ")[0])
        else:
            values[key] = logged
            if logged is not None:
                sources["vLLM's log"].append(label)
    tensors, gap = (a.get("tensors"), a.get("gap")) if has_agent else (None, None)
    if tensors is not None:
        taken = sum(values[k] or 0 for k in ("weights", "kv") if a.get(k) is None)
        tensors = max(0, tensors - taken)
        sources["agent"].append("untracked tensors (less the log's weights + KV)" if taken else "tensors")
    if gap is not None:
        if a.get("activations") is None and values["activations"]:
            gap = max(0, gap - values["activations"])
            sources["agent"].append("gap (less the log's activation peak)")
        else:
            sources["agent"].append("gap")
    held_log = sum(values[k] or 0 for k in ("weights", "kv", "activations", "nonpytorch"))
    other, free = a.get("other"), a.get("free")
    # the log fills what the agent does not track: its "tracks no model/KV" line no longer applies
    missing = "; ".join(m for m in missing.split("; ") if m and not m.startswith("agent tracks no model/KV"))
    if not has_agent:
        # the agents' held bytes are not known: what vLLM holds is NVML's per-process figure, else its log
        held = nvml_bytes if nvml_bytes is not None else held_log
        if pool.unified and state.os is not None:
            other = max(0, state.os.mem_total - state.os.mem_available - held)
        elif not pool.unified:
            device = _device(state, pool.index)
            other = None if device is None or device.used is None else max(0, device.used - held)
        missing = "; ".join(m for m in missing.split("; ") if m and not m.startswith("no memsight agent"))
    sources[where].extend(["other", "free"])
    measured = (
        Segment("other", other),
        Segment("weights", values["weights"]),
        Segment("kv", values["kv"]),
        Segment("tensors", tensors),
        Segment("activations", values["activations"]),
        Segment("gap", gap),
        Segment("nonpytorch", values["nonpytorch"]),
        Segment("free", free),
    )
    said = " · ".join(f"{src}: {', '.join(keys)}" for src, keys in sources.items() if keys)
    notes = (f"sources: {said}", *_vllm_notes(state, log, buckets, plan, nvml_bytes))
    planned, label = _vllm_planned(plan, pool)
    version = f" {log.version}" if log.version else ""
    scope = per_rank(buckets) if buckets.world > 1 else "figures"
    title = f"{pool.title} · vLLM{version} (pid {pid}, {scope} from vLLM's log)"
    return BucketComparison(title, pool.capacity_bytes, measured, planned, label, missing, notes)


def _vllm_notes(state: MonitorState, log, buckets, plan: VLLMPlan, nvml_bytes: int | None) -> list[str]:
    """What the vLLM comparison says under its bars: /metrics, the ranks, what lies outside vLLM's own
    accounting, where its plan came from, how far its log got."""
    notes = [_vllm_metrics_note(log, buckets, state.vllm)]
    if buckets.world > 1:
        notes.append(f"the bars: one rank of {buckets.world} (one GPU each) · {job_total_text(buckets)}")
    total = buckets.accounted
    if total is not None and nvml_bytes is not None:
        whose = "vLLM's own" if buckets.world <= 1 else f"vLLM's own, {buckets.world} ranks"
        notes.append(
            f"outside vLLM's accounting {(nvml_bytes - total) / GIB:,.2f} GiB (NVML per-process "
            f"{nvml_bytes / GIB:,.2f} - {whose} {total / GIB:,.2f})"
        )
    if plan.provenance:
        notes.append(plan.provenance)
    if log.error:
        notes.append(f"vLLM logged an error on line {log.error_line}: {log.error[:100]}")
    elif log.stage != "ready":
        notes.append(f"vLLM starting: {log.stage} (the buckets fill in as its log says them)")
    return notes


def _vllm_planned(plan: VLLMPlan, pool: PoolCapacity) -> tuple[tuple[Segment, ...] | None, str]:
    """vLLM's own model of its memory as the plan bar, and its label; none while the log lacks the model."""
    ex = plan.explanation
    if ex is None:
        waiting = plan.error or "waiting for the model and version in the log"
        return None, f"vLLM's model of its memory: {waiting}"
    p = ex.pool
    capacity = p.total_bytes or pool.capacity_bytes or 0
    used = p.weights_bytes + p.pool_bytes + p.activation_bytes + p.non_torch_bytes + p.cudagraph_bytes
    planned = (
        Segment("other", 0),
        Segment("weights", p.weights_bytes),
        Segment("kv", p.pool_bytes),
        Segment("activations", p.activation_bytes),
        Segment("overhead", p.non_torch_bytes + p.cudagraph_bytes),
        Segment("free", max(0, capacity - used)),
    )
    return planned, vllm_plan_label(ex)


def with_vllm(
    comparisons: tuple[BucketComparison, ...], pool: PoolCapacity, vllm: BucketComparison
) -> tuple[BucketComparison, ...]:
    """The pool's comparisons (one, or one per agent) give way to the vLLM process's; the others stay."""
    out: list[BucketComparison] = []
    for c in comparisons:
        if c.title == pool.title or c.title.startswith(pool.title + " · pid "):
            if vllm not in out:
                out.append(vllm)
        else:
            out.append(c)
    if vllm not in out:
        out.insert(0, vllm)
    return tuple(out)


# --- the end-of-run summary, as the Live screen shows it and memsight run prints it ----------------------
# the peaks that choose the summary's unit: the program's own (the system's used memory is the machine's)
SUMMARY_UNIT_KEYS = frozenset(
    {"weights", "kv", "activations", "tensors", "gap", "non_torch", "allocated", "reserved"}
)


def summary_lines(s: RunSummary, alert_lines: int = 5) -> list[str]:
    """The summary (collectors/summary.py) as short lines, each figure labelled with its unit; the last
    `alert_lines` alerts are listed after their count."""
    labels = dict(PEAK_KEYS)
    lines = [f"run summary: {clock(s.start_t)} to {clock(s.end_t)} ({s.end_t - s.start_t:.0f} s)"]
    if s.peaks:
        unit = unit_for(p.bytes for p in s.peaks if p.key in SUMMARY_UNIT_KEYS)
        parts = [f"{labels[p.key]} {figure(p.bytes, unit)}" for p in s.peaks]
        lines.append(f"peak {unit.name}: " + " · ".join(parts) + (f" — {s.scope}" if s.scope else ""))
    else:
        lines.append("peak: nothing measured")
    gap = s.peak("gap")
    if gap is None:
        lines.append("peak reserved − allocated: unknown (no allocator counters: no agent, or no CUDA)")
    else:
        lines.append(f"peak reserved − allocated: {size(gap.bytes)} at {clock(gap.t)}")
    if s.lowest_headroom is None:
        lines.append("lowest headroom: unknown")
    else:
        when = clock(s.lowest_headroom_t or s.end_t)
        lines.append(f"lowest headroom: {size(s.lowest_headroom)} ({s.headroom_source}) at {when}")
    if not s.alerts_total:
        lines.append("alerts: none")
    else:
        by: dict[str, int] = {}
        for a in s.alerts:
            by[a.severity] = by.get(a.severity, 0) + 1
        counts = ", ".join(f"{n} {sev}" for sev, n in sorted(by.items()))
        lines.append(f"alerts: {s.alerts_total} ({counts})")
        if alert_lines > 0:
            lines.extend(f"  {clock(a.t)} {a.severity.upper()} {a.message}" for a in s.alerts[-alert_lines:])
    return lines
