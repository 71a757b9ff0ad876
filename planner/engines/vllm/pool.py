"""vLLM's KV-cache pool, block count, "GPU KV cache size" and "Maximum concurrency", version by version.

Follows ../shared/reference/vllm-kv-formulas.md (read from the vLLM release sdists 0.6.4.post1 ... 0.33.0);
the section letters below refer to it. Everything is per rank (per GPU); every rank computes its blocks and
all are then set to the minimum over ranks (a.3). Float arithmetic is kept where vLLM uses floats (requested
memory, available memory), so the block count rounds exactly as vLLM's does.

Figures vLLM measures at startup (weights, PyTorch activation peak, non-torch memory, CUDA-graph estimate)
can be given to reproduce a real log. When the activation peak is not given, activation.profile_activation()
PREDICTS it from what vLLM's profile run allocates in the version asked for, and the result is flagged as a
prediction. The scheduler's defaults are in scheduler.py, hybrid pages in hybrid.py, the start-up overheads
(non-torch memory, CUDA graphs, device totals) in overheads.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from planner.activations import ACTIVATION_BYTES
from planner.engines.vllm.activation import ProfileActivation, profile_activation
from planner.engines.vllm.hybrid import HybridPages, hybrid_for_pool
from planner.engines.vllm.scheduler import default_scheduler_limits
from planner.engines.vllm.version import (
    DEFAULT_VLLM_VERSION,
    READ_VERSIONS,
    Version,
    default_engine,
    parse_version,
)
from planner.errors import PlannerError
from planner.formats import weight_bytes
from planner.kv import STATE_KINDS, layer_kv_bytes
from planner.params import count_params
from planner.spec import LayerSpec, ModelSpec
from planner.topology import Topology, make_topology, stage_weight_bytes
from planner.units import GiB, ceil_div


@dataclass(frozen=True, slots=True)
class KVGroup:
    """One KV-cache group of vLLM's V1 manager (or the single V0 cache)."""

    kind: str  # "full" | "sliding" | "mla" | "linear" / "mamba" (fixed state, hybrid models)
    window: int | None
    layers: int  # layers per group (group_size; padded groups count as full)
    page_bytes: int  # bytes of one block of one layer
    blocks_per_request: int  # blocks one request of max_model_len needs in this group (a.4)


@dataclass(frozen=True, slots=True)
class VLLMRank:
    rank: int
    pp_stage: int
    requested_bytes: float
    weights_bytes: int
    pool_bytes: int
    bytes_per_block: int
    num_blocks: int
    activation_bytes: int = 0  # the activation peak this rank's stage subtracts


@dataclass(frozen=True, slots=True)
class VLLMPool:
    version: str
    engine: str  # "V0" | "V1"
    total_bytes: int | None
    gpu_memory_utilization: float | None
    requested_bytes: int | None  # of the limiting rank (floored when vLLM keeps a float)
    weights_bytes: int
    activation_bytes: int
    activation_predicted: bool
    non_torch_bytes: int
    cudagraph_bytes: int
    pool_bytes: int  # KV pool of the limiting rank
    block_size: int
    bytes_per_block: int
    num_blocks: int  # minimum over ranks, what every rank then uses
    num_groups: int
    blocks_per_request: int
    kv_cache_tokens: int  # the number on the "GPU KV cache size" line (V0: blocks x block size)
    max_concurrency: float
    max_concurrency_text: str  # as logged, "%.2fx"
    max_model_len: int
    max_num_batched_tokens: int
    groups: tuple[KVGroup, ...]
    ranks: tuple[VLLMRank, ...]
    log_lines: tuple[str, ...]
    notes: tuple[str, ...]
    max_num_seqs: int = 0
    activation_profile: ProfileActivation | None = None  # the term-by-term prediction, when predicted


def _attention_layers(spec: ModelSpec, layers: Sequence[int], hybrid: HybridPages | None) -> list[LayerSpec]:
    """The layers of `layers` that hold KV blocks (attention or, with the hybrid pages, state)."""
    attn_layers: list[LayerSpec] = []
    for index in layers:
        layer = spec.layers[index]
        attention = layer.attention
        if attention is None:
            continue
        if attention.kind in STATE_KINDS and hybrid is None:
            raise PlannerError(f"{spec.name}: state layers need the hybrid page unification (internal error)")
        attn_layers.append(layer)
    if not attn_layers:
        raise PlannerError(f"{spec.name}: no attention layers on this rank, so vLLM allocates no KV blocks")
    return attn_layers


_Buckets = dict[tuple[str, int | None], list[LayerSpec]]


