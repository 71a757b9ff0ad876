"""vLLM's KV-cache pool, block count, "GPU KV cache size" and "Maximum concurrency", version by version.

Follows ../shared/reference/vllm-kv-formulas.md (read from the vLLM release sdists 0.6.4.post1 ... 0.33.0);
the section letters below refer to it. Everything is per rank (per GPU); every rank computes its blocks and
all are then set to the minimum over ranks (a.3). Float arithmetic is kept where vLLM uses floats (requested
memory, available memory), so the block count rounds exactly as vLLM's does.

Figures vLLM measures at startup (weights, PyTorch activation peak, non-torch memory, CUDA-graph estimate)
can be given to reproduce a real log; when the activation peak is not given it is predicted from the profile
run (max_num_batched_tokens through the model plus the sampler's logits) and marked as a prediction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from planner.activations import logits_bytes, per_token_layer_bytes
from planner.errors import PlannerError
from planner.formats import weight_bytes
from planner.kv import layer_kv_bytes
from planner.params import count_params
from planner.spec import LayerSpec, ModelSpec
from planner.topology import Topology, make_topology, stage_weight_bytes
from planner.units import GiB

# The versions whose sdists the reference file was read from (section "Sources").
READ_VERSIONS: tuple[str, ...] = (
    "0.6.4", "0.6.6", "0.7.0", "0.7.1", "0.7.3", "0.8.0", "0.8.5", "0.9.0", "0.9.1", "0.9.2",
    "0.10.0", "0.10.1", "0.10.2", "0.11.0", "0.12.0", "0.13.0", "0.14.0", "0.16.0", "0.17.0", "0.18.0",
    "0.19.0", "0.20.0", "0.21.0", "0.22.0", "0.23.0", "0.24.0", "0.25.0", "0.26.0", "0.27.0", "0.28.0",
    "0.29.0", "0.33.0",
)  # fmt: skip
DEFAULT_VLLM_VERSION = "0.33.0"  # newest read; `--vllm-version` picks another

Version = tuple[int, int, int]


def parse_version(text: str) -> Version:
    """'0.10.1.1' -> (0, 10, 1); 'v0.6.4.post1' -> (0, 6, 4)."""
    parts = str(text).strip().lstrip("vV").split(".")
    numbers: list[int] = []
    for part in parts[:3]:
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        numbers.append(int(digits))
    if len(numbers) < 2:
        raise PlannerError(f"cannot read vLLM version {text!r}; write it like 0.33.0")
    while len(numbers) < 3:
        numbers.append(0)
    return numbers[0], numbers[1], numbers[2]


@dataclass(frozen=True, slots=True)
class KVGroup:
    """One KV-cache group of vLLM's V1 manager (or the single V0 cache)."""

    kind: str  # "full" | "sliding" | "mla"
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


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _default_max_num_batched_tokens(engine: str, max_model_len: int) -> tuple[int, str]:
    if engine == "V0":
        value = max(max_model_len, 2048)
        return value, f"max_num_batched_tokens {value} (V0 without chunked prefill: max(max_model_len, 2048))"
    return (
        8192,
        "max_num_batched_tokens 8192 (V1 `vllm serve` default on large GPUs; pass it if yours differs)",
    )


