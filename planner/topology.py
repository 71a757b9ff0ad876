"""Tensor and pipeline parallelism: which layers, weights and KV heads each rank holds.

The rules follow vLLM (../shared/reference/vllm-kv-formulas.md, section (c)):
* total attention heads % tp == 0, or vLLM refuses the config;
* KV heads are partitioned when tp <= kv heads (kv % tp == 0) and replicated when tp > kv heads (tp % kv ==
  0), one resident head per rank: 8 KV heads on 16 ranks store 1 head per rank, each head on 2 ranks, so the
  aggregate KV is twice the unreplicated payload. The K/V projection weights are replicated the same way;
* an MLA latent cache is replicated on every TP rank;
* pipeline stages get contiguous layer ranges; an even split follows vLLM's `get_pp_indices` (the remainder
  goes to the stages before the last, which already carries the head); an explicit uneven split is taken as
  given.
Ranks are numbered like vLLM: rank = pp_stage * tp + tp_rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.errors import PlannerError
from planner.formats import WeightBytes
from planner.kv import kv_heads_per_rank, sequence_kv
from planner.params import ParamCount
from planner.spec import ModelSpec

_CACHED_KINDS = ("full", "sliding")  # KV-head kinds that vLLM partitions/replicates by tp


@dataclass(frozen=True, slots=True)
class Topology:
    tp: int
    pp: int
    stage_layers: tuple[tuple[int, ...], ...]  # decoder-layer indices held by each pipeline stage
    kv_heads_total: int  # KV heads of the (first) attention layer kind that tp splits; 0 if none
    kv_heads_per_rank: int
    kv_replicas: int  # ranks holding each KV head (1 when partitioned)
    notes: tuple[str, ...]

    @property
    def world_size(self) -> int:
        return self.tp * self.pp

    def coords(self, rank: int) -> tuple[int, int]:
        """(tp_rank, pp_stage) of a global rank."""
        return rank % self.tp, rank // self.tp


def even_split(num_layers: int, pp: int) -> tuple[int, ...]:
    """Layers per stage as vLLM's get_pp_indices splits them when no explicit partition is given."""
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    return tuple(sizes)


def make_topology(
    spec: ModelSpec, tp: int = 1, pp: int = 1, pp_layers: Sequence[int] | None = None
) -> Topology:
    if tp < 1 or pp < 1:
        raise PlannerError(f"tp and pp must be at least 1 (got tp={tp}, pp={pp})")
    if spec.num_attention_heads % tp:
        raise PlannerError(
            f"tp={tp} does not divide the {spec.num_attention_heads} attention heads of {spec.name} "
            "(vLLM and SGLang both require num_attention_heads % tensor_parallel_size == 0)"
        )
    sequence_kv(spec, "auto", tp)  # kv.py's per-layer TP checks (state heads too), once per kind of layer
    notes: list[str] = []
    kv_total = per_rank = 0
    replicas = 1
    seen: set[int] = set()
    for layer in spec.layers:
        attention = layer.attention
        if attention is None or attention.kind not in _CACHED_KINDS or attention.num_kv_heads in seen:
            continue
        seen.add(attention.num_kv_heads)
        heads = kv_heads_per_rank(attention.num_kv_heads, tp)  # raises PlannerError when indivisible
        if not kv_total:
            kv_total, per_rank = attention.num_kv_heads, heads
            replicas = tp // attention.num_kv_heads if tp > attention.num_kv_heads else 1
    if kv_total and replicas > 1:
        notes.append(
            f"{kv_total} KV heads on tp={tp}: 1 resident head per rank, each head replicated on "
            f"{replicas} ranks; "
            f"aggregate KV is {replicas}x the unreplicated payload"
        )
    if any(layer.attention is not None and layer.attention.kind == "mla" for layer in spec.layers) and tp > 1:
        notes.append("MLA latent cache is replicated on every TP rank (vLLM stores 1 latent head per rank)")

    if pp_layers is not None:
        sizes = tuple(int(n) for n in pp_layers)
        if len(sizes) != pp:
            raise PlannerError(f"--pp-layers has {len(sizes)} entries but pp={pp}")
        if any(n < 1 for n in sizes):
            raise PlannerError(
                f"every pipeline stage needs at least one layer, got {','.join(map(str, sizes))}"
            )
        if sum(sizes) != spec.num_layers:
            raise PlannerError(
                f"--pp-layers {','.join(map(str, sizes))} sums to {sum(sizes)}, "
                f"but {spec.name} has {spec.num_layers} layers"
            )
    else:
        if pp > spec.num_layers:
            raise PlannerError(f"pp={pp} exceeds the {spec.num_layers} layers of {spec.name}")
        sizes = even_split(spec.num_layers, pp)
    stages: list[tuple[int, ...]] = []
    start = 0
    for n in sizes:
        stages.append(tuple(range(start, start + n)))
        start += n
    if pp > 1:
        notes.append("pipeline stages hold layers " + ", ".join(f"{s[0]}-{s[-1]}" for s in stages))
    return Topology(tp, pp, tuple(stages), kv_total, per_rank, replicas, tuple(notes))