def _buckets(attn_layers: list[LayerSpec], treat_all_full: bool) -> _Buckets:
    """The layers by (kind, sliding window): one KV-cache group per bucket, or several of one size."""
    buckets: _Buckets = {}
    for layer in attn_layers:
        attention = layer.attention
        assert attention is not None
        kind = "full" if treat_all_full and attention.kind == "sliding" else attention.kind
        window = attention.window if kind == "sliding" else None
        buckets.setdefault((kind, window), []).append(layer)
    return buckets


def _uniform_group_size(sizes: list[int], version: Version) -> int:
    """Layers per KV group where the buckets (kind, window) share one page size.

    _get_kv_cache_groups_uniform_page_size: the smallest bucket sets the group size
    (v0.11.0:kv_cache_utils.py:977); from 0.12 the largest one does when it is not much larger, "much" being
    1.25x in 0.12-0.14 (v0.12.0:kv_cache_utils.py:1015-1023, v0.14.0:1034-1042) and 1.5x from 0.20
    (v0.20.0:1125-1135, v0.33.0:kv_cache_planning.py:520-532). Versions between read ones take the rule of the
    one before them."""
    if version >= (0, 12, 0):
        factor = 1.5 if version >= (0, 20, 0) else 1.25
        if max(sizes) < factor * min(sizes):
            return max(sizes)
    return min(sizes)


def _groups_for_stage(
    spec: ModelSpec,
    layers: Sequence[int],
    *,
    version: Version,
    engine: str,
    kv_dtype: str,
    tp: int,
    block_size: int,
    max_model_len: int,
    lookahead_tokens: int,
    hybrid_manager: bool,
    notes: list[str],
    hybrid: HybridPages | None = None,
) -> tuple[list[KVGroup], int]:
    """The KV groups of one rank and its bytes per block (a.3, a.4). `hybrid`: the unified pages of a model
    with Mamba / linear-attention layers (their state: blocks per group, padded to the attention page)."""
    attn_layers = _attention_layers(spec, layers, hybrid)

    def page(layer: LayerSpec) -> int:
        if hybrid is not None and layer.attention is not None and layer.attention.kind in STATE_KINDS:
            return hybrid.page_bytes  # the state page, padded to the attention page
        return layer_kv_bytes(layer, block_size, kv_dtype, spec, tp)

    def blocks_req(kind: str, window: int | None) -> int:
        if kind in STATE_KINDS:
            assert hybrid is not None
            return hybrid.state_blocks_per_request
        if kind == "sliding" and window is not None:
            return ceil_div(min(window - 1 + lookahead_tokens, max_model_len), block_size) + 1
        return ceil_div(max_model_len, block_size)

    # V0, and V1 before the hybrid manager, size every attention layer's cache as full attention.
    treat_all_full = engine == "V0" or version < (0, 9, 1) or not hybrid_manager
    buckets = _buckets(attn_layers, treat_all_full)
    if treat_all_full and any(layer.attention.kind == "sliding" for layer in attn_layers):  # type: ignore[union-attr]
        notes.append("sliding-window layers are allocated as full attention (no hybrid KV-cache manager)")

    if len(buckets) == 1:
        ((kind, window), members) = next(iter(buckets.items()))
        bytes_per_block = sum(page(layer) for layer in members)
        return [
            KVGroup(kind, window, len(members), bytes_per_block, blocks_req(kind, window))
        ], bytes_per_block

    return _uniform_groups(spec, attn_layers, buckets, page, blocks_req, version, notes)


def _uniform_groups(
    spec: ModelSpec,
    attn_layers: list[LayerSpec],
    buckets: _Buckets,
    page: Callable[[LayerSpec], int],
    blocks_req: Callable[[str, int | None], int],
    version: Version,
    notes: list[str],
) -> tuple[list[KVGroup], int]:
    """Several kinds of layer: groups of one size, every layer one page of the same bytes, the last group of
    a kind padded with empty layers."""
    pages = {page(layer) for layer in attn_layers}
    if len(pages) != 1:
        raise PlannerError(
            f"{spec.name}: hybrid layers with different page sizes need vLLM's page unification, "
            "which is not modelled; plan this model without --engine vllm"
        )
    page_bytes = pages.pop()
    sizes = [len(members) for members in buckets.values()]
    group_size = _uniform_group_size(sizes, version)
    groups: list[KVGroup] = []
    for (kind, window), members in buckets.items():
        for _ in range(ceil_div(len(members), group_size)):
            groups.append(
                KVGroup(kind, window, group_size, page_bytes * group_size, blocks_req(kind, window))
            )
    padded = sum(ceil_div(n, group_size) * group_size for n in sizes) - sum(sizes)
    if padded:
        notes.append(f"{padded} padding layer(s) added to fill KV groups of {group_size} layers")
    return groups, page_bytes * group_size


