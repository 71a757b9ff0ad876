"""The memory plan: four buckets per rank (weights, KV, activations, overhead) + an OS reserve if unified.

    users that fit = (capacity - OS reserve - weights - overhead - activation peak) / (KV per user)

done per rank and exactly (bytes as int, searched, never divided by the number of ranks). A user's sequence
is prompt + output tokens, rounded up to the engine's block size; a shared prefix (whole blocks of it) is
stored once on the layers that keep every token (full attention, MLA), while sliding-window and fixed-state
layers are counted per user. The bucket numbers of a Plan are those of its busiest rank.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from planner.activations import ActivationPeak, activation_dtype, activation_peak
from planner.errors import PlannerError
from planner.formats import WeightBytes, weight_bytes
from planner.kv import sequence_kv
from planner.machines import Machine, get_machine
from planner.params import ParamCount, count_params, model_tensors
from planner.spec import ModelSpec, load_spec
from planner.topology import Topology, make_topology, stage_kv_bytes_per_token, stage_weight_bytes
from planner.units import GiB, dtype_bytes

if TYPE_CHECKING:  # a type only: the checkpoint reader is imported where a checkpoint is read
    from planner.checkpoint import CheckpointInfo

# Without a max_position_embeddings the context search stops here (tokens) and says so.
CONTEXT_SEARCH_LIMIT = 2**24
_SHAREABLE_KINDS = ("full", "mla")  # layers that keep every token, so a common prefix can be stored once


@dataclass(frozen=True, slots=True)
class PlanInputs:
    model: str
    format: str | None = None
    kv_dtype: str = "auto"
    context: int = 8192  # prompt tokens per user
    output_tokens: int = 0  # generated tokens per user, retained too
    users: int = 1
    machine: str = "spark"
    capacity_bytes: int | None = None
    os_reserve_bytes: int | None = None
    overhead_bytes: int = int(1.5 * GiB)  # CUDA context, library workspaces, allocator slack (per rank)
    prefill_chunk: int = 8192
    tp: int = 1
    pp: int = 1
    pp_layers: tuple[int, ...] | None = None
    shared_prefix: int = 0
    block_size: int = 16
    logits: str = "last"
    attention: str = "fused"
    # weights of other models the same process holds beside this one (a speculative-decoding draft), whole on
    # every rank: memory the plan fits around
    extra_weight_bytes: int = 0


@dataclass(frozen=True, slots=True)
class RankPlan:
    rank: int
    tp_rank: int
    pp_stage: int
    weight_bytes: int
    kv_bytes_per_token: int
    kv_bytes: int
    activation_bytes: int
    overhead_bytes: int
    total_bytes: int  # the four buckets plus the OS reserve
    busiest: bool
    max_users: int = 0
    max_context: int = 0


@dataclass(frozen=True, slots=True)
class Plan:
    inputs: PlanInputs
    spec: ModelSpec
    params: ParamCount
    weights: WeightBytes
    machine: Machine
    weight_bytes: int
    kv_bytes_per_token: int
    kv_bytes: int
    activation_bytes: int
    overhead_bytes: int
    os_reserve_bytes: int
    total_bytes: int
    capacity_bytes: int
    fits: bool
    max_users: int
    max_context: int
    ranks: tuple[RankPlan, ...]
    assumptions: tuple[str, ...]
    topology: Topology | None = field(default=None, compare=False)
    activation: ActivationPeak | None = field(default=None, compare=False)
    warnings: tuple[str, ...] = ()  # inputs the model was not built for (context past its position limit)


def _validate(inputs: PlanInputs) -> None:
    counts = ("context", "output_tokens", "users", "prefill_chunk", "shared_prefix", "overhead_bytes")
    for name in (*counts, "extra_weight_bytes"):
        value = getattr(inputs, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise PlannerError(f"{name.replace('_', '-')} must be a non-negative integer, got {value!r}")
    if inputs.context + inputs.output_tokens < 1:
        raise PlannerError("context + output tokens must be at least 1 token")
    if inputs.block_size < 1:
        raise PlannerError(f"block size must be at least 1 token, got {inputs.block_size}")
    if inputs.shared_prefix > inputs.context:
        raise PlannerError(
            f"shared prefix ({inputs.shared_prefix} tokens) is longer than the prompt "
            f"({inputs.context} tokens)"
        )


def _round_up(tokens: int, block: int) -> int:
    return -(-tokens // block) * block


@dataclass(frozen=True, slots=True)
class _Stage:
    """What one rank of a pipeline stage holds, as a function of users and sequence length."""

    weights: int
    kv_per_token: int
    has_head: bool
    kv_for: Callable[[int, int], int]  # (users, tokens per user) -> KV bytes


def _stage_kv_function(
    spec: ModelSpec, inputs: PlanInputs, topology: Topology, stage: int
) -> Callable[[int, int], int]:
    layers = topology.stage_layers[stage]
    block = inputs.block_size
    shared_tokens = inputs.shared_prefix // block * block  # only whole blocks are shared (prefix caching)
    shared_layers = [
        i
        for i in layers
        if spec.layers[i].attention is not None and spec.layers[i].attention.kind in _SHAREABLE_KINDS
    ]
    shared_prefix_bytes = sequence_kv(spec, inputs.kv_dtype, topology.tp, shared_layers).bytes(shared_tokens)
    sequence = sequence_kv(spec, inputs.kv_dtype, topology.tp, layers)  # the searches ask it many times

    def kv_for(users: int, tokens: int) -> int:
        if users == 0:
            return 0
        per_user = sequence.bytes(_round_up(tokens, block))
        # every user's sequence counted whole, then the common prefix stored once instead of `users` times
        return users * per_user - (users - 1) * shared_prefix_bytes

    return kv_for


def _largest(fits: Callable[[int], bool], start: int, limit: int) -> int:
    """Largest n in [start, limit] with fits(n), fits monotone decreasing; start - 1 if none."""
    if not fits(start):
        return start - 1
    lo, hi = start, start + 1
    while hi <= limit and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def make_plan(
    inputs: PlanInputs,
    *,
    spec: ModelSpec | None = None,
    machine: Machine | None = None,
    weights: WeightBytes | None = None,
) -> Plan:
    """Plan `inputs`. `spec`, `machine` (e.g. "this", probed by the CLI) and `weights` (real checkpoint bytes)
    may be given already resolved; otherwise they are loaded from the inputs."""
    _validate(inputs)
    spec = spec if spec is not None else load_spec(inputs.model)
    tensors = model_tensors(spec)  # walked once: the parameter count and the weight bytes both read it
    params = count_params(spec, tensors)
    if weights is None:
        weights = weight_bytes(spec, inputs.format, tensors=tensors, params=params)
    if machine is None:
        machine = get_machine(
            inputs.machine, capacity_bytes=inputs.capacity_bytes, os_reserve_bytes=inputs.os_reserve_bytes
        )
    topology = make_topology(spec, inputs.tp, inputs.pp, inputs.pp_layers)
    return _size_plan(inputs, spec, params, weights, machine, topology)


def _size_plan(
    inputs: PlanInputs,
    spec: ModelSpec,
    params: ParamCount,
    weights: WeightBytes,
    machine: Machine,
    topology: Topology,
) -> Plan:
    """Size a rank of every pipeline stage; the plan's buckets are those of the busiest stage."""
    tokens = inputs.context + inputs.output_tokens
    capacity = machine.capacity_bytes
    act_dtype = activation_dtype(spec, weights.format)
    sizer = _Sizer(spec, inputs, topology, dtype_bytes(act_dtype), machine.os_reserve_bytes)
    stages = _stages(spec, inputs, params, weights, topology)
    context_limit = spec.max_position_embeddings or CONTEXT_SEARCH_LIMIT
    stage_rows = [
        sizer.stage_row(index, stage, capacity, tokens, context_limit) for index, stage in enumerate(stages)
    ]
    busiest_stage = max(range(len(stage_rows)), key=lambda i: (stage_rows[i].total_bytes, -i))
    top = stage_rows[busiest_stage]
    max_context = min(row.max_context for row in stage_rows)
    act = sizer.activation(stages[busiest_stage], inputs.users)
    assumptions = _plan_assumptions(sizer, machine, weights, act, act_dtype, max_context)
    return Plan(
        inputs=inputs,
        spec=spec,
        params=params,
        weights=weights,
        machine=machine,
        weight_bytes=top.weight_bytes,
        kv_bytes_per_token=top.kv_bytes_per_token,
        kv_bytes=top.kv_bytes,
        activation_bytes=top.activation_bytes,
        overhead_bytes=top.overhead_bytes,
        os_reserve_bytes=sizer.reserve,
        total_bytes=top.total_bytes,
        capacity_bytes=capacity,
        fits=all(row.total_bytes <= capacity for row in stage_rows),
        max_users=min(row.max_users for row in stage_rows),
        max_context=max_context,
        ranks=_rank_rows(stage_rows, topology, busiest_stage),
        assumptions=tuple(assumptions),
        topology=topology,
        activation=act,
        warnings=context_warnings(spec, tokens),
    )