@dataclass(frozen=True, slots=True)
class StageWeights:
    embed: int
    layers: int
    head: int  # lm_head (or the tied embedding it reuses) + final norm
    total: int


def stage_weight_bytes(
    spec: ModelSpec, params: ParamCount, weights: WeightBytes, topology: Topology, stage: int
) -> StageWeights:
    """Weight bytes resident on one rank of `stage` (every TP rank of a stage holds the same amount).

    Per layer, the parameters tp does not shard (ParamCount.per_layer_replicated: norms, routers, sinks) stay
    whole, the rest is divided by tp; when KV heads are replicated the K/V projections are too. The replicated
    parts are priced at the layer's average bytes per parameter. Embeddings (vocab-parallel, /tp) sit on the
    first stage; lm_head (/tp) and the final norm (whole) on the last. With tied embeddings and pp > 1 the
    last stage holds its own copy of the embedding as the head, as vLLM does.
    """
    tp = topology.tp
    embed = -(-weights.embed // tp) if stage == 0 else 0
    layer_bytes = 0
    for index in topology.stage_layers[stage]:
        stored, count = weights.per_layer[index], params.per_layer[index]
        if count <= 0:
            continue
        replicated = stored * params.per_layer_replicated[index] // count
        extra = _replicated_kv_projection_bytes(spec, index, tp, stored, count)
        layer_bytes += -(-(stored - replicated) // tp) + replicated + extra
    head = 0
    if stage == topology.pp - 1:
        head_matrix = weights.head if weights.head or topology.pp == 1 else weights.embed
        head = -(-head_matrix // tp) + weights.final_norm
    return StageWeights(embed, layer_bytes, head, embed + layer_bytes + head)


def _replicated_kv_projection_bytes(spec: ModelSpec, index: int, tp: int, stored: int, count: int) -> int:
    """Bytes a rank holds beyond kv/tp of the K/V projections when tp > KV heads (they are replicated)."""
    attention = spec.layers[index].attention
    if attention is None or attention.kind not in _CACHED_KINDS or tp <= attention.num_kv_heads:
        return 0
    width = attention.k_head_dim + (attention.v_head_dim or attention.k_head_dim)
    per_head_params = width * spec.hidden_size
    # rank holds 1 head, the even shard would be kv/tp heads
    extra_params_times_tp = per_head_params * (tp - attention.num_kv_heads)
    return stored * extra_params_times_tp // (count * tp)


def stage_kv_bytes_per_token(spec: ModelSpec, kv_dtype: str, topology: Topology, stage: int) -> int:
    """KV bytes one rank of `stage` adds per token while every layer still grows (short sequences)."""
    return sequence_kv(spec, kv_dtype, topology.tp, topology.stage_layers[stage]).bytes_per_token