def vllm_pool(
    spec: ModelSpec,
    *,
    max_model_len: int,
    version: str = DEFAULT_VLLM_VERSION,
    engine: str | None = None,
    total_bytes: int | None = None,
    gpu_memory_utilization: float = 0.9,
    weights_bytes: int | Sequence[int] | None = None,
    weight_format: str | None = None,
    activation_bytes: int | None = None,
    non_torch_bytes: int = 0,
    cudagraph_bytes: int = 0,
    estimate_cudagraphs: bool | None = None,
    kv_pool_bytes: int | None = None,
    block_size: int = 16,
    kv_dtype: str = "auto",
    tp: int = 1,
    pp: int = 1,
    pp_layers: Sequence[int] | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    async_scheduling: bool = False,
    hybrid_manager: bool = True,
    usage_context: str = "openai",
    device_name: str | None = None,
    cuda_capability: tuple[int, int] | None = None,
    sampler_path: str | None = None,
    sm_count: int | None = None,
    mamba_ssm_cache_dtype: str = "auto",
    enable_prefix_caching: bool | None = None,
    scheduler_total_bytes: int | None = None,
    data_parallel: int = 1,
) -> VLLMPool:
    """Pool bytes, blocks, KV tokens and max concurrency as vLLM `version` computes and logs them.

    weights_bytes: per rank (one int for every rank, or one per pipeline stage); computed from the spec when
    None. kv_pool_bytes: the pool given directly (--kv-cache-memory-bytes), skipping the profile.
    max_num_batched_tokens / max_num_seqs: vLLM's defaults for the version, usage_context ("openai" for
    `vllm serve`, "llm" for the LLM class) and device (total_bytes, device_name, cuda_capability) when None.
    activation_bytes None: profile_activation() predicts it (flagged PREDICTED, every term in the notes).
    Hybrid models (Mamba-2 / Gated DeltaNet layers): V1 0.10.2 - 0.26.x, see hybrid_pages();
    mamba_ssm_cache_dtype is vLLM's --mamba-ssm-cache-dtype ("auto": the per-model default);
    enable_prefix_caching (None: the version's default) matters for hybrids only. scheduler_total_bytes:
    the total vLLM's scheduler defaults read (NVML's; 0 where NVML cannot answer, as on GB10), when it is not
    total_bytes. data_parallel: the DP size, for the MoE layers' all-gathered tokens in the profile run.
    """
    ver = parse_version(version)
    notes: list[str] = []
    engine = _engine_for(version, ver, engine, notes)
    _check_sizes(
        max_model_len=max_model_len, block_size=block_size, max_num_seqs=max_num_seqs,
        non_torch_bytes=non_torch_bytes, cudagraph_bytes=cudagraph_bytes, activation_bytes=activation_bytes,
        kv_pool_bytes=kv_pool_bytes, total_bytes=total_bytes, gpu_memory_utilization=gpu_memory_utilization,
        max_num_batched_tokens=max_num_batched_tokens,
    )  # fmt: skip
    max_num_batched_tokens, max_num_seqs = _scheduler_limits(
        spec, version, engine, max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs, usage_context=usage_context,
        total_bytes=total_bytes if scheduler_total_bytes is None else scheduler_total_bytes,
        device_name=device_name, cuda_capability=cuda_capability, notes=notes,
    )  # fmt: skip

    topology: Topology = make_topology(spec, tp, pp, pp_layers)
    per_stage = _weights_per_stage(spec, topology, weights_bytes, weight_format, notes)
    profile, stage_activation = _activation_per_stage(
        spec, topology, activation_bytes, max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs, version=version, engine=engine, weight_format=weight_format,
        cuda_capability=cuda_capability, sampler_path=sampler_path, sm_count=sm_count, dp=data_parallel,
        notes=notes,
    )  # fmt: skip
    graphs = _deducted_graphs(
        version, ver, engine, cudagraph_bytes, estimate_cudagraphs, kv_pool_bytes, notes
    )
    _note_given_pool(version, ver, kv_pool_bytes, notes)

    hybrid, block_size = _hybrid_pages(
        spec, topology, version=version, ver=ver, engine=engine, kv_dtype=kv_dtype, block_size=block_size,
        max_model_len=max_model_len, cuda_capability=cuda_capability,
        mamba_ssm_cache_dtype=mamba_ssm_cache_dtype, enable_prefix_caching=enable_prefix_caching,
        hybrid_manager=hybrid_manager, notes=notes,
    )  # fmt: skip
    stage_groups, stage_block_bytes = _stage_groups(
        spec, topology, version=ver, engine=engine, kv_dtype=kv_dtype, block_size=block_size,
        max_model_len=max_model_len, hybrid_manager=hybrid_manager, notes=notes, hybrid=hybrid,
        lookahead_tokens=_lookahead_tokens(ver, pp, async_scheduling, max_num_batched_tokens),
    )  # fmt: skip
    budget = _Budget(
        total_bytes=total_bytes, gpu_memory_utilization=gpu_memory_utilization, kv_pool_bytes=kv_pool_bytes,
        non_torch_bytes=non_torch_bytes, graphs_bytes=graphs,
        exact_request=engine == "V1" and ver >= (0, 14, 0),
    )  # fmt: skip
    ranks = _rank_pools(topology, stage_block_bytes, per_stage, stage_activation, budget)
    asked = _Asked(version, ver, engine, total_bytes, gpu_memory_utilization, kv_pool_bytes, non_torch_bytes,
                   max_model_len, max_num_batched_tokens, max_num_seqs)  # fmt: skip
    return _pool_from_ranks(
        ranks, stage_groups, topology, asked, block_size=block_size, graphs=graphs, profile=profile,
        hybrid=hybrid, notes=notes,
    )  # fmt: skip