def _stages(
    spec: ModelSpec, inputs: PlanInputs, params: ParamCount, weights: WeightBytes, topology: Topology
) -> list[_Stage]:
    """What each pipeline stage holds: its weights, KV bytes per token and whether it has the head."""
    return [
        _Stage(
            weights=stage_weight_bytes(spec, params, weights, topology, stage).total
            + inputs.extra_weight_bytes,
            kv_per_token=stage_kv_bytes_per_token(spec, inputs.kv_dtype, topology, stage),
            has_head=stage == topology.pp - 1,
            kv_for=_stage_kv_function(spec, inputs, topology, stage),
        )
        for stage in range(topology.pp)
    ]


@dataclass(frozen=True, slots=True)
class _Sizer:
    """The bytes one rank of a stage needs for a number of users and tokens, and the limits that follow."""

    spec: ModelSpec
    inputs: PlanInputs
    topology: Topology
    act_bytes: int  # bytes per activation element
    reserve: int  # OS and other processes, from the same pool

    def activation(self, stage: _Stage, users: int) -> ActivationPeak:
        return activation_peak(
            self.spec,
            prefill_chunk=self.inputs.prefill_chunk,
            users=users,
            logits=self.inputs.logits,
            attention=self.inputs.attention,
            tp=self.topology.tp,
            has_head=stage.has_head,
            dtype_bytes=self.act_bytes,
        )

    def total(self, stage: _Stage, users: int, seq_tokens: int) -> int:
        return (
            stage.weights
            + stage.kv_for(users, seq_tokens)
            + self.activation(stage, users).peak_bytes
            + self.inputs.overhead_bytes
            + self.reserve
        )

    def stage_row(
        self, index: int, stage: _Stage, capacity: int, tokens: int, context_limit: int
    ) -> RankPlan:
        """One stage's rank at the asked users and tokens, with the most users and context that fit."""
        users = self.inputs.users
        act = self.activation(stage, users)
        kv = stage.kv_for(users, tokens)
        max_users = max(0, _largest(lambda u: self.total(stage, u, tokens) <= capacity, 0, 2**40))
        max_context = _largest(lambda t: self.total(stage, max(users, 1), t) <= capacity, 1, context_limit)
        overhead = self.inputs.overhead_bytes
        return RankPlan(
            rank=0,
            tp_rank=0,
            pp_stage=index,
            weight_bytes=stage.weights,
            kv_bytes_per_token=stage.kv_per_token,
            kv_bytes=kv,
            activation_bytes=act.peak_bytes,
            overhead_bytes=overhead,
            total_bytes=stage.weights + kv + act.peak_bytes + overhead + self.reserve,
            busiest=False,
            max_users=max_users,
            max_context=max(max_context, 0),
        )


