"""An SGLang server log beside memsight's prediction for the same model and server arguments.

The prediction (planner.engines.sglang.pool) uses none of the figures the log measured, except the free
memory SGLang saw before loading ("Load weight begin. avail mem"), which is the input its pool is a fraction
of, as a device total is for vLLM; the server arguments (mem_fraction_static, tp_size, page_size, context_len,
max_total_tokens, max_running_requests, kv_cache_dtype, quantization) are inputs too, read from the log's
`server_args=ServerArgs(...)` line or its command line, else from flags.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planner import limits
from planner.engines.base import setting_number
from planner.engines.sglang.defaults import Era, capture_batch_sizes, defaults_for, era_of
from planner.engines.sglang.log import STAGE_WORDS, SGLangLog
from planner.engines.sglang.pool import SOURCE_POOL, PoolInputs, SGLangPool, cell_bytes, sglang_pool
from planner.engines.worksheet import Row, Term, Worksheet
from planner.errors import PlannerError
from planner.units import GiB

if TYPE_CHECKING:
    from planner.spec import ModelSpec

ROW_LABELS = {
    "weights": "weights (GiB)",
    "free_after_weights": "free after weights (GiB)",
    "kv_bytes_per_token": "KV bytes per token",
    "kv_pool": "KV pool K+V (GiB)",
    "kv_tokens": "KV tokens",
    "profiled_tokens": "profiled tokens",
    "free_after_pool": "free after pool (GiB)",
    "max_running_requests": "max running requests",
    "cuda_graph_sizes": "CUDA graph batches",
    "cuda_graphs": "CUDA graphs (GiB)",
    "headroom": "outside the static part (GiB)",
}
COUNTS = frozenset(
    {"kv_bytes_per_token", "kv_tokens", "profiled_tokens", "max_running_requests", "cuda_graph_sizes"}
)
ROUNDING = 0.005  # SGLang prints GiB to 2 decimals

# flags of `memsight explain` that stand for SGLang server arguments (they win over the log)
GIVEN_KEYS = (
    "mem_fraction_static",
    "tp_size",
    "pp_size",
    "page_size",
    "context_length",
    "max_total_tokens",
    "max_running_requests",
    "kv_cache_dtype",
    "quantization",
    "free_gib",
)


@dataclass(frozen=True, slots=True)
class _Run:
    model_id: str
    spec: Any
    era: Era
    inputs: tuple[tuple[str, str, str], ...]
    pool_inputs: PoolInputs
    capture_bs_predicted: tuple[int, ...] | None
    missing: tuple[str, ...]  # why the pool is not predicted (an input the log lacks); () when it is
    kt_offload: bool  # ktransformers keeps experts on the CPU (--kt-*): weights and pool not comparable


def stage_problem(log: SGLangLog) -> str | None:
    """One line when the log is not SGLang's or stops before the KV cache was allocated; None when
    complete."""
    if not log.is_sglang:
        return (
            "not an SGLang server log: no server_args=ServerArgs(...) line and no SGLang memory line "
            "(Load weight end, KV Cache is allocated, max_total_num_tokens=...)"
        )
    if log.finished or log.first("kv_tokens") or log.first("max_total_num_tokens"):
        return None
    where = STAGE_WORDS[log.stage]
    if log.error:
        return f"SGLang died {where} (line {log.error_line}): {log.error}"
    return f"the log stops {where}: no KV cache figure to explain (the server died there, or the log was cut)"


def _setting(log: SGLangLog, given: Mapping[str, Any], key: str, *log_keys: str) -> tuple[str | None, str]:
    if given.get(key) is not None:
        return str(given[key]), "given"
    value = log.setting(*(log_keys or (key,)))
    return (value, "log") if value is not None else (None, "default")


def _era(log: SGLangLog, version: str | None, inputs: list[tuple[str, str, str]]):
    """Which SGLang release's rules apply: --sglang-version, else the log's wording, else the newest."""
    era = era_of(version, None if version else log.era)
    if version:
        where = "given (--sglang-version)"
    elif log.era:
        where = f"the log's wording dates it {era.label} (line {log.era_line})"
    else:
        where = f"not dated by the log: the newest modelled ({era.rule})"
    inputs.append(("SGLang release rules", era.rule, where))
    return era


def _default_fraction(
    log: SGLangLog,
    era,
    total_bytes: int | None,
    tp: int,
    pp: int,
    inputs: list[tuple[str, str, str]],
    missing: list[str],
) -> float | None:
    """SGLang's default mem_fraction_static where the log does not give one; it needs the device total."""
    if total_bytes is None:
        missing.append(
            "mem_fraction_static (not in the log: give --mem-fraction-static, or --total-gib for SGLang's "
            "default)"
        )
        return None
    chunk = log.first("chunked_prefill_size")
    default = defaults_for(
        era.rule, total_bytes / 2**20, tp, pp, chunked_prefill_size=int(chunk.value) if chunk else None
    )
    inputs.append(("mem_fraction_static", f"{default.mem_fraction_static}", f"default: {default.source}"))
    return default.mem_fraction_static