def _activation_per_stage(
    spec: ModelSpec, topology: Topology, activation_bytes: int | None, *, max_num_batched_tokens: int,
    max_num_seqs: int, version: str, engine: str, weight_format: str | None,
    cuda_capability: tuple[int, int] | None, sampler_path: str | None, sm_count: int | None, dp: int,
    notes: list[str],
) -> tuple[ProfileActivation | None, list[int]]:  # fmt: skip
    """(the prediction, each stage's activation peak): the given peak, or profile_activation()'s."""
    if activation_bytes is not None:
        return None, [activation_bytes] * topology.pp
    profile = profile_activation(
        spec, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs, version=version,
        engine=engine, tp=topology.tp, weight_format=weight_format, cuda_capability=cuda_capability,
        sampler_path=sampler_path, sm_count=sm_count, dp=dp,
    )  # fmt: skip
    return profile, _stage_activations(spec, profile, topology.pp, notes)


def _note_given_pool(version: str, ver: Version, kv_pool_bytes: int | None, notes: list[str]) -> None:
    """Before 0.11 a given pool cannot come from vLLM's own flag, so say where it is assumed to come from."""
    if kv_pool_bytes is not None and ver < (0, 11, 0):
        notes.append(
            f"vLLM {version} has no --kv-cache-memory-bytes; the pool is taken as given (e.g. from a log)"
        )


def _hybrid_pages(
    spec: ModelSpec, topology: Topology, *, version: str, ver: Version, engine: str, kv_dtype: str,
    block_size: int, max_model_len: int, cuda_capability: tuple[int, int] | None, mamba_ssm_cache_dtype: str,
    enable_prefix_caching: bool | None, hybrid_manager: bool, notes: list[str],
) -> tuple[HybridPages | None, int]:  # fmt: skip
    """(the unified pages, the block size they impose) with state layers; without, (None, block_size)."""
    if not _has_state_layers(spec):
        return None, block_size
    hybrid = hybrid_for_pool(
        spec, version=version, ver=ver, engine=engine, kv_dtype=kv_dtype, tp=topology.tp,
        block_size=block_size, max_model_len=max_model_len, cuda_capability=cuda_capability,
        mamba_ssm_cache_dtype=mamba_ssm_cache_dtype, enable_prefix_caching=enable_prefix_caching,
        hybrid_manager=hybrid_manager, notes=notes,
    )  # fmt: skip
    return hybrid, hybrid.block_size


@dataclass(frozen=True, slots=True)
class _Asked:
    """What vllm_pool was asked for, resolved (the version parsed, the scheduler's defaults filled in), as
    the pool it returns reports it."""

    version: str
    ver: Version
    engine: str
    total_bytes: int | None
    gpu_memory_utilization: float
    kv_pool_bytes: int | None
    non_torch_bytes: int
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int


def _pool_from_ranks(
    ranks: list[VLLMRank],
    stage_groups: list[list[KVGroup]],
    topology: Topology,
    asked: _Asked,
    *,
    block_size: int,
    graphs: int,
    profile: ProfileActivation | None,
    hybrid: HybridPages | None,
    notes: list[str],
) -> VLLMPool:
    """Every rank then uses the limiting rank's blocks (a.3): its pool, its "GPU KV cache size" and
    "Maximum concurrency" lines, and what the notes say of them."""
    limiting = _limiting_rank(ranks, topology, notes)
    groups = stage_groups[limiting.pp_stage]
    blocks_per_request = sum(g.blocks_per_request for g in groups)
    concurrency, tokens, text, log = _limiting_concurrency(
        asked, limiting, blocks_per_request, len(groups), block_size=block_size, hybrid=hybrid, notes=notes
    )
    return VLLMPool(
        version=asked.version,
        engine=asked.engine,
        total_bytes=asked.total_bytes,
        gpu_memory_utilization=None if asked.kv_pool_bytes is not None else asked.gpu_memory_utilization,
        requested_bytes=None if asked.kv_pool_bytes is not None else math.floor(limiting.requested_bytes),
        weights_bytes=limiting.weights_bytes,
        activation_bytes=limiting.activation_bytes,
        activation_predicted=profile is not None,
        non_torch_bytes=asked.non_torch_bytes,
        cudagraph_bytes=graphs,
        pool_bytes=limiting.pool_bytes,
        block_size=block_size,
        bytes_per_block=limiting.bytes_per_block,
        num_blocks=limiting.num_blocks,
        num_groups=len(groups),
        blocks_per_request=blocks_per_request,
        kv_cache_tokens=tokens,
        max_concurrency=concurrency,
        max_concurrency_text=text,
        max_model_len=asked.max_model_len,
        max_num_batched_tokens=asked.max_num_batched_tokens,
        groups=tuple(groups),
        ranks=tuple(ranks),
        log_lines=tuple(log),
        notes=tuple(notes),
        max_num_seqs=asked.max_num_seqs,
        activation_profile=profile,
    )


