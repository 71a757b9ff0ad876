"""The rows explain() prints: each logged figure next to the predicted one, and why they differ in words
(the pool row naming the terms behind its difference, or the budget overrun it is clamped for)."""

from __future__ import annotations

from dataclasses import replace

from planner.engines.base import Figure
from planner.engines.vllm.log import VLLMLog
from planner.engines.vllm.pool import VLLMPool
from planner.engines.worksheet import Row, Term
from planner.units import GiB

# stable keys of the rows, in the order they are printed
ROW_KEYS = (
    "device_total", "requested", "weights", "activation", "non_torch", "cudagraphs", "kv_pool", "num_blocks",
    "kv_tokens", "max_concurrency",
)  # fmt: skip
ROW_LABELS = {
    "device_total": "device total (GiB)",
    "requested": "requested budget (GiB)",
    "weights": "weights (GiB)",
    "activation": "activation peak (GiB)",
    "non_torch": "non-torch (GiB)",
    "cudagraphs": "CUDA graphs (GiB)",
    "kv_pool": "KV pool (GiB)",
    "num_blocks": "KV blocks",
    "kv_tokens": "KV tokens",
    "max_concurrency": "max concurrency (x)",
}


def _mark_clamped(rows: tuple[Row, ...], terms: tuple[Term, ...], notes: list[str]) -> tuple[Row, ...]:
    """Where the predicted terms overrun the budget: a note first, and the pool row says which overran."""
    clamped = _clamped(terms)
    if not clamped:
        return rows
    notes.insert(0, clamped)
    overran = clamped.split(": ", 1)[1].split(";")[0]
    return tuple(
        replace(r, cause=f"clamped to 0: {overran}" + (f"; {r.cause}" if r.cause else ""))
        if r.key == "kv_pool"
        else r
        for r in rows
    )


def _rows(
    log: VLLMLog,
    pool: VLLMPool,
    terms: tuple[Term, ...],
    total_how: str,
    era: str,
    tp: int,
    fmt: str | None,
) -> tuple[Row, ...]:
    logged = _logged_figures(log)
    predicted = _predicted_figures(pool, terms)
    hows = {
        "device_total": total_how,
        "non_torch": "PREDICTED",
        "cudagraphs": "PREDICTED",
    }
    rows: list[Row] = []
    for key in ROW_KEYS:
        fig = logged[key]
        value = predicted[key]
        cause = _cause(key, fig, value, pool, era, tp, fmt) if fig is not None else ""
        rows.append(
            Row(
                key=key,
                logged=None if fig is None else fig.value,
                logged_line=None if fig is None else fig.line,
                predicted=value,
                how=hows.get(key, "PREDICTED"),
                cause=cause,
            )
        )
    return tuple(_pool_cause(r, rows) if r.key == "kv_pool" and r.cause else r for r in rows)


def _logged_figures(log: VLLMLog) -> dict[str, Figure | None]:
    """Each row's figure as the log printed it, from the rank whose pool is the smallest."""
    # The weights: V0 <= 0.6.4 "Loading model weights took X GB" and V1 "Model loading took X GiB" are both
    # 2**30-based; "model weights take" is the breakdown's figure.
    kv_fig = log.smallest("kv_pool")

    def same_rank(name: str) -> Figure | None:
        """The figure logged by the rank whose pool is the smallest (the one every rank then uses)."""
        found = log.figures.get(name, ())
        if kv_fig is not None:
            for fig in found:
                if fig.rank == kv_fig.rank:
                    return fig
        return found[0] if found else None

    return {
        "device_total": same_rank("total"),
        "requested": same_rank("requested"),
        "weights": same_rank("weights"),
        "activation": same_rank("activation"),
        "non_torch": same_rank("non_torch"),
        "cudagraphs": log.first("cudagraph_estimate"),
        "kv_pool": kv_fig,
        "num_blocks": log.smallest("num_blocks"),
        "kv_tokens": log.smallest("kv_tokens"),
        "max_concurrency": log.smallest("max_concurrency"),
    }


def _predicted_figures(pool: VLLMPool, terms: tuple[Term, ...]) -> dict[str, float]:
    """Each row's predicted figure: sizes in GiB, counts as they are."""
    g = GiB
    return {
        "device_total": terms[0].bytes / g,
        "requested": (pool.requested_bytes or 0) / g,
        "weights": pool.weights_bytes / g,
        "activation": pool.activation_bytes / g,
        "non_torch": pool.non_torch_bytes / g,
        "cudagraphs": pool.cudagraph_bytes / g,
        "kv_pool": pool.pool_bytes / g,
        "num_blocks": float(pool.num_blocks),
        "kv_tokens": float(pool.kv_cache_tokens),
        "max_concurrency": pool.max_concurrency,
    }


def _pool_cause(pool_row: Row, rows: list[Row]) -> Row:
    """The pool's difference in words: which terms the log measured differently, and which it did not show."""
    from dataclasses import replace  # noqa: PLC0415

    if pool_row.cause.startswith("same"):
        return pool_row
    terms = {
        "requested": "budget", "weights": "weights", "activation": "activation", "non_torch": "non-torch",
        "cudagraphs": "graphs",
    }  # fmt: skip
    measured = []
    unseen = []
    for r in rows:
        if r.key not in terms:
            continue
        if r.logged is None:
            if r.predicted and r.key != "requested":
                unseen.append(terms[r.key])
            continue
        if r.key == "cudagraphs" and not r.predicted:
            continue  # the version logs the estimate but does not take it from the pool (nothing deducted)
        diff = r.predicted - r.logged
        if abs(diff) > 0.005:
            # a term predicted larger takes from the pool; the budget gives to it
            effect = diff if r.key == "requested" else -diff
            measured.append((abs(diff), f"{terms[r.key]} {diff:+.2f} GiB (pool {effect:+.2f})"))
    parts = [text for _, text in sorted(measured, reverse=True)]
    text = "; ".join(parts) if parts else "no measured term differs"
    if unseen:
        text += f"; not in the log: {', '.join(unseen)}"
    return replace(pool_row, cause=text)