def _resolve(log: SGLangLog, options: Mapping[str, Any]) -> _Run:
    given = dict(options.get("given") or {})
    inputs: list[tuple[str, str, str]] = []
    model_id, spec = _model(log, options, inputs)
    era = _era(log, options.get("version"), inputs)

    def number(key: str, *log_keys: str, kind=int, what: str = "") -> tuple[Any, str]:
        text, where = _setting(log, given, key, *log_keys)
        if text is None:
            return None, where
        value = setting_number(text, key, where, 0, limits.MAX_CONFIG_INT, integer=kind is int)
        inputs.append((what or key, f"{value}", where))
        return value, where

    tp, _ = number("tp_size")
    pp, _ = number("pp_size")
    page, _ = number("page_size")
    max_total, _ = number("max_total_tokens")
    max_running, _ = number("max_running_requests")
    fraction, fraction_from = number("mem_fraction_static", kind=float)
    context = _context_len(log, given, spec, inputs)
    missing: list[str] = []
    free = _free_before(log, given, inputs)
    if free is None:
        missing.append(
            "the free memory before loading (no 'Load weight begin. avail mem' line: give --free-gib)"
        )
    if fraction is None:
        fraction = _default_fraction(log, era, options.get("total_bytes"), tp or 1, pp or 1, inputs, missing)
    kv_dtype = _kv_dtype(log, given, inputs)
    fmt, fmt_why = _weight_format(log, given, model_id)
    if fmt is not None:
        inputs.append(("weight format", fmt, fmt_why))
    pool_inputs = PoolInputs(
        spec=spec,
        free_before_weights=free or 0,
        mem_fraction_static=fraction or 0.5,
        context_len=int(context),
        era=era,
        tp=tp or 1,
        pp=pp or 1,
        page_size=page or 1,
        kv_dtype=kv_dtype,
        weight_format=fmt,
        max_total_tokens=max_total,
        max_running_requests=max_running,
    )
    capture = _capture_sizes(log, era)
    kt = log.setting("kt_weight_path") is not None  # ktransformers' CPU experts (its --kt-* arguments)
    return _Run(model_id, spec, era, tuple(inputs), pool_inputs, capture, tuple(missing), kt)


def _model(
    log: SGLangLog, options: Mapping[str, Any], inputs: list[tuple[str, str, str]]
) -> tuple[str, ModelSpec]:
    from planner.spec import load_spec  # noqa: PLC0415  (reads configs; only needed here)

    model_id = options.get("model") or log.model
    if not model_id:
        raise PlannerError("the log does not name the model (no server_args model_path): give --model CONFIG")
    try:
        spec = load_spec(model_id, allow_download=bool(options.get("allow_download")))
    except PlannerError as exc:
        raise PlannerError(
            f"the log's model {model_id!r} is not a catalog name, config or cached repo ({exc}); "
            "give --model CONFIG (a catalog name of the same architecture, e.g. qwen2.5-32b for QwQ-32B)"
        ) from exc
    inputs.append(("model", model_id, "given (--model)" if options.get("model") else "log (model_path)"))
    return model_id, spec


def _context_len(
    log: SGLangLog, given: Mapping[str, Any], spec: ModelSpec, inputs: list[tuple[str, str, str]]
) -> int:
    """The context length: given, else the log's context_len, else the config's max_position_embeddings."""
    context = given.get("context_length")
    logged = log.first("context_len")
    if context is None and logged is not None:
        context = int(logged.value)
        inputs.append(("context_len", f"{context:,}", f"log (line {logged.line})"))
    elif context is None:
        context = spec.max_position_embeddings
        inputs.append(("context_len", f"{context:,}", "the config's max_position_embeddings"))
    else:
        inputs.append(("context_len", f"{int(context):,}", "given"))
    return int(context)


