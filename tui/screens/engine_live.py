"""The Live screen's view of a serving engine other than vLLM (SGLang, Ollama, llama.cpp) whose log `memsight
run` follows (collectors.engine_log_follow): its buckets from its own log, beside the plan its own model gives
for the same model and arguments (planner/engines: explain on the log, `planned_buckets`), with the process's
memory as the system sees it (NVML per-process on a GPU, the resident set in host RAM) and what lies outside
the engine's own accounting. vLLM keeps its richer view (tui/screens/vllm_view.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from collectors.nvml_collector import gpu_bytes_by_pid
from collectors.snapshots import MonitorState
from planner.engines.base import DeviceBuckets
from tui.screens.live_buckets import PoolCapacity, other_and_free
from tui.widgets.data import BucketComparison, Segment
from tui.widgets.fmt import figure, unit_for

GIB = 2**30
# the engine's own model is of its own process: the rest of the memory is planned as it is measured
ENGINE_OTHER_NOTE = "other procs / OS planned as measured: the engine's model is of its process (no diff)"


@dataclass(frozen=True, slots=True)
class EnginePlan:
    """The engine's own prediction for what its log shows: per-bucket bytes, or why there is none."""

    buckets: DeviceBuckets | None
    label: str  # "SGLang's model (planner/engines/sglang): qwen2.5-32b, ..." or the reason there is none


def engine_plan(followed: Any, model: str | None) -> EnginePlan:
    """explain() on the followed log (the model: memsight run's --model when given, else the log's)."""
    from planner.engines import get_engine  # noqa: PLC0415

    engine = get_engine(followed.engine)
    if engine.log_problem(followed.log) is not None:
        return EnginePlan(None, f"{followed.title}'s model: waiting for its memory lines in the log")
    try:
        sheet = engine.explain(followed.log, {"model": model})
    except (ValueError, KeyError) as exc:  # PlannerError is a ValueError: said on screen, never a crash
        why = str(exc).replace("give --model", "give memsight run --model")
        return EnginePlan(None, f"{followed.title}'s model: {why}")
    planned = engine.planned_buckets(sheet)
    return EnginePlan(
        planned, f"{followed.title}'s own model (planner/engines/{followed.engine}): {sheet.model}"
    )


def device_for_pool(buckets: Any, pool: PoolCapacity) -> DeviceBuckets | None:
    """The engine's buckets on this pool: the GPU the pool is (CUDA<index>, else the engine's one GPU rank);
    in host RAM or a unified pool, every device the log names, summed."""
    if buckets is None or not buckets.devices:
        return None
    if not pool.unified:
        return buckets.device(f"CUDA{pool.index}") or buckets.gpu
    parts = buckets.devices

    def total(key: str) -> int | None:
        values = [getattr(d, key) for d in parts if getattr(d, key) is not None]
        return sum(values) if values else None

    return DeviceBuckets("all", total("weights"), total("kv"), total("activations"), total("overhead"))


def held_bytes(state: MonitorState, pool: PoolCapacity, pids: frozenset[int]) -> tuple[int | None, str]:
    """What the engine's processes hold as the system sees it: NVML's per-process bytes on a GPU, the resident
    set in host RAM (a CPU or unified run)."""
    if not pool.unified and state.nvml.available:
        by_pid = gpu_bytes_by_pid(state.nvml)
        held = [by_pid[p] for p in pids if p in by_pid]
        return (sum(held), "NVML per-process") if held else (None, "NVML per-process")
    if state.os is not None:
        rss = [p.rss for p in state.os.processes if p.pid in pids and p.rss is not None]
        return (sum(rss), "resident (RSS)") if rss else (None, "resident (RSS)")
    return None, "resident (RSS)"


def _g(x: int | None) -> str:
    return "—" if x is None else f"{x / GIB:,.2f}"


def _in(*values: int | None):  # noqa: ANN202
    """(format, unit name) for figures written on one line: one unit, three significant digits."""
    unit = unit_for(values)
    return (lambda x: figure(x, unit)), unit.name


def engine_line(
    followed: Any, device: DeviceBuckets | None, plan: EnginePlan, held: int | None, what: str
) -> str:
    """One line for the engine whose log memsight run follows ("" before it named itself)."""
    if followed is None:
        return ""
    buckets = followed.buckets
    head = f"{followed.title} (from {followed.title}'s log"
    if buckets is not None and buckets.ranks > 1:
        head += f"; per rank, {buckets.ranks} ranks"
    head += "):"
    if device is None:
        why = getattr(buckets, "silent", "") if buckets is not None else ""
        return f"{head} {getattr(followed.log, 'stage', 'starting')}: {why or 'no memory figure logged yet'}"
    p = plan.buckets
    planned = (p.weights, p.kv) if p else ()
    f, unit = _in(device.weights, device.kv, device.activations, device.overhead, *planned)
    text = (
        f"{head} weights {f(device.weights)} · KV {f(device.kv)} · activations {f(device.activations)} · "
        f"overhead {f(device.overhead)} {unit}"
    )
    if p is not None:
        text += f" | plan, same model/args: weights {f(p.weights)} · KV {f(p.kv)} {unit} PREDICTED"
    else:
        text += f" | plan: {plan.label[:80]}"
    accounted = device.total
    if accounted is not None and held is not None:
        g, gunit = _in(held - accounted, held, accounted)
        text += (
            f" | outside {followed.title}'s accounting {g(held - accounted)} {gunit} ({what} {g(held)} - "
            f"{followed.title} {g(accounted)})"
        )
    return text


