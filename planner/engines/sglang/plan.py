"""`memsight plan MODEL --engine sglang`: SGLang's own figures before launch.

From the model spec and the server arguments SGLang would run with (its defaults for the release and GPU
where one is not given): mem_fraction_static, chunked_prefill_size, cuda_graph_max_bs and the CUDA-graph
batch sizes (defaults.py), then the pool (pool.py): the weights per rank, the KV budget, max_total_num_tokens,
the K/V buffers, the request pool and max_running_requests, and the headroom left outside the static part.

The free memory SGLang measures before loading is the device total (as torch's mem_get_info reads it,
planner's GPU table) less the CUDA context and torch.distributed: STARTUP_BYTES, an EMPIRICAL size from the
one log that gives both (below); `--free-gib` (the "Load weight begin. avail mem" of an earlier run)
replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.engines.sglang.defaults import DEFAULT_VERSION, Defaults, defaults_for, era_of
from planner.engines.sglang.pool import SOURCE_POOL, PoolInputs, SGLangPool, sglang_pool
from planner.engines.worksheet import Term, max_users_meaning
from planner.errors import PlannerError
from planner.spec import ModelSpec
from planner.units import GiB, size_text

# 79.22 GiB (H100 80GB's mem_get_info total, planner's GPU table) - 78.43 GiB free at "Load weight begin" in
# the docs.sglang.io CI log of 2026-02-04 (tests/data/sglang_logs/SOURCES.md; an H100 80GB by its default
# mem_fraction_static 0.841), of which 0.09 GiB is torch.distributed's own ("Init torch distributed ends").
STARTUP_BYTES = round(0.79 * GiB)
STARTUP_SOURCE = (
    "EMPIRICAL: CUDA context + torch.distributed, 0.79 GiB = 79.22 GiB H100 total - 78.43 GiB free at "
    "'Load weight begin' (docs.sglang.io CI log, tests/data/sglang_logs); a GPU with fewer SMs has a "
    "smaller context"
)


@dataclass(frozen=True, slots=True)
class SGLangArguments:
    total_bytes: int | None = None  # the GPU's total as mem_get_info reads it
    free_bytes: int | None = None  # the free memory before loading, when known from a run
    version: str = DEFAULT_VERSION
    mem_fraction_static: float | None = None
    tp: int = 1
    pp: int = 1
    page_size: int = 1
    context_len: int | None = None
    max_total_tokens: int | None = None
    max_running_requests: int | None = None
    kv_dtype: str = "auto"
    weight_format: str | None = None
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs: int | None = None


@dataclass(frozen=True, slots=True)
class SGLangPlan:
    arguments: SGLangArguments
    defaults: Defaults
    free_before_weights: int
    free_how: str
    pool: SGLangPool
    capture_bs: tuple[int, ...]
    terms: tuple[Term, ...]
    notes: tuple[str, ...]


def predict(spec: ModelSpec, arguments: SGLangArguments) -> SGLangPlan:
    """SGLang's defaults for the release and GPU, the free memory at start, then the pool (pool.py)."""
    free, free_how, free_source = _free_at_start(arguments)
    notes: list[str] = []
    gpu_mib = (arguments.total_bytes if arguments.total_bytes is not None else free + STARTUP_BYTES) / 2**20
    defaults = defaults_for(
        arguments.version,
        gpu_mib,
        arguments.tp,
        arguments.pp,
        chunked_prefill_size=arguments.chunked_prefill_size,
        cuda_graph_max_bs=arguments.cuda_graph_max_bs,
    )
    fraction = arguments.mem_fraction_static or defaults.mem_fraction_static
    context = arguments.context_len or spec.max_position_embeddings
    if not context:
        raise PlannerError(f"{spec.name}: no max_position_embeddings in the config: give --context")
    era = era_of(arguments.version)
    pool = sglang_pool(
        PoolInputs(
            spec=spec, free_before_weights=free, mem_fraction_static=fraction, context_len=context, era=era,
            tp=arguments.tp, pp=arguments.pp, page_size=arguments.page_size, kv_dtype=arguments.kv_dtype,
            weight_format=arguments.weight_format, max_total_tokens=arguments.max_total_tokens,
            max_running_requests=arguments.max_running_requests,
        )
    )  # fmt: skip
    capture = tuple(bs for bs in defaults.capture_bs if bs <= pool.req_pool_size)
    if pool.refused:
        notes.append(
            "SGLang would refuse to start: the weights leave no KV budget at mem_fraction_static "
            f"{fraction:g} "
            "('Not enough memory. Please try to increase --mem-fraction-static.')"
        )
    terms = _terms(arguments, defaults, pool, (free, free_how, free_source), fraction, context)
    return SGLangPlan(arguments, defaults, free, free_how, pool, capture, terms, (*notes, *pool.notes))


def _free_at_start(arguments: SGLangArguments) -> tuple[int, str, str]:
    """(free memory before loading, how known, source): SGLang's pool is a fraction of this, not of the
    device total, so a run's logged figure wins over the total less the EMPIRICAL start-up cost."""
    if arguments.free_bytes is None and arguments.total_bytes is None:
        raise PlannerError(
            "SGLang sizes its pool from the GPU's free memory: give --gpu NAME, --total-gib X or --free-gib X"
        )
    if arguments.free_bytes is not None:
        return arguments.free_bytes, "given", "--free-gib (an earlier run's log)"
    total = arguments.total_bytes or 0
    return total - STARTUP_BYTES, "PREDICTED", STARTUP_SOURCE