def _rank_rows(stage_rows: list[RankPlan], topology: Topology, busiest_stage: int) -> tuple[RankPlan, ...]:
    """Every rank of the topology: each holds its stage's figures; the busiest is the first TP rank of the
    busiest stage."""
    ranks = []
    for rank in range(topology.world_size):
        tp_rank, pp_stage = topology.coords(rank)
        ranks.append(
            replace(
                stage_rows[pp_stage],
                rank=rank,
                tp_rank=tp_rank,
                busiest=pp_stage == busiest_stage and tp_rank == 0,
            )
        )
    return tuple(ranks)


def _plan_assumptions(
    sizer: _Sizer,
    machine: Machine,
    weights: WeightBytes,
    act: ActivationPeak,
    act_dtype: str,
    max_context: int,
) -> list[str]:
    spec, inputs, topology, reserve = sizer.spec, sizer.inputs, sizer.topology, sizer.reserve
    assumptions = list(spec.assumptions)
    assumptions.append(f"machine: {machine.label}")
    assumptions.append(
        f"weights: {weights.format}, {weights.bits_per_weight:.2f} bits/weight ({weights.source})"
    )
    if inputs.extra_weight_bytes:
        extra = inputs.extra_weight_bytes
        assumptions.append(f"weights include {extra:,} bytes of other models held beside this one")
    assumptions.append(
        f"KV dtype {inputs.kv_dtype}; each user holds {inputs.context} prompt + {inputs.output_tokens} "
        f"output tokens, rounded up to {inputs.block_size}-token blocks"
    )
    if inputs.shared_prefix:
        assumptions.append(
            f"shared prefix: {inputs.shared_prefix // inputs.block_size * inputs.block_size} tokens "
            "(whole blocks) "
            "stored once on full-attention/MLA layers; sliding-window and state layers counted per user"
        )
    assumptions.append(
        f"activation peak: {act.phase} ({inputs.prefill_chunk}-token prefill chunk, "
        f"(4h + 3I) x {sizer.act_bytes} B per token, {act_dtype} activations; "
        f"logits {inputs.logits}; {inputs.attention} attention)"
    )
    assumptions.append(f"overhead: {inputs.overhead_bytes / GiB:.2f} GiB per rank (CUDA context, workspaces)")
    if reserve:
        assumptions.append(f"OS and other processes: {reserve / GiB:.2f} GiB reserved from the same pool")
    if not spec.max_position_embeddings:
        assumptions.append(
            f"no max_position_embeddings: context search stops at {CONTEXT_SEARCH_LIMIT} tokens"
        )
    elif max_context >= spec.max_position_embeddings:
        assumptions.append(
            f"max context capped at the model's max_position_embeddings ({spec.max_position_embeddings})"
        )
    assumptions.extend(topology.notes)
    if topology.world_size > 1:
        assumptions.append("bucket figures are those of the busiest rank, never the total divided by ranks")
    return assumptions