def _capture_sizes(log: SGLangLog, era: Era) -> tuple[int, ...] | None:
    """The CUDA-graph batch sizes the run captured (None with --disable-cuda-graph)."""
    if log.setting("disable_cuda_graph") == "True":
        return None
    max_bs = log.setting("cuda_graph_max_bs")
    bs = int(max_bs) if max_bs and max_bs.isdigit() and len(max_bs) <= 9 else None  # not 5,000 digits
    return capture_batch_sizes(era.rule, None, bs)


def _free_before(log: SGLangLog, given: Mapping[str, Any], inputs: list[tuple[str, str, str]]) -> int | None:
    if given.get("free_gib") is not None:
        inputs.append(("free before weights", f"{float(given['free_gib']):.2f} GiB", "given (--free-gib)"))
        return round(float(given["free_gib"]) * GiB)
    fig = log.smallest("free_before_weights")
    if fig is None:
        return None
    inputs.append(("free before weights", f"{fig.text} GiB", f"log (line {fig.line}, the smallest rank)"))
    return fig.bytes


def _kv_dtype(log: SGLangLog, given: Mapping[str, Any], inputs: list[tuple[str, str, str]]) -> str:
    text, where = _setting(log, given, "kv_cache_dtype")
    if text and text != "auto":
        inputs.append(("kv_cache_dtype", text, where))
        return text
    if log.kv_dtype:
        inputs.append(("kv_cache_dtype", log.kv_dtype, "log (Using KV cache dtype)"))
        return log.kv_dtype
    return "auto"


def _weight_format(log: SGLangLog, given: Mapping[str, Any], model_id: str) -> tuple[str | None, str]:
    quant, where = _setting(log, given, "quantization")
    if quant:
        for key, fmt in (
            ("awq", "awq"),
            ("gptq", "gptq"),
            ("fp8", "fp8"),
            ("mxfp4", "mxfp4"),
            ("modelopt_fp4", "nvfp4"),
            ("bitsandbytes", "bnb_nf4"),
        ):
            if key in quant.lower():
                return fmt, f"quantization={quant} ({where})"
    name = model_id.lower()
    for key, fmt in (("-awq", "awq"), ("-gptq", "gptq"), ("-fp8", "fp8_block"), ("nvfp4", "nvfp4")):
        if key in name:
            return fmt, f"the model name says {fmt}"
    return None, ""


def explain(log: SGLangLog, options: Mapping[str, Any]) -> Worksheet:
    """The log's figures beside the pool predicted from its server arguments (the module's rule), on the
    worksheet every engine shares."""
    run = _resolve(log, options)
    cell, mla = cell_bytes(run.spec, run.pool_inputs.kv_dtype, run.pool_inputs.tp)
    pool = None if run.missing else sglang_pool(run.pool_inputs)
    rows = _rows(log, run, pool, cell)
    return Worksheet(
        engine="sglang",
        line=_summary_line(log, pool, cell, mla, run.pool_inputs.mem_fraction_static),
        title=f"SGLang ({run.era.label})",
        model=run.model_id,
        identity=(("sglang_version", run.era.label), ("engine", "sglang")),
        stage=log.stage,
        inputs=run.inputs,
        terms=_terms(run, pool),
        rows=rows,
        labels=ROW_LABELS,
        notes=tuple(_notes(run, pool)),
        counts=COUNTS,
        absolute=frozenset(),
    )


def _terms(run: _Run, pool: SGLangPool | None) -> tuple[Term, ...]:
    """The predicted terms, top to bottom; none when the log lacks an input of the pool, so no term stands
    for a figure that was not predicted."""
    if pool is None:
        return ()
    fraction = run.pool_inputs.mem_fraction_static
    return (
        Term("free at start", run.pool_inputs.free_before_weights, "log", "Load weight begin. avail mem"),
        Term("weights", pool.weights, pool.weights_how, pool.weights_source),
        Term(
            "headroom",
            pool.headroom,
            "PREDICTED",
            f"free at start x (1 - {fraction:g}): outside the static part (graphs, activations)",
        ),
        Term("KV budget", max(pool.rest, 0), "PREDICTED", SOURCE_POOL),
        Term(
            "KV pool",
            pool.kv_bytes,
            "PREDICTED",
            f"(tokens + page) x {pool.cell:,} B per token (planner.kv cell; memory_pool.py buffers)",
        ),
        Term(
            "req_to_token",
            pool.req_to_token,
            "PREDICTED",
            f"{pool.req_pool_size:,} requests x (context_len + 4) x int32 (ReqToTokenPool)",
        ),
    )


