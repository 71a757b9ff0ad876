"""SGLang's KV pool: how many tokens `mem_fraction_static` leaves after the weights, and what sits beside it.

The rule is the same in every release read (0.3.6 .. 0.5.23; model_executor/model_runner.py
`profile_max_num_token` up to 0.5.6, mem_cache/kv_cache_configurator.py `_profile_available_bytes` in 0.5.23):

    rest   = free_after_weights - free_before_weights x (1 - mem_fraction_static)        (GiB, as floats)
    tokens = int(rest x 2^30 // cell)      cell = bytes one token takes in every layer of this rank
    tokens = min(tokens, --max-total-tokens) // page_size x page_size

`free_before_weights` is the free device memory after the CUDA context and torch.distributed came up (the
"Load weight begin. avail mem" line; `min_per_gpu_memory`, the smallest over the ranks), and
`free_after_weights` the same measure after loading (the smallest over the ranks). So the pool is
`mem_fraction_static x free_before_weights - weights`: the fraction applies to the free memory at start,
not to the device total, and everything SGLang allocates outside it (CUDA graphs, activations, the attention
backend's workspace) must fit in `free_before_weights x (1 - mem_fraction_static)`.

The cell (0.4.3.post4 model_runner.py:608-633, 0.5.6 :1367-1440): MHA `kv_heads_per_rank x head_dim x layers x
2 x element` (KV heads split over TP, one per rank when TP exceeds them); MLA `(kv_lora_rank +
qk_rope_head_dim) x layers x element` on every rank. memsight's planner.kv computes the same bytes.

The buffers SGLang then allocates (mem_cache/memory_pool.py): K and V are `(tokens + page_size) x heads x
head_dim` per layer (0.4.3.post4 :190-211; MLA one `(tokens + page_size) x (kv_lora_rank + rope)` buffer), so
the logged "K size" is `(tokens + page_size) x cell / 2`; `ReqToTokenPool` is `size x (context_len + 4)`
int32 (0.4.6.post5 model_runner.py:904), `size = max_num_reqs + 1` up to 0.4.6 and `max_num_reqs` from 0.4.7
(0.4.7 :926); `max_num_reqs = min(max(int(tokens / context_len x 512), 2048), 4096)` unless
--max-running-requests is given (0.5.6 :1676-1685); the scheduler runs `min(tokens // 2, size)` requests
(max_running_requests, managers/tp_worker.py 0.4.6.post5 :119-127).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.engines.sglang.defaults import Era
from planner.engines.vllm.moe import rotary_cache_bytes
from planner.errors import PlannerError
from planner.formats import weight_bytes
from planner.kv import layer_kv_bytes_per_token
from planner.params import count_params
from planner.spec import ModelSpec
from planner.topology import make_topology, stage_weight_bytes
from planner.units import GiB

INT32 = 4
REQ_TO_TOKEN_EXTRA = 4  # ReqToTokenPool's max_context_len = context_len + 4 (0.4.6.post5 model_runner.py:905)

SOURCE_POOL = (
    "rest = free_after_weights - free_before_weights x (1 - mem_fraction_static); tokens = rest // cell "
    "(sglang 0.4.3.post4 model_runner.py:608-633, 0.5.6 :1367-1446, "
    "0.5.23 mem_cache/kv_cache_configurator.py:2990-3060)"
)
SOURCE_ROTARY = (
    "SGLang keeps the rotary cos/sin cache in fp32 on CUDA (0.4.3.post4 layers/rotary_embedding.py:81-86, "
    "0.5.6 :112-129 `if not _is_cuda: cache = cache.to(dtype)`)"
)


@dataclass(frozen=True, slots=True)
class Term:
    """One term of the arithmetic: bytes (or a count), how it is known and where it comes from."""

    name: str
    value: int
    how: str  # "PREDICTED" | "log" | "given" | "default"
    source: str


@dataclass(frozen=True, slots=True)
class PoolInputs:
    spec: ModelSpec
    free_before_weights: int  # bytes
    mem_fraction_static: float
    context_len: int
    era: Era
    tp: int = 1
    pp: int = 1
    page_size: int = 1
    kv_dtype: str = "auto"
    weight_format: str | None = None
    max_total_tokens: int | None = None
    max_running_requests: int | None = None
    weights_override: int | None = None  # bytes: the weights as logged or given, instead of predicted


@dataclass(frozen=True, slots=True)
class SGLangPool:
    cell: int  # bytes per token on one rank
    weights: int  # bytes on the busiest rank
    weights_how: str
    weights_source: str
    free_after_weights: int
    headroom: int  # free_before_weights x (1 - mem_fraction_static): what is left outside the static part
    rest: int  # bytes the pool may take
    profiled_tokens: int  # rest // cell, before --max-total-tokens and the page
    tokens: int  # max_total_num_tokens
    k_bytes: int  # the K buffers (MHA), or the one latent buffer (MLA) with v_bytes 0
    v_bytes: int
    mla: bool
    max_num_reqs: int
    req_pool_size: int
    req_to_token: int
    max_running_requests: int
    free_after_pool: int
    notes: tuple[str, ...]

    @property
    def kv_bytes(self) -> int:
        return self.k_bytes + self.v_bytes

    @property
    def refused(self) -> bool:
        """SGLang stops with "Not enough memory" when max_total_num_tokens <= 0 (the weights leave no KV
        budget): no pool is allocated, so its tokens and buffers are none, not the negative arithmetic."""
        return self.tokens <= 0


def cell_bytes(spec: ModelSpec, kv_dtype: str, tp: int, layers: range | None = None) -> tuple[int, bool]:
    """Bytes one token takes on one rank (planner.kv: SGLang's MHA and MLA cells), and whether it is MLA.
    Sliding-window layers count in full, as SGLang's plain MHA pool allocates them."""
    selected = spec.layers if layers is None else [spec.layers[i] for i in layers]
    cell = sum(layer_kv_bytes_per_token(layer, kv_dtype, spec, tp) for layer in selected)
    mla = any(layer.attention is not None and layer.attention.kind == "mla" for layer in selected)
    return cell, mla


def predicted_weights(spec: ModelSpec, fmt: str | None, tp: int, pp: int) -> tuple[int, str]:
    """Weight bytes on the busiest rank as SGLang holds them: the checkpoint's tensors split over TP/PP
    (planner.topology, the same sharding rules) plus the rotary cos/sin cache in fp32."""
    params = count_params(spec)
    weights = weight_bytes(spec, fmt)
    topology = make_topology(spec, tp, pp)
    stage_bytes = [stage_weight_bytes(spec, params, weights, topology, s).total for s in range(pp)]
    busiest = max(range(pp), key=lambda s: stage_bytes[s])
    rotary, rotary_how = rotary_cache_bytes(spec, activation_bytes=4)
    source = (
        f"{weights.format} tensors on rank (stage {busiest}) {stage_bytes[busiest]:,} B "
        f"{rotary_how.replace(' per stage', '')}; {SOURCE_ROTARY}"
    )
    return stage_bytes[busiest] + rotary, source


def sglang_pool(inputs: PoolInputs) -> SGLangPool:
    """The pool as SGLang sizes it (the module's rule), the buffers it then allocates and the request
    limits that follow from its tokens."""
    spec = inputs.spec
    _check_pool_inputs(inputs)
    cell, mla = _widest_stage_cell(spec, inputs)
    notes = _layers_not_modelled(spec)
    weights, how, source = _pool_weights(inputs)
    free_before = inputs.free_before_weights
    free_after = free_before - weights
    headroom = int(free_before * (1 - inputs.mem_fraction_static))
    rest = free_after - headroom
    profiled = int(rest // cell)  # negative when the weights leave nothing: SGLang then refuses to start
    tokens = profiled
    if inputs.max_total_tokens is not None:
        tokens = min(tokens, inputs.max_total_tokens)
    tokens = tokens // inputs.page_size * inputs.page_size
    rows = tokens + inputs.page_size
    if mla:
        k_bytes, v_bytes = rows * cell, 0
    else:
        k_bytes = v_bytes = rows * cell // 2
    max_num_reqs, pool_size, req_to_token, running = _request_pool(inputs, tokens)
    free_after_pool = free_after - k_bytes - v_bytes - req_to_token
    return SGLangPool(
        cell=cell, weights=weights, weights_how=how, weights_source=source, free_after_weights=free_after,
        headroom=headroom, rest=rest, profiled_tokens=profiled, tokens=tokens, k_bytes=k_bytes,
        v_bytes=v_bytes, mla=mla, max_num_reqs=max_num_reqs, req_pool_size=pool_size,
        req_to_token=req_to_token, max_running_requests=running, free_after_pool=free_after_pool,
        notes=tuple(notes),
    )  # fmt: skip


def _check_pool_inputs(inputs: PoolInputs) -> None:
    """Refuse a fraction outside (0, 1) and a page under one token before any arithmetic rests on them: the
    headroom and the page rounding would be nonsense, not an error."""
    if not 0 < inputs.mem_fraction_static < 1:
        raise PlannerError(f"mem_fraction_static must be between 0 and 1, got {inputs.mem_fraction_static}")
    if inputs.page_size < 1:
        raise PlannerError(f"page_size must be >= 1, got {inputs.page_size}")


def _widest_stage_cell(spec: ModelSpec, inputs: PoolInputs) -> tuple[int, bool]:
    """(bytes per token, MLA) of the stage with the widest cell: every stage sizes its own pool, then the
    smallest wins (0.5.6 model_runner.py:1734-1742), and that is the widest cell's; before PP existed there
    was one stage."""
    topology = make_topology(spec, inputs.tp, inputs.pp)
    cells = []
    for stage in range(inputs.pp):
        cell, mla = cell_bytes(spec, inputs.kv_dtype, inputs.tp, range(*_stage_range(topology, stage)))
        cells.append((cell, mla))
    cell, mla = max(cells)
    if cell <= 0:
        raise PlannerError(
            f"{spec.name}: no attention layer keeps a KV cache; SGLang's token pool is not sized"
        )
    return cell, mla


def _layers_not_modelled(spec: ModelSpec) -> list[str]:
    """Notes on the layers SGLang gives pools of their own (a window-sized SWA pool, a state pool), which
    this pool's arithmetic does not separate."""
    notes: list[str] = []
    if any(layer.attention is not None and layer.attention.kind == "sliding" for layer in spec.layers):
        notes.append(
            "sliding-window layers counted in full: SGLang's hybrid SWA pool (a second, window-sized pool "
            "for those layers) is not modelled"
        )
    if any(
        layer.attention is not None and layer.attention.kind not in ("full", "sliding", "mla")
        for layer in spec.layers
    ):
        notes.append("state layers (Mamba / linear attention): SGLang's separate state pool is not modelled")
    return notes


def _pool_weights(inputs: PoolInputs) -> tuple[int, str, str]:
    """(weights, how known, source): the logged or given weights win, since SGLang's figure is the drop in
    free memory across loading, which a prediction of the tensors alone can miss."""
    if inputs.weights_override is not None:
        return inputs.weights_override, "log", "the weights as given"
    weights, source = predicted_weights(inputs.spec, inputs.weight_format, inputs.tp, inputs.pp)
    return weights, "PREDICTED", source


def _request_pool(inputs: PoolInputs, tokens: int) -> tuple[int, int, int, int]:
    """(max_num_reqs, request pool size, req_to_token bytes, max running requests): the request pool is
    sized from the tokens unless --max-running-requests is given, and its +1 slot depends on the release."""
    if inputs.max_running_requests is not None:
        max_num_reqs = inputs.max_running_requests
    else:
        max_num_reqs = min(max(int(max(tokens, 0) / inputs.context_len * 512), 2048), 4096)
    pool_size = max_num_reqs + (1 if inputs.era.req_pool_plus_one else 0)
    req_to_token = pool_size * (inputs.context_len + REQ_TO_TOKEN_EXTRA) * INT32
    running = min(max(tokens, 0) // 2, pool_size)
    if inputs.max_running_requests is not None:
        running = min(inputs.max_running_requests, pool_size)
    return max_num_reqs, pool_size, req_to_token, running


def _stage_range(topology, stage: int) -> tuple[int, int]:  # noqa: ANN001
    layers = topology.stage_layers[stage]
    return (layers[0], layers[-1] + 1) if layers else (0, 0)


def gib(n: int) -> float:
    return n / GiB