def _terms(
    arguments: SGLangArguments, defaults: Defaults, pool: SGLangPool, free: tuple[int, str, str],
    fraction: float, context: int,
) -> tuple[Term, ...]:  # fmt: skip
    """The worksheet's terms, top to bottom: the headroom is what mem_fraction_static leaves outside the
    static part, so its term says whether the fraction was given or SGLang's default."""
    fraction_how = "given" if arguments.mem_fraction_static else "default"
    return (
        Term("free at start", *free),
        Term("weights", pool.weights, pool.weights_how, pool.weights_source),
        Term(
            "headroom",
            pool.headroom,
            "PREDICTED",
            f"free at start x (1 - mem_fraction_static {fraction:g}, {fraction_how}: {defaults.source})",
        ),
        Term("KV budget", max(pool.rest, 0), "PREDICTED", SOURCE_POOL),
        Term("KV pool", pool.kv_bytes, "PREDICTED", f"(tokens + page) x {pool.cell:,} B per token"),
        Term(
            "req_to_token",
            pool.req_to_token,
            "PREDICTED",
            f"{pool.req_pool_size:,} requests x (context_len {context:,} + 4) x int32",
        ),
    )


def plan_json(plan: SGLangPlan) -> dict:
    """The `sglang` object of `memsight plan --engine sglang --json` (bytes as integers)."""
    pool = plan.pool
    return {
        "sglang_version": plan.arguments.version,
        "free_before_weights_bytes": plan.free_before_weights,
        "mem_fraction_static": plan.arguments.mem_fraction_static or plan.defaults.mem_fraction_static,
        "chunked_prefill_size": plan.defaults.chunked_prefill_size,
        "cuda_graph_max_bs": plan.defaults.cuda_graph_max_bs,
        "cuda_graph_bs": list(plan.capture_bs),
        "weights_bytes": pool.weights,
        "kv_bytes_per_token": pool.cell,
        "kv_budget_bytes": max(pool.rest, 0),
        "max_total_num_tokens": None if pool.refused else pool.tokens,  # null: SGLang refuses to start
        "k_bytes": None if pool.refused else pool.k_bytes,
        "v_bytes": None if pool.refused else pool.v_bytes,
        "req_to_token_bytes": pool.req_to_token,
        "max_running_requests": pool.max_running_requests,
        "headroom_bytes": pool.headroom,
        "notes": list(plan.notes),
    }


def render(plan: SGLangPlan) -> list[str]:
    pool = plan.pool
    fraction = plan.arguments.mem_fraction_static or plan.defaults.mem_fraction_static
    bs = plan.capture_bs
    lines = [
        f"  SGLang ({plan.arguments.version} rules): mem_fraction_static {fraction:g}, chunked_prefill_size "
        f"{plan.defaults.chunked_prefill_size:,}, cuda_graph_max_bs "
        f"{plan.defaults.cuda_graph_max_bs or 'uncapped'}",
        f"    free at start        {size_text(plan.free_before_weights):>13}  ({plan.free_how})",
        f"    weights (per rank)   {size_text(pool.weights):>13}",
        f"    KV budget            {size_text(max(pool.rest, 0)):>13}  = free after weights - free x (1 - "
        f"{fraction:g})",
        *_pool_lines(pool),
        f"    req_to_token         {size_text(pool.req_to_token):>13}  ({pool.req_pool_size:,} requests)",
        f"    max_running_requests {pool.max_running_requests:>9,}",
        f"    outside the static   {size_text(pool.headroom):>13}  (CUDA graphs, activations, workspaces)",
        f"    CUDA graph batches   {len(bs):>9}      ({_sizes_text(bs)})",
    ]
    lines.extend(f"    note: {note}" for note in plan.notes)
    return lines


def answers(plan: SGLangPlan, tokens_per_user: int, max_users: int) -> str:
    """How SGLang's own figure of users relates to the four-bucket plan's "max users" above it."""
    pool = plan.pool
    ours = max_users_meaning(max_users, tokens_per_user)
    if pool.refused:
        return f"which answers what: SGLang would refuse to start and serve no one; {ours}"
    by_tokens = pool.tokens // tokens_per_user
    served = f"{min(by_tokens, pool.max_running_requests):,}"
    if by_tokens > pool.max_running_requests:
        served += f" (capped by max_running_requests {pool.max_running_requests:,})"
    return (
        f"which answers what: SGLang's pool holds max_total_num_tokens {pool.tokens:,} tokens, so it serves "
        f"{served} users at {tokens_per_user:,} tokens at once (after its own weights, within "
        f"mem_fraction_static of the free memory); {ours}"
    )


def _pool_lines(pool: SGLangPool) -> list[str]:
    """max_total_num_tokens and the K + V buffers; "-" when SGLang would refuse: it allocates none."""
    if pool.refused:
        return [
            f"    max_total_num_tokens {'-':>9}      "
            f"(none: the KV budget holds no token of {pool.cell:,} B per rank)",
            f"    K + V buffers        {'-':>9}      (none: SGLang refuses to start before allocating them)",
        ]
    return [
        f"    max_total_num_tokens {pool.tokens:>9,}      ({pool.cell:,} B per token per rank)",
        f"    K + V buffers        {size_text(pool.kv_bytes):>13}",
    ]


def _sizes_text(bs: tuple[int, ...]) -> str:
    head = ", ".join(map(str, bs[:6]))
    return head + (f" ... {bs[-1]}" if len(bs) > 6 else "")