def predicted_profile_activation(
    spec: ModelSpec, max_num_batched_tokens: int, max_num_seqs: int, tp: int = 1
) -> int:
    """A prediction of vLLM's profiled PyTorch activation peak: the dummy forward of max_num_batched_tokens
    tokens, (4h + 3I/tp) x 2 B per token, plus the dummy sampler run's logits for max_num_seqs rows (BF16,
    then the sampler's fp32 copy)."""
    forward = max_num_batched_tokens * per_token_layer_bytes(spec, tp)
    sampler = logits_bytes(spec, max_num_seqs) + logits_bytes(spec, max_num_seqs, 4)
    return forward + sampler


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
) -> tuple[list[KVGroup], int]:
    """The KV groups of one rank and its bytes per block (a.3, a.4)."""
    attn_layers: list[LayerSpec] = []
    for index in layers:
        layer = spec.layers[index]
        attention = layer.attention
        if attention is None:
            continue
        if attention.kind in ("linear", "mamba"):
            raise PlannerError(
                f"{spec.name}: vLLM's page unification for Mamba/linear-attention layers "
                "(hybrid state models) is not modelled; plan this model without --engine vllm"
            )
        attn_layers.append(layer)
    if not attn_layers:
        raise PlannerError(f"{spec.name}: no attention layers on this rank, so vLLM allocates no KV blocks")

    def page(layer: LayerSpec) -> int:
        return layer_kv_bytes(layer, block_size, kv_dtype, spec, tp)

    def blocks_req(kind: str, window: int | None) -> int:
        if kind == "sliding" and window is not None:
            return _cdiv(min(window - 1 + lookahead_tokens, max_model_len), block_size) + 1
        return _cdiv(max_model_len, block_size)

    # V0, and V1 before the hybrid manager, size every attention layer's cache as full attention.
    treat_all_full = engine == "V0" or version < (0, 9, 1) or not hybrid_manager
    buckets: dict[tuple[str, int | None], list[LayerSpec]] = {}
    for layer in attn_layers:
        attention = layer.attention
        assert attention is not None
        kind = "full" if treat_all_full and attention.kind == "sliding" else attention.kind
        window = attention.window if kind == "sliding" else None
        buckets.setdefault((kind, window), []).append(layer)
    if treat_all_full and any(layer.attention.kind == "sliding" for layer in attn_layers):  # type: ignore[union-attr]
        notes.append("sliding-window layers are allocated as full attention (no hybrid KV-cache manager)")

    if len(buckets) == 1:
        ((kind, window), members) = next(iter(buckets.items()))
        bytes_per_block = sum(page(layer) for layer in members)
        return [
            KVGroup(kind, window, len(members), bytes_per_block, blocks_req(kind, window))
        ], bytes_per_block

    pages = {page(layer) for layer in attn_layers}
    if len(pages) != 1:
        raise PlannerError(
            f"{spec.name}: hybrid layers with different page sizes need vLLM's page unification, "
            "which is not modelled; plan this model without --engine vllm"
        )
    page_bytes = pages.pop()
    sizes = [len(members) for members in buckets.values()]
    group_size = min(sizes)
    if version > (0, 29, 0) and max(sizes) < 1.5 * min(sizes):
        group_size = max(sizes)  # v0.33 kv_cache_planning.py:520-532 (after 0.29, the last read before it)
    groups: list[KVGroup] = []
    for (kind, window), members in buckets.items():
        for _ in range(_cdiv(len(members), group_size)):
            groups.append(
                KVGroup(kind, window, group_size, page_bytes * group_size, blocks_req(kind, window))
            )
    padded = sum(_cdiv(n, group_size) * group_size for n in sizes) - sum(sizes)
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
    max_num_seqs: int = 256,
    async_scheduling: bool = False,
    hybrid_manager: bool = True,
) -> VLLMPool:
    """Pool bytes, blocks, KV tokens and max concurrency as vLLM `version` computes and logs them.

    weights_bytes: per rank (one int for every rank, or one per pipeline stage); computed from the spec when
    None. kv_pool_bytes: the pool given directly (--kv-cache-memory-bytes), skipping the profile.
    """
    ver = parse_version(version)
    notes: list[str] = []
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
    if engine is None:
        engine = "V0" if ver < (0, 8, 0) else "V1"
    engine = engine.upper()
    if engine not in ("V0", "V1"):
        raise PlannerError(f"vLLM engine must be V0 or V1, got {engine!r}")
    if engine == "V0" and ver >= (0, 11, 0):
        raise PlannerError(f"vLLM {version} has no V0 engine (removed after 0.10.x)")
    if engine == "V1" and ver < (0, 7, 0):
        raise PlannerError(f"vLLM {version} has no V1 engine (opt-in from 0.7.0)")
    for name, value in (
        ("max_model_len", max_model_len),
        ("block_size", block_size),
        ("max_num_seqs", max_num_seqs),
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
    if max_num_batched_tokens is None:
        max_num_batched_tokens, why = _default_max_num_batched_tokens(engine, max_model_len)
        notes.append(why)
    elif max_num_batched_tokens < 1:
        raise PlannerError(f"max_num_batched_tokens must be at least 1, got {max_num_batched_tokens}")

    topology: Topology = make_topology(spec, tp, pp, pp_layers)
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

    predicted = activation_bytes is None
    if predicted:
        activation_bytes = predicted_profile_activation(spec, max_num_batched_tokens, max_num_seqs, tp)
        notes.append(
            f"activation peak PREDICTED ({activation_bytes / GiB:.2f} GiB): profile run of "
            f"{max_num_batched_tokens} tokens + sampler logits for {max_num_seqs} sequences; real profiles "
            "often measure more - give --activation-gib from your log to reproduce it"
        )
    assert activation_bytes is not None

    # CUDA-graph memory (a.2): never deducted before 0.18; 0.18-0.19 only with
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1; default on from 0.20.
    if estimate_cudagraphs is None:
        estimate_cudagraphs = engine == "V1" and ver >= (0, 20, 0)
    deduct_graphs = engine == "V1" and ver >= (0, 18, 0) and estimate_cudagraphs
    if cudagraph_bytes and not deduct_graphs:
        notes.append(f"vLLM {version} does not deduct CUDA-graph memory from the pool; the figure is ignored")
    if deduct_graphs and not cudagraph_bytes and kv_pool_bytes is None:
        notes.append(
            "this version deducts its CUDA-graph estimate; none given, so 0 is used (pool is an upper bound)"
        )
    graphs = cudagraph_bytes if deduct_graphs else 0

    if kv_pool_bytes is not None and ver < (0, 11, 0):
        notes.append(
            f"vLLM {version} has no --kv-cache-memory-bytes; the pool is taken as given (e.g. from a log)"
        )

    # Lookahead tokens for sliding-window blocks per request (a.4).
    if ver >= (0, 26, 0):
        concurrent_batches = pp + 1 if async_scheduling else pp
        lookahead = concurrent_batches * max_num_batched_tokens
    else:
        lookahead = max_num_batched_tokens

    ranks: list[VLLMRank] = []
    stage_groups: list[list[KVGroup]] = []
    for stage in range(topology.pp):
        groups, bytes_per_block = _groups_for_stage(
            spec,
            topology.stage_layers[stage],
            version=ver,
            engine=engine,
            kv_dtype=kv_dtype,
            tp=topology.tp,
            block_size=block_size,
            max_model_len=max_model_len,
            lookahead_tokens=lookahead,
            hybrid_manager=hybrid_manager,
            notes=notes if stage == 0 else [],
        )
        stage_groups.append(groups)
        if stage == 0 and engine == "V0" and (0, 7, 0) <= ver < (0, 8, 0) and groups[0].kind == "mla":
            notes.append(
                "vLLM 0.7.x pads each MLA cache entry to 256 B when VLLM_MLA_CUDA_MEM_ALIGN_KV_CACHE=1 "
                "(576 x 2 B -> 1280 B); that padding is not applied here"
            )
        weights_here = per_stage[stage]
        if kv_pool_bytes is not None:
            requested: float = float("nan")
            available: float = float(kv_pool_bytes)
        else:
            assert total_bytes is not None
            if engine == "V1" and ver >= (0, 14, 0):
                requested = math.ceil(total_bytes * gpu_memory_utilization)  # a.1, V1 >= 0.14
            else:
                requested = total_bytes * gpu_memory_utilization  # float, as vLLM keeps it
            # a.2: every era subtracts weights + activation peak + non-torch memory (the ways of measuring
            # differ, the given figures are what the log calls them), and from 0.20 the CUDA-graph estimate.
            available = requested - (weights_here + activation_bytes + non_torch_bytes) - graphs
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
                )
            )
    limiting = min(ranks, key=lambda r: (r.num_blocks, r.rank))
    num_blocks = limiting.num_blocks
    groups = stage_groups[limiting.pp_stage]
    if topology.world_size > 1 and len({r.num_blocks for r in ranks}) > 1:
        notes.append(f"ranks differ; every rank uses the minimum, {num_blocks} blocks (rank {limiting.rank})")
    if num_blocks == 0:
        notes.append("no memory left for KV blocks: vLLM would refuse to start")

    blocks_per_request = sum(g.blocks_per_request for g in groups)
    if engine == "V0" or ver < (0, 9, 1):
        concurrency = num_blocks * block_size / max_model_len
    else:
        concurrency = num_blocks / blocks_per_request
    if engine == "V1" and ver >= (0, 21, 0):
        tokens = int(concurrency * max_model_len)
    elif engine == "V1" and ver >= (0, 9, 1) and len(groups) > 1:
        tokens = num_blocks // len(groups) * block_size
    else:
        tokens = num_blocks * block_size

    text = f"{concurrency:.2f}x"
    log: list[str] = []
    if engine == "V0":
        label = (
            "# GPU blocks" if ver < (0, 7, 0) else ("# CUDA blocks" if ver < (0, 8, 0) else "# cuda blocks")
        )
        log.append(f"{label}: {num_blocks}")
        log.append(f"Maximum concurrency for {max_model_len} tokens per request: {text}")
    else:
        if kv_pool_bytes is None:
            log.append(f"Available KV cache memory: {limiting.pool_bytes / GiB:.2f} GiB")
        log.append(f"GPU KV cache size: {tokens:,} tokens")
        log.append(f"Maximum concurrency for {max_model_len:,} tokens per request: {text}")
    if concurrency < 1 and num_blocks:
        notes.append(
            f"one request of max_model_len {max_model_len} does not fit the pool: vLLM refuses to start "
            "(lower max_model_len or raise gpu_memory_utilization)"
        )

    return VLLMPool(
        version=version,
        engine=engine,
        total_bytes=total_bytes,
        gpu_memory_utilization=None if kv_pool_bytes is not None else gpu_memory_utilization,
        requested_bytes=None if kv_pool_bytes is not None else math.floor(limiting.requested_bytes),
        weights_bytes=limiting.weights_bytes,
        activation_bytes=activation_bytes,
        activation_predicted=predicted,
        non_torch_bytes=non_torch_bytes,
        cudagraph_bytes=graphs,
        pool_bytes=limiting.pool_bytes,
        block_size=block_size,
        bytes_per_block=limiting.bytes_per_block,
        num_blocks=num_blocks,
        num_groups=len(groups),
        blocks_per_request=blocks_per_request,
        kv_cache_tokens=tokens,
        max_concurrency=concurrency,
        max_concurrency_text=text,
        max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens,
        groups=tuple(groups),
        ranks=tuple(ranks),
        log_lines=tuple(log),
        notes=tuple(notes),
    )