def _notes(run: _Run, pool: SGLangPool | None) -> list[str]:
    """The pool's own notes first, then the spec's assumptions, then why the pool is missing or capped and
    what makes the log's figures not comparable with the whole model's."""
    notes = list(run.spec.assumptions)
    if pool is not None:
        notes = [*pool.notes, *notes]
        cap = run.pool_inputs.max_total_tokens
        if cap is not None and pool.profiled_tokens > cap:
            notes.append(
                f"--max-total-tokens {cap:,} caps the pool below the {pool.profiled_tokens:,} tokens "
                "mem_fraction_static would allow"
            )
    else:
        notes.append("pool not predicted: the log lacks " + "; ".join(run.missing))
    if run.kt_offload:
        notes.append(
            "ktransformers (--kt-* arguments) keeps the routed experts on the CPU: the GPU holds only the "
            "dense "
            "part, so the weights and the pool are not comparable with the whole model's; the per-token KV is"
        )
    return notes


def _summary_line(log: SGLangLog, pool: SGLangPool | None, cell: int, mla: bool, fraction: float) -> str:
    """The worksheet's first line: the predicted pool beside the logged tokens, or only the bytes per token
    where the log lacks what the pool needs."""
    tokens = log.smallest("kv_tokens") or log.smallest("max_total_num_tokens")
    logged = f"{int(tokens.value):,} tokens" if tokens else "tokens: not in the log"
    if pool is not None:
        return (
            f"SGLang: predicted KV pool {pool.kv_bytes / GiB:.2f} GiB / {pool.tokens:,} tokens "
            f"({cell:,} B per "
            f"token, mem_fraction_static {fraction:g}); logged {logged}"
        )
    latent = " (MLA latent)" if mla else ""
    return f"SGLang: predicted {cell:,} B per token{latent}; logged {logged}; pool not predicted"


def _rows(log: SGLangLog, run: _Run, pool: SGLangPool | None, cell: int) -> tuple[Row, ...]:
    weights = log.smallest("weights")
    rows = [
        _figure_row(
            "weights",
            weights,
            None if pool is None else pool.weights / GiB,
            _weights_cause(weights, pool, run.kt_offload),
        ),
        _figure_row(
            "free_after_weights",
            log.smallest("free_after_weights"),
            None if pool is None else pool.free_after_weights / GiB,
            "free at start - weights: follows the weights",
        ),
    ]
    logged_kv, kv_line = _logged_kv(log)
    tokens_fig = log.smallest("kv_tokens") or log.smallest("max_total_num_tokens")
    page = run.pool_inputs.page_size
    per_token = None
    if logged_kv is not None and tokens_fig is not None:
        per_token = logged_kv * GiB / (tokens_fig.value + page)
    cell_cause = _cell_cause(per_token, cell, logged_kv, tokens_fig.value + page if tokens_fig else 0)
    rows.append(
        Row(
            "kv_bytes_per_token",
            per_token,
            kv_line,
            float(cell),
            "PREDICTED",
            cell_cause if per_token is not None else "",
        )
    )
    if pool is None:
        return tuple(rows)
    rows.append(
        Row(
            "kv_pool",
            logged_kv,
            kv_line,
            pool.kv_bytes / GiB,
            "PREDICTED",
            _pool_cause(logged_kv, pool, weights) if logged_kv is not None else "",
        )
    )
    return tuple(rows + _pool_rows(log, run, pool, tokens_fig))


def _figure_row(key: str, fig: Any, predicted: float | None, cause: str) -> Row:
    """A row for one logged figure (or none); the cause only where both sides are known."""
    value = None if fig is None else fig.value
    line = None if fig is None else fig.line
    known = value is not None and predicted is not None
    return Row(key, value, line, predicted, "PREDICTED", cause if known else "")