def _limiting_rank(ranks: list[VLLMRank], topology: Topology, notes: list[str]) -> VLLMRank:
    """The rank with the fewest KV blocks (the lowest rank among equals), noted where the ranks differ."""
    limiting = min(ranks, key=lambda r: (r.num_blocks, r.rank))
    num_blocks = limiting.num_blocks
    if topology.world_size > 1 and len({r.num_blocks for r in ranks}) > 1:
        notes.append(f"ranks differ; every rank uses the minimum, {num_blocks} blocks (rank {limiting.rank})")
    if num_blocks == 0:
        notes.append("no memory left for KV blocks: vLLM would refuse to start")
    return limiting


def _limiting_concurrency(
    asked: _Asked,
    limiting: VLLMRank,
    blocks_per_request: int,
    num_groups: int,
    *,
    block_size: int,
    hybrid: HybridPages | None,
    notes: list[str],
) -> tuple[float, int, str, list[str]]:
    """The limiting rank's maximum concurrency (a number and its "%.2fx" text), the KV tokens it holds and
    the log lines vLLM prints of them; a note when one request of max_model_len does not fit."""
    ver, engine, max_model_len = asked.ver, asked.engine, asked.max_model_len
    num_blocks = limiting.num_blocks
    concurrency, tokens = _concurrency_and_tokens(
        ver, engine, num_blocks, blocks_per_request, block_size, max_model_len, num_groups, hybrid
    )
    text = f"{concurrency:.2f}x"
    log = _log_lines(
        ver, engine, num_blocks, tokens, text, max_model_len, limiting, asked.kv_pool_bytes, hybrid
    )
    if concurrency < 1 and num_blocks:
        notes.append(
            f"one request of max_model_len {max_model_len} does not fit the pool: vLLM refuses to start "
            "(lower max_model_len or raise gpu_memory_utilization)"
        )
    return concurrency, tokens, text, log


def _has_state_layers(spec: ModelSpec) -> bool:
    """Mamba / linear-attention layers, whose fixed state shares the pool's pages (hybrid.py)."""
    return any(layer.attention is not None and layer.attention.kind in STATE_KINDS for layer in spec.layers)


def _lookahead_tokens(ver: Version, pp: int, async_scheduling: bool, max_num_batched_tokens: int) -> int:
    """The tokens a sliding-window group's blocks per request look ahead (a.4): from 0.26 one scheduled
    batch per pipeline stage in flight (one more under async scheduling), before it one batch."""
    if ver >= (0, 26, 0):
        concurrent_batches = pp + 1 if async_scheduling else pp
        return concurrent_batches * max_num_batched_tokens
    return max_num_batched_tokens


def _engine_for(version: str, ver: Version, engine: str | None, notes: list[str]) -> str:
    """The V0/V1 engine asked for (or the version's default), refusing versions the formulas do not cover."""
    if ver < (0, 6, 4):
        raise PlannerError(
            f"vLLM {version} is older than the oldest version the formulas were read from (0.6.4)"
        )
    if ver > parse_version(READ_VERSIONS[-1]) and (ver[0], ver[1]) != (0, 33):
        notes.append(f"vLLM {version} was not read; the formulas of {READ_VERSIONS[-1]} are applied")
    elif f"{ver[0]}.{ver[1]}.{ver[2]}" not in READ_VERSIONS:
        notes.append(
            f"vLLM {version} was not read itself; the rules of the nearest read version before it apply"
        )
    engine = (engine or default_engine(ver)).upper()
    if engine not in ("V0", "V1"):
        raise PlannerError(f"vLLM engine must be V0 or V1, got {engine!r}")
    if engine == "V0" and ver >= (0, 11, 0):
        raise PlannerError(f"vLLM {version} has no V0 engine (removed after 0.10.x)")
    if engine == "V1" and ver < (0, 7, 0):
        raise PlannerError(f"vLLM {version} has no V1 engine (opt-in from 0.7.0)")
    return engine