def context_warnings(spec: ModelSpec, tokens: int) -> tuple[str, ...]:
    """A user's tokens past the model's max_position_embeddings: the memory adds up, the model does not."""
    limit = spec.max_position_embeddings
    if limit and tokens > limit:
        return (
            f"{tokens:,} tokens per user is beyond this model's max_position_embeddings ({limit:,}): the "
            "memory figures hold, but the model was not trained for such positions",
        )
    return ()


# Tensor names of the decoder parts, in HF safetensors and llama.cpp GGUF spelling.
_LAYER_NAME = re.compile(r"(?:^|\.)(?:layers|blk|h)\.(\d+)\.")
_HEAD_NAMES = ("lm_head.", "output.weight", "output.bias")
_FINAL_NORM_NAMES = ("model.norm.", "output_norm.", "ln_f.", "final_layernorm.", "norm_f.")
_EMBED_PREFIXES = ("token_embd.", "wte.", "wpe.")


def weights_from_checkpoint(spec: ModelSpec, info: CheckpointInfo) -> tuple[WeightBytes, tuple[str, ...]]:
    """The real bytes of a checkpoint, split into the parts a plan places on ranks (embeddings, each decoder
    layer, head, final norm), by tensor name. Tensors of layers beyond the config's count (e.g. MTP heads) go
    with the head on the last stage; anything unrecognised (vision towers, buffers) with the embeddings."""
    per_layer = [0] * spec.num_layers
    embed = head = final_norm = extra_layers = other = 0
    for tensor in info.tensors:
        name = tensor.name
        match = _LAYER_NAME.search(name)
        if match:
            index = int(match.group(1))
            if index < spec.num_layers:
                per_layer[index] += tensor.nbytes
            else:
                extra_layers += tensor.nbytes
        elif any(name.startswith(h) or f".{h}" in name for h in _HEAD_NAMES):
            head += tensor.nbytes
        elif any(n in name for n in _FINAL_NORM_NAMES):
            final_norm += tensor.nbytes
        elif "embed" in name or any(name.startswith(e) or f".{e}" in name for e in _EMBED_PREFIXES):
            embed += tensor.nbytes
        else:
            other += tensor.nbytes
    notes = [f"weights: real bytes of the {info.format} checkpoint {info.path} ({info.tensor_bytes:,} B)"]
    if extra_layers:
        notes.append(f"{extra_layers:,} B of layers beyond num_hidden_layers counted on the last stage")
        head += extra_layers
    if other:
        notes.append(f"{other:,} B of tensors outside the decoder (not embedding/layer/head) put on stage 0")
        embed += other
    total = embed + head + final_norm + sum(per_layer)
    weights = WeightBytes(
        format=f"checkpoint:{info.format}",
        total=total,
        embed=embed,
        head=head,
        final_norm=final_norm,
        per_layer=tuple(per_layer),
        bits_per_weight=info.bits_per_weight,
        source=f"read from the headers of {len(info.files)} file(s) in {info.path}",
    )
    return weights, tuple(notes)