def _pool_rows(log: SGLangLog, run: _Run, pool: SGLangPool, tokens_fig: Any) -> list[Row]:
    """What follows the pool: tokens, free memory left, the request limit, CUDA graphs, the headroom."""
    rows = [_figure_row("kv_tokens", tokens_fig, float(pool.tokens), "follows the pool")]
    profiled = log.smallest("profiled_tokens")
    if profiled is not None:
        rows.append(
            _figure_row(
                "profiled_tokens", profiled, float(pool.profiled_tokens), "the pool before --max-total-tokens"
            )
        )
    rows.append(
        _figure_row(
            "free_after_pool",
            log.smallest("free_after_pool"),
            pool.free_after_pool / GiB,
            "free after weights - K/V buffers - req_to_token; the rest: the allocator's free slots and "
            "buffers created with the pool, not modelled",
        )
    )
    rows.append(
        _figure_row(
            "max_running_requests",
            log.smallest("max_running_requests"),
            float(pool.max_running_requests),
            f"min(tokens // 2, request pool of {pool.req_pool_size:,})",
        )
    )
    if run.capture_bs_predicted is not None:
        predicted_bs = [bs for bs in run.capture_bs_predicted if bs <= pool.req_pool_size]
        logged_count = log.capture_count
        rows.append(
            Row(
                "cuda_graph_sizes",
                None if logged_count is None else float(logged_count),
                log.capture_count_line,
                float(len(predicted_bs)),
                "PREDICTED",
                f"predicted batch sizes {predicted_bs[0]} .. {predicted_bs[-1]}"
                if logged_count is not None and predicted_bs
                else "",
            )
        )
    graphs = log.smallest("graphs")
    if graphs is not None:
        rows.append(
            Row(
                "cuda_graphs",
                graphs.value,
                graphs.line,
                None,
                "PREDICTED",
                "not derived: SGLang's graph memory depends on the attention backend and the model; it "
                f"must fit in the {pool.headroom / GiB:.2f} GiB outside the static part",
            )
        )
    rows.append(Row("headroom", None, None, pool.headroom / GiB, "PREDICTED", ""))
    return rows


def _logged_kv(log: SGLangLog) -> tuple[float | None, int | None]:
    k, v, kv = log.smallest("k_size"), log.smallest("v_size"), log.smallest("kv_size")
    if k is not None and v is not None:
        return k.value + v.value, k.line
    if kv is not None:
        return kv.value, kv.line
    return None, None


def _weights_cause(fig, pool: SGLangPool | None, kt_offload: bool) -> str:  # noqa: ANN001
    if fig is None or pool is None:
        return ""
    if kt_offload:
        return "ktransformers keeps the routed experts on the CPU: the GPU holds the dense part only"
    diff = pool.weights / GiB - fig.value
    if abs(diff) <= ROUNDING * 2:
        return "same (within the log's rounding)"
    if fig.value > 1.5 * pool.weights / GiB:
        return (
            f"SGLang's figure is the drop in the device's free memory while loading: {fig.value:.2f} GiB for "
            f"{pool.weights / GiB:.2f} GiB of tensors means another process allocated on this GPU meanwhile"
        )
    if diff < 0:
        return (
            f"SGLang's figure is the drop in free memory across loading: {-diff:.2f} GiB more than the "
            "tensors (CUDA kernel modules loaded on first use, allocator rounding, buffers the model "
            "builds), not modelled"
        )
    return f"the checkpoint holds {diff:.2f} GiB less than the config's shapes in this format"


def _cell_cause(per_token: float | None, cell: int, logged_gib: float | None, rows: float) -> str:
    if not per_token or logged_gib is None or rows <= 0:
        return ""
    # the log prints K and V to 0.01 GiB each: the bytes per token it implies lie in this window
    low = max(logged_gib - 2 * ROUNDING, 0) * GiB / rows
    high = (logged_gib + 2 * ROUNDING) * GiB / rows
    if low <= cell <= high:
        return (
            "same architecture (within the log's 0.01 GiB rounding): KV heads x head_dim x layers x 2 x "
            "element"
        )
    rel = cell / per_token - 1
    return (
        f"{rel:+.1%}: the log's buffers imply another KV width or dtype than the config's (check "
        "kv_cache_dtype, "
        "the model, and tp)"
    )


def _pool_cause(logged: float, pool: SGLangPool, weights) -> str:  # noqa: ANN001
    diff = pool.kv_bytes / GiB - logged
    if abs(diff) <= 2 * ROUNDING:
        return "same (within the log's rounding)"
    parts = []
    if weights is not None:
        w = pool.weights / GiB - weights.value
        if abs(w) > 2 * ROUNDING:
            parts.append(f"weights {w:+.2f} GiB (pool {-w:+.2f})")
    return "; ".join(parts) or "the budget differs: see the free-after-weights row"


def cause_words(row: Row) -> str:
    return re.sub(r"\s+", " ", row.cause)