def _check_sizes(
    *,
    max_model_len: int,
    block_size: int,
    max_num_seqs: int | None,
    non_torch_bytes: int,
    cudagraph_bytes: int,
    activation_bytes: int | None,
    kv_pool_bytes: int | None,
    total_bytes: int | None,
    gpu_memory_utilization: float,
    max_num_batched_tokens: int | None,
) -> None:
    for name, value in (
        ("max_model_len", max_model_len),
        ("block_size", block_size),
        ("max_num_seqs", 1 if max_num_seqs is None else max_num_seqs),
    ):
        if value < 1:
            raise PlannerError(f"{name} must be at least 1, got {value}")
    for name, value in (
        ("non-torch memory", non_torch_bytes),
        ("CUDA-graph memory", cudagraph_bytes),
        ("activation peak", activation_bytes or 0),
        ("KV pool", kv_pool_bytes or 0),
    ):
        if value < 0:
            raise PlannerError(f"{name} must not be negative, got {value} bytes")
    if kv_pool_bytes is None:
        if total_bytes is None or total_bytes <= 0:
            raise PlannerError("vLLM pool needs the device's total memory (or a pool given directly)")
        if not 0 < gpu_memory_utilization <= 1:
            raise PlannerError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if max_num_batched_tokens is not None and max_num_batched_tokens < 1:
        raise PlannerError(f"max_num_batched_tokens must be at least 1, got {max_num_batched_tokens}")


def _scheduler_limits(
    spec: ModelSpec,
    version: str,
    engine: str,
    *,
    max_model_len: int,
    max_num_batched_tokens: int | None,
    max_num_seqs: int | None,
    usage_context: str,
    total_bytes: int | None,
    device_name: str | None,
    cuda_capability: tuple[int, int] | None,
    notes: list[str],
) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs): the given ones, the version's defaults for the others."""
    if max_num_batched_tokens is not None and max_num_seqs is not None:
        return max_num_batched_tokens, max_num_seqs  # both given: no defaults read, so nothing to note
    default_tokens, default_seqs, why = default_scheduler_limits(
        version,
        engine,
        max_model_len=max_model_len,
        usage_context=usage_context,
        total_bytes=total_bytes,
        device_name=device_name,
        cuda_capability=cuda_capability,
        spec=spec,
    )
    *context, tokens_note, seqs_note = why
    notes.extend(context)
    if max_num_batched_tokens is None:
        max_num_batched_tokens = default_tokens
        notes.append(tokens_note)
    else:
        notes.append(f"max_num_batched_tokens {max_num_batched_tokens} (given)")
    if max_num_seqs is None:
        max_num_seqs = default_seqs
        if engine == "V1" and parse_version(version) >= (0, 11, 0):
            max_num_seqs = min(max_num_seqs, max_num_batched_tokens)  # v0.11.0:arg_utils.py:1678
        notes.append(seqs_note if max_num_seqs == default_seqs else f"max_num_seqs {max_num_seqs}")
    else:
        notes.append(f"max_num_seqs {max_num_seqs} (given)")
    return max_num_batched_tokens, max_num_seqs


def _weights_per_stage(
    spec: ModelSpec,
    topology: Topology,
    weights_bytes: int | Sequence[int] | None,
    weight_format: str | None,
    notes: list[str],
) -> list[int]:
    """Weights per rank of each pipeline stage: given (one figure, or one per stage) or from the spec."""
    if weights_bytes is None:
        wb = weight_bytes(spec, weight_format)
        params = count_params(spec)
        per_stage = [stage_weight_bytes(spec, params, wb, topology, s).total for s in range(topology.pp)]
        notes.append(f"weights computed: {wb.format}, {wb.bits_per_weight:.2f} bits/weight")
    elif isinstance(weights_bytes, int):
        per_stage = [weights_bytes] * topology.pp
    else:
        per_stage = [int(w) for w in weights_bytes]
        if len(per_stage) != topology.pp:
            raise PlannerError(f"{len(per_stage)} weight figures given for {topology.pp} pipeline stages")
    if any(w < 0 for w in per_stage):
        raise PlannerError("weights must not be negative")
    return per_stage


