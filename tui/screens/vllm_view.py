"""What the screens show of a vLLM server, from a MonitorState and the log `memsight run` follows.

Its /metrics scrape in one line (vllm_line); its log's buckets in one line (vllm_log_line, per_rank,
job_total_text); vLLM's own model of its memory for what the log says it loaded (VLLMPlan, vllm_given,
vllm_plan, vllm_plan_label), and the planner's inputs taken from it (vllm_source; plan_follows: what the Plan
screen plans, vLLM's log first, else tui/screens/plan_sources.py's first loaded model); and the vLLM process's
buckets in the Live screen's bucket table (vllm_pool_for, vllm_comparison, with_vllm).

Pure: the same state, log and plans always give the same values (no clock, no hostname, no /proc).
"""

from __future__ import annotations

import math
import pathlib
from dataclasses import dataclass, replace
from typing import Any

from collectors.snapshots import MonitorState
from planner.budget import PlanInputs
from tui.screens.live_buckets import (
    PoolCapacity,
    _buckets_for,
    measured_segments,
    other_and_free,
    pools,
)
from tui.screens.plan_sources import PlanSource
from tui.widgets.data import BucketComparison, Segment

GIB = 2**30


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
    by_agent = {s.key: s.bytes for s in agent}
    has_agent = bool(_buckets_for(state, pool))
    where = "NVML" if state.nvml.available else "OS"
    sources: dict[str, list[str]] = {"vLLM's log": [], "agent": [], where: []}
    values = _agent_or_log(by_agent, has_agent, buckets, sources)
    tensors, gap = _agent_less_log(by_agent, has_agent, values, sources)
    other, free = by_agent.get("other"), by_agent.get("free")
    # the log fills what the agent does not track: its "tracks no model/KV" line no longer applies
    missing = _without(missing, "agent tracks no model/KV")
    if not has_agent:
        # the agents' held bytes are not known: what vLLM holds is NVML's per-process figure, else its log
        held_log = sum(values[k] or 0 for k in ("weights", "kv", "activations", "nonpytorch"))
        other = _other_beside(state, pool, nvml_bytes if nvml_bytes is not None else held_log, other)
        missing = _without(missing, "no memsight agent")
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


def _agent_or_log(
    by_agent: dict[str, int | None], has_agent: bool, buckets, sources: dict[str, list[str]]
) -> dict[str, int | None]:
    """The four buckets vLLM logs, each the agent's where it measured it, else the log's; `sources` gets
    which."""
    values: dict[str, int | None] = {}
    for key, logged, label in (
        ("weights", buckets.weights, "weights"),
        ("kv", buckets.kv_pool, "KV pool"),
        ("activations", buckets.activation, "activation peak"),
        ("nonpytorch", buckets.overhead, "non-torch+graphs as non-PyTorch"),
    ):
        if by_agent.get(key) is not None and has_agent:
            values[key] = by_agent[key]
            sources["agent"].append(label.split(" as ")[0])
        else:
            values[key] = logged
            if logged is not None:
                sources["vLLM's log"].append(label)
    return values


def _agent_less_log(
    by_agent: dict[str, int | None],
    has_agent: bool,
    values: dict[str, int | None],
    sources: dict[str, list[str]],
) -> tuple[int | None, int | None]:
    """(untracked tensors, allocator gap) as the agent measured them, less what the log's buckets already
    show (its weights and KV are among the tensors, its activation peak in the gap); `sources` says so."""
    tensors, gap = (by_agent.get("tensors"), by_agent.get("gap")) if has_agent else (None, None)
    if tensors is not None:
        taken = sum(values[k] or 0 for k in ("weights", "kv") if by_agent.get(k) is None)
        tensors = max(0, tensors - taken)
        sources["agent"].append("untracked tensors (less the log's weights + KV)" if taken else "tensors")
    if gap is not None:
        if by_agent.get("activations") is None and values["activations"]:
            gap = max(0, gap - values["activations"])
            sources["agent"].append("gap (less the log's activation peak)")
        else:
            sources["agent"].append("gap")
    return tensors, gap


def _other_beside(state: MonitorState, pool: PoolCapacity, held: int, other: int | None) -> int | None:
    """What the rest of the pool holds beside vLLM's `held` bytes, as the OS (a unified pool) or NVML (a
    GPU) sees it; `other` where the OS has not been sampled yet (a unified pool)."""
    if pool.unified and state.os is None:
        return other
    return other_and_free(state, pool, held)[0]


def _without(missing: str, prefix: str) -> str:
    """The "; "-joined missing line without its parts that start with `prefix`."""
    return "; ".join(m for m in missing.split("; ") if m and not m.startswith(prefix))


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