def engine_comparison(
    state: MonitorState,
    pool: PoolCapacity,
    followed: Any,
    device: DeviceBuckets,
    plan: EnginePlan,
    held: int | None,
    what: str,
    pid: int,
) -> BucketComparison:
    """The engine process's buckets on `pool`, each from its own log, over its own model's plan. The
    non-PyTorch bar holds the engine's own overhead and what the system sees it hold beyond its accounting."""
    accounted = device.total or 0
    outside = None if held is None else max(0, held - accounted)
    other, free = other_and_free(state, pool, held if held is not None else accounted)
    nonpytorch = (
        None if device.overhead is None and outside is None else (device.overhead or 0) + (outside or 0)
    )
    measured = (
        Segment("other", other),
        Segment("weights", device.weights),
        Segment("kv", device.kv),
        Segment("tensors", None),
        Segment("activations", device.activations),
        Segment("gap", None),
        Segment("nonpytorch", nonpytorch),
        Segment("free", free),
    )
    notes = _engine_notes(state, pool, followed, device, held, what)
    planned = _engine_planned(plan, pool, other)
    stage = getattr(followed.log, "stage", "")
    title = f"{pool.title} · {followed.title} (pid {pid}, figures from {followed.title}'s log; {stage})"
    if planned is not None:
        notes.insert(0, ENGINE_OTHER_NOTE)
    return BucketComparison(
        title, pool.capacity_bytes, measured, planned, plan.label, "", tuple(notes),
        other_planned_as_measured=planned is not None,
    )  # fmt: skip


def _engine_notes(
    state: MonitorState, pool: PoolCapacity, followed: Any, device: DeviceBuckets, held: int | None, what: str
) -> list[str]:
    """What the engine's comparison says under its bars: where each figure came from, what the non-PyTorch
    bar holds (or why nothing outside the log is shown), the engine's use now."""
    accounted = device.total or 0
    sources = ", ".join(s.split(":")[0] for s in followed.buckets.sources) if followed.buckets else ""
    system = "NVML" if not pool.unified else "OS"
    notes = [f"sources: {followed.title}'s log: {sources or 'nothing yet'} · {system}: other, free"]
    if held is not None:
        name = followed.title
        g, unit = _in(device.overhead, held - accounted, held, accounted)
        notes.append(
            f"non-PyTorch bar: {name}'s overhead {g(device.overhead)} + outside {name}'s accounting "
            f"{g(held - accounted)} {unit} ({what} {g(held)} - {name}'s own {g(accounted)})"
        )
        if held < accounted and what.startswith("resident"):
            notes.append(
                f"the process holds less than {name} allocated: pages not yet touched are not resident"
            )
    else:
        notes.append(
            f"the process's own total is not measured here ({what}): nothing outside the log is shown"
        )
    notes.append(engine_metrics_note(state.engine))
    return notes


def _engine_planned(plan: EnginePlan, pool: PoolCapacity, other: int | None) -> tuple[Segment, ...] | None:
    """The engine's own model as the plan bar; None when it has no plan."""
    if plan.buckets is None:
        return None
    p = plan.buckets
    used = sum(x or 0 for x in (p.weights, p.kv, p.activations, p.overhead))
    capacity = pool.capacity_bytes or 0
    return (
        Segment("other", other),  # the engine's model is of its own process: the rest as measured
        Segment("weights", p.weights),
        Segment("kv", p.kv),
        Segment("activations", p.activations),
        Segment("overhead", p.overhead),
        Segment("free", max(0, capacity - (other or 0) - used) if capacity else None),
    )


def engine_metrics_note(snap: Any) -> str:
    """The engine's use now from --engine-url (collectors.engine_metrics.EngineSnapshot), or how to get it."""
    if snap is None:
        return "use now: give memsight run --engine-url URL (SGLang /metrics, llama-server /metrics, Ollama)"
    if not snap.available:
        return f"{snap.url}: {snap.status}"
    parts = []
    if snap.kv_usage is not None:
        tokens = ""
        if snap.kv_tokens_used is not None and snap.kv_tokens_total:
            tokens = f", {snap.kv_tokens_used:,} of {snap.kv_tokens_total:,} tokens"
        parts.append(f"KV in use {snap.kv_usage * 100:.1f}%{tokens}")
    if snap.running is not None or snap.waiting is not None:
        num = lambda x: "—" if x is None else f"{x:,}"  # noqa: E731
        parts.append(f"running {num(snap.running)} / waiting {num(snap.waiting)}")
    for load in snap.loads:
        vram = "—" if load.size_vram is None else _g(load.size_vram)
        parts.append(f"{load.name}: {_g(load.size)} GiB loaded, {vram} GiB of it on the GPU (/api/ps)")
    if snap.slots:
        busy = sum(1 for s in snap.slots if s.processing)
        parts.append(f"{busy} of {len(snap.slots)} slots busy (/slots)")
    return f"use now ({snap.kind}, {snap.url}): " + (" · ".join(parts) or snap.status)