def _stage_activations(spec: ModelSpec, profile: ProfileActivation, pp: int, notes: list[str]) -> list[int]:
    """The predicted activation peak of each pipeline stage, with the prediction's terms in the notes."""
    max_num_batched_tokens = profile.tokens
    notes.append(
        f"activation peak PREDICTED: {profile.peak_bytes / GiB:.2f} GiB ({profile.phase} phase of the "
        f"profile run, {max_num_batched_tokens} tokens, {profile.sequences} sequences); give "
        "--activation-gib from your log to reproduce a real one"
    )
    notes.extend(profile.terms)
    stage_activation = [profile.peak_bytes] * pp
    if pp == 1:
        return stage_activation
    # Pipeline stages before the last run the forward only: no logits, no sampler
    # (v0.8.5:vllm/worker/model_runner.py:1792 `if not get_pp_group().is_last_rank`; V1
    # v0.8.5:gpu_model_runner.py profile_run `if get_pp_group().is_last_rank`). Every stage but the first
    # receives the previous stage's hidden_states and residual, [tokens, hidden] each in the model dtype
    # (v0.8.5:worker/model_runner.py:1352-1357 make_empty_intermediate_tensors; V1 keeps them as
    # self.intermediate_tensors), which the profile run allocates.
    receive = 2 * max_num_batched_tokens * spec.hidden_size * ACTIVATION_BYTES
    for stage in range(pp):
        last = stage == pp - 1
        base = profile.peak_bytes if last else profile.forward_only_peak_bytes
        stage_activation[stage] = base + (receive if stage > 0 else 0)
    notes.append(
        "pipeline parallel: activation per stage "
        + ", ".join(f"{b / GiB:.2f}" for b in stage_activation)
        + " GiB (the last stage runs logits and the sampler; stages after the first receive "
        f"2 x {max_num_batched_tokens} x {spec.hidden_size} intermediate tensors)"
    )
    return stage_activation


def _deducted_graphs(
    version: str,
    ver: Version,
    engine: str,
    cudagraph_bytes: int,
    estimate_cudagraphs: bool | None,
    kv_pool_bytes: int | None,
    notes: list[str],
) -> int:
    """The CUDA-graph memory taken before the pool (a.2): never before 0.18; 0.18-0.19 only with
    VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1; default on from 0.20."""
    if estimate_cudagraphs is None:
        estimate_cudagraphs = engine == "V1" and ver >= (0, 20, 0)
    deduct_graphs = engine == "V1" and ver >= (0, 18, 0) and estimate_cudagraphs
    if cudagraph_bytes and not deduct_graphs:
        notes.append(f"vLLM {version} does not deduct CUDA-graph memory from the pool; the figure is ignored")
    if deduct_graphs and not cudagraph_bytes and kv_pool_bytes is None:
        notes.append(
            "this version deducts its CUDA-graph estimate; none given, so 0 is used (pool is an upper bound)"
        )
    return cudagraph_bytes if deduct_graphs else 0


@dataclass(frozen=True, slots=True)
class _Budget:
    """What every rank subtracts its own weights and activation from."""

    total_bytes: int | None
    gpu_memory_utilization: float
    kv_pool_bytes: int | None  # the pool given directly
    non_torch_bytes: int
    graphs_bytes: int
    exact_request: bool  # V1 >= 0.14 rounds the request up to whole bytes (a.1)