def plan_to_json(plan: Plan, vllm: Any = None) -> dict[str, Any]:
    """The stable --json schema: bytes as integers; key names are a public contract (README)."""
    out: dict[str, Any] = {
        "model": plan.spec.name,
        "format": plan.weights.format,
        "kv_dtype": plan.inputs.kv_dtype,
        "context": plan.inputs.context,
        "output_tokens": plan.inputs.output_tokens,
        "users": plan.inputs.users,
        "machine": plan.machine.name,
        "tp": plan.inputs.tp,
        "pp": plan.inputs.pp,
        "params_total": plan.params.total,
        "params_active_per_token": plan.params.active_per_token,
        "weight_bytes": plan.weight_bytes,
        "weight_bytes_total": plan.weights.total,
        "kv_bytes_per_token": plan.kv_bytes_per_token,
        "kv_bytes": plan.kv_bytes,
        "activation_bytes": plan.activation_bytes,
        "overhead_bytes": plan.overhead_bytes,
        "os_reserve_bytes": plan.os_reserve_bytes,
        "total_bytes": plan.total_bytes,
        "capacity_bytes": plan.capacity_bytes,
        "fits": plan.fits,
        "max_users": plan.max_users,
        "max_context": plan.max_context,
        "ranks": [
            {
                "rank": r.rank,
                "tp_rank": r.tp_rank,
                "pp_stage": r.pp_stage,
                "weight_bytes": r.weight_bytes,
                "kv_bytes_per_token": r.kv_bytes_per_token,
                "kv_bytes": r.kv_bytes,
                "activation_bytes": r.activation_bytes,
                "overhead_bytes": r.overhead_bytes,
                "total_bytes": r.total_bytes,
                "busiest": r.busiest,
            }
            for r in plan.ranks
        ],
        "assumptions": list(plan.assumptions),
        "warnings": list(plan.warnings),
    }
    if vllm is not None:
        out["vllm"] = vllm_to_json(vllm)
    return out


def vllm_to_json(pool: Any) -> dict[str, Any]:
    return {
        "version": pool.version,
        "engine": pool.engine,
        "pool_bytes": pool.pool_bytes,
        "num_blocks": pool.num_blocks,
        "kv_cache_tokens": pool.kv_cache_tokens,
        "max_concurrency": pool.max_concurrency,
        "max_concurrency_logged": pool.max_concurrency_text,
        "block_size": pool.block_size,
        "bytes_per_block": pool.bytes_per_block,
        "blocks_per_request": pool.blocks_per_request,
        "requested_bytes": pool.requested_bytes,
        "weights_bytes": pool.weights_bytes,
        "activation_bytes": pool.activation_bytes,
        "activation_predicted": pool.activation_predicted,
        "non_torch_bytes": pool.non_torch_bytes,
        "cudagraph_bytes": pool.cudagraph_bytes,
        "notes": list(pool.notes),
    }