def _cause(key: str, fig: Figure, value: float, pool: VLLMPool, era: str, tp: int, fmt) -> str:
    """Why the predicted `value` differs from the logged figure `fig`, in words; `era`: how the version
    counts non-torch memory (overheads.py non_torch_era)."""
    half_step = 0.005 if fig.unit in ("GiB", "GB", "") else 0.0
    if abs(value - fig.value) <= half_step + 1e-9:
        return "same (within the log's rounding)"
    if key == "weights":
        return _weights_cause(value - fig.value, tp, fmt)
    if key == "non_torch":
        return _NON_TORCH_CAUSE_BY_ERA.get(era, _NON_TORCH_CAUSE_GROWTH)
    if key == "activation":
        return (
            "the profile run's peak depends on the batch (max_num_batched_tokens x max_num_seqs) and the "
            f"sampler; predicted with {pool.max_num_batched_tokens} tokens, {pool.max_num_seqs} sequences"
        )
    if key == "cudagraphs":
        return _CUDAGRAPHS_CAUSE_NOT_DEDUCTED if pool.cudagraph_bytes == 0 else _CUDAGRAPHS_CAUSE_DEDUCTED
    if key in ("num_blocks", "kv_tokens", "max_concurrency"):
        parts = ["follows the pool"]
        if key == "num_blocks" and tp > 1:
            parts.append("KV heads per rank (replicated when fewer than TP)")
        if pool.num_groups > 1:
            parts.append(f"{pool.num_groups} KV-cache groups (sliding-window/hybrid layers)")
        return "; ".join(parts)
    return _FIXED_CAUSES.get(key, "")


_FIXED_CAUSES = {
    "device_total": "the total came from a flag/table, not from this device's mem_get_info",
    "requested": "follows the device total",
    "kv_pool": "the terms above (pool = requested - weights - activation - non-torch - graphs)",
}
_NON_TORCH_CAUSE_BY_ERA = {
    "context": (
        "this version counts the CUDA context (no baseline): predicted as the context an RTX 3090 logged + "
        "local memory by the GPU's resident threads (+ NCCL under TP/PP), EMPIRICAL parts"
    ),
    "allocated": (
        "0.6.5-0.6.6 count the growth after the baseline plus the allocator's fragmentation (torch "
        "allocated, not reserved): the growth predicted by its parts, the fragmentation not"
    ),
    "graphs": (
        "growth after vLLM's baseline with the CUDA-graph estimate's captures inside the window (0.18-0.26; "
        "NCCL's memory under TP): EMPIRICAL size from vLLM 0.19.0 H100 logs"
    ),
}
_NON_TORCH_CAUSE_GROWTH = (
    "growth after vLLM's baseline, predicted as parts (local memory by the GPU's resident threads, NCCL / "
    "all-reduce under TP/PP where the baseline precedes them, before V1 0.11): EMPIRICAL sizes, see the "
    "non-torch term"
)
_CUDAGRAPHS_CAUSE_NOT_DEDUCTED = (
    "logged as an estimate only: this vLLM does not deduct it before the pool "
    "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS off by default before 0.20), so it is not in the pool"
)
_CUDAGRAPHS_CAUSE_DEDUCTED = (
    "graph estimate: PREDICTED per captured graph (EMPIRICAL size, see the CUDA graphs term); vLLM measures "
    "two per mode and extrapolates"
)


def _weights_cause(diff: float, tp: int, fmt) -> str:
    """`diff`: predicted minus logged weights, GiB."""
    if fmt in ("awq", "gptq"):
        return "quantized weights: vLLM repacks them for its kernels (Marlin), sizes differ"
    if fmt in ("bnb_nf4", "bnb_fp4") and diff < 0:
        return (
            "bitsandbytes: the checkpoint keeps more layers in 16 bit than the config shows "
            "(Unsloth's dynamic 4-bit llm_int8_skip_modules)"
        )
    if fmt == "mxfp4":
        return (
            "MXFP4 experts padded as vLLM's kernel for this GPU creates them (see the weights term); the "
            "rest: buffers vLLM adds (rotary cos/sin cache) and rounding"
        )
    if tp > 1:
        return "per rank: the planner splits vocab/replicated tensors as vLLM's parallel layers do, rounding"
    return "the tensors as vLLM loads them differ from the config's shapes (tied/padded embeddings)"


def _clamped(terms: tuple[Term, ...]) -> str | None:
    """A note when the predicted terms exceed the budget: vLLM would find no memory for the KV cache, and the
    pool row's 0 is a clamp, not a prediction of zero."""
    by_name = {t.name: t.bytes for t in terms}
    taken = ("weights", "activation peak", "non-torch", "CUDA graphs")
    over = by_name["requested"] - sum(by_name[name] for name in taken)
    if over >= 0:
        return None
    parts = ", ".join(f"{name} {by_name[name] / GiB:.2f}" for name in taken if by_name[name])
    return (
        f"the predicted pool is negative ({over / GiB:.2f} GiB), shown clamped to 0: the terms taken from "
        f"the "
        f"{by_name['requested'] / GiB:.2f} GiB budget ({parts} GiB) overrun it by {-over / GiB:.2f} GiB; "
        f"vLLM "
        "would refuse to start ('No available memory for the cache blocks')"
    )