def _rank_pools(
    topology: Topology,
    stage_block_bytes: list[int],
    per_stage: list[int],
    stage_activation: list[int],
    budget: _Budget,
) -> list[VLLMRank]:
    """Every rank's pool and blocks (a.1 - a.3)."""
    ranks: list[VLLMRank] = []
    for stage in range(topology.pp):
        bytes_per_block = stage_block_bytes[stage]
        weights_here = per_stage[stage]
        if budget.kv_pool_bytes is not None:
            requested: float = float("nan")
            available: float = float(budget.kv_pool_bytes)
        else:
            assert budget.total_bytes is not None
            if budget.exact_request:
                requested = math.ceil(budget.total_bytes * budget.gpu_memory_utilization)  # a.1, V1 >= 0.14
            else:
                requested = budget.total_bytes * budget.gpu_memory_utilization  # float, as vLLM keeps it
            # a.2: every era subtracts weights + activation peak + non-torch memory (the ways of measuring
            # differ, the given figures are what the log calls them), and from 0.20 the CUDA-graph estimate.
            used = weights_here + stage_activation[stage] + budget.non_torch_bytes
            available = requested - used - budget.graphs_bytes
        num_blocks = max(0, int(available // bytes_per_block))
        for tp_rank in range(topology.tp):
            ranks.append(
                VLLMRank(
                    rank=stage * topology.tp + tp_rank,
                    pp_stage=stage,
                    requested_bytes=requested,
                    weights_bytes=weights_here,
                    pool_bytes=max(0, math.floor(available)),
                    bytes_per_block=bytes_per_block,
                    num_blocks=num_blocks,
                    activation_bytes=stage_activation[stage],
                )
            )
    return ranks


def _concurrency_and_tokens(
    ver: Version,
    engine: str,
    num_blocks: int,
    blocks_per_request: int,
    block_size: int,
    max_model_len: int,
    num_groups: int,
    hybrid: HybridPages | None,
) -> tuple[float, int]:
    """("Maximum concurrency", "GPU KV cache size" tokens) as the version computes them (a.4)."""
    if engine == "V0" or ver < (0, 9, 1):
        concurrency = num_blocks * block_size / max_model_len
    else:
        concurrency = num_blocks / blocks_per_request
    if engine == "V1" and ver >= (0, 21, 0):
        tokens = int(concurrency * max_model_len)
    elif engine == "V1" and ver >= (0, 9, 1) and num_groups > 1:
        # num_blocks // groups * the smallest group block size; a state group's block size is
        # max_model_len (v0.11.0:kv_cache_utils.py:1076-1080, v0.20.0:1689-1697).
        smallest = block_size if hybrid is None else min(block_size, hybrid.state_block_size)
        tokens = num_blocks // num_groups * smallest
    else:
        tokens = num_blocks * block_size
    return concurrency, tokens


def blocks_for_logged_tokens(pool: VLLMPool, tokens: int) -> tuple[int, int] | None:
    """The KV block counts (lowest, highest) that make this version log `tokens` on its "GPU KV cache size"
    line for `pool`'s groups (the inverse of _concurrency_and_tokens), or None where that rule needs what the
    pool does not keep (a state group's block size before 0.21) or no block count gives `tokens`."""
    ver = parse_version(pool.version)
    state_groups = any(g.kind in STATE_KINDS for g in pool.groups)
    if pool.engine == "V1" and (0, 9, 1) <= ver < (0, 21, 0) and state_groups:
        return None

    def logged(num_blocks: int) -> int:
        return _concurrency_and_tokens(
            ver, pool.engine, num_blocks, pool.blocks_per_request, pool.block_size, pool.max_model_len,
            pool.num_groups, None,
        )[1]  # fmt: skip

    def first_at_least(target: int) -> int:
        lo, hi = 0, max(1, target) * max(1, pool.blocks_per_request) + pool.num_groups
        while lo < hi:
            mid = (lo + hi) // 2
            if logged(mid) >= target:
                hi = mid
            else:
                lo = mid + 1
        return lo

    lowest, beyond = first_at_least(tokens), first_at_least(tokens + 1)
    if logged(lowest) != tokens:
        return None
    return lowest, beyond - 1


def _log_lines(
    ver: Version,
    engine: str,
    num_blocks: int,
    tokens: int,
    concurrency_text: str,
    max_model_len: int,
    limiting: VLLMRank,
    kv_pool_bytes: int | None,
    hybrid: HybridPages | None,
) -> list[str]:
    """The lines this vLLM version logs about its pool, as it words them."""
    log: list[str] = []
    if engine == "V0":
        label = (
            "# GPU blocks" if ver < (0, 7, 0) else ("# CUDA blocks" if ver < (0, 8, 0) else "# cuda blocks")
        )
        log.append(f"{label}: {num_blocks}")
        log.append(f"Maximum concurrency for {max_model_len} tokens per request: {concurrency_text}")
        return log
    if hybrid is not None:
        log.extend(hybrid.log_lines)
    if kv_pool_bytes is None:
        log.append(f"Available KV cache memory: {limiting.pool_bytes / GiB:.2f} GiB")
    log.append(f"GPU KV cache size: {tokens:,} tokens")
    log.append(f"Maximum concurrency for {max_model_len:,} tokens per request: {concurrency_text}")
    return log


def _stage_groups(
    spec: ModelSpec,
    topology: Topology,
    *,
    version: Version,
    engine: str,
    kv_dtype: str,
    block_size: int,
    max_model_len: int,
    lookahead_tokens: int,
    hybrid_manager: bool,
    notes: list[str],
    hybrid: HybridPages | None,
) -> tuple[list[list[KVGroup]], list[int]]:
    """The KV groups and bytes per block of each pipeline stage (the first stage's notes are kept)."""
    stage_groups: list[list[KVGroup]] = []
    stage_block_bytes: list[int] = []
    for stage in range(topology.pp):
        groups, bytes_per_block = _groups_for_stage(
            spec,
            topology.stage_layers[stage],
            version=version,
            engine=engine,
            kv_dtype=kv_dtype,
            tp=topology.tp,
            block_size=block_size,
            max_model_len=max_model_len,
            lookahead_tokens=lookahead_tokens,
            hybrid_manager=hybrid_manager,
            notes=notes if stage == 0 else [],
            hybrid=hybrid,
        )
        stage_groups.append(groups)
        stage_block_bytes.append(bytes_per_block)
        if stage == 0 and engine == "V0" and (0, 7, 0) <= version < (0, 8, 0) and groups[0].kind == "mla":
            notes.append(
                "vLLM 0.7.x pads each MLA cache entry to 256 B when VLLM_MLA_CUDA_MEM_ALIGN_KV_CACHE=1 "
                "(576 x 2 B -> 1280 B); that padding is not applied here"
            )
    return stage_groups, stage_block_bytes
