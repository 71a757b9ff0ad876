"""ggml's backend scheduler on llama.cpp's reserve graph: which device runs each node, where the graph splits
between devices, which tensors are copied across, and so what each device's compute buffer holds.

Read in ggml/src/ggml-backend.cpp of ggml-org/llama.cpp@0c1e57098 (ggml_backend_sched_split_graph,
1060-1600; the rules have been the same since the scheduler's 2024 rewrite):
- pass 1 (ggml_backend_sched_backend_id_from_cur, 1580-1650): a tensor in a buffer (a weight, the KV cache)
  or a view of one runs where that buffer is; a graph input is on the CPU (the last backend); an op reading a
  weight runs on the weight's device, except that a GPU takes an op on a host-memory weight when its batch is
  large (op_offload: ggml-cuda.cu get_op_batch_size >= 32; never GET_ROWS, so token_embd's rows are read on
  the CPU);
- pass 2: the other nodes take the device of the node before them (GPU assignments spread first, down then
  up, then the CPU's);
- pass 5 (1297-1400): a split starts where the device changes (or at an op whose weight lives on another
  device); a source on another device that this device cannot read is copied once into a tensor of the same
  layout on it (ggml_dup_tensor_layout), which is placed in this device's compute buffer;
- the graph given to ggml-alloc (1507-1600): per split, each copied input (placed at the split's start)
  then the split's nodes; with pipeline parallelism (several GPUs, every layer offloaded) there are 4 copies
  of each input, flagged input and output so they are placed first and never freed.
llama.cpp pins each layer's "norm" to the layer's device when every layer is offloaded
(llama-context.cpp:2635-2660 graph_get_cb); every node of a layer is then on that layer's device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from planner.engines.llamacpp.galloc import GraphAllocator
from planner.engines.llamacpp.ggml import INPUT, OUTPUT, Context, Tensor

VIEW_OPS = frozenset({"VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"})
MIN_OFFLOAD_BATCH = 32  # ggml-cuda.cu ggml_backend_cuda_device_offload_op: batch >= 32
PIPELINE_COPIES = 4  # GGML_SCHED_MAX_COPIES


@dataclass(frozen=True, slots=True)
class Backend:
    name: str  # "CUDA0", "CPU"
    alignment: int  # the buffer type's alignment (CUDA 128, CPU / Metal 32)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where llama.cpp put the model: the backends (GPUs first, the CPU last), each layer's backend."""

    backends: tuple[Backend, ...]
    layer_backend: Callable[[int], int]  # il -> backend index; il = n_layer is the output layer
    kv_backend: Callable[[int], int]  # il -> backend index of the layer's KV cache
    op_offload: bool = True
    pipeline_copies: int = 1

    @property
    def cpu(self) -> int:
        return len(self.backends) - 1


@dataclass(frozen=True, slots=True)
class ComputeBuffers:
    sizes: tuple[int, ...]  # bytes per backend, in Placement.backends order
    peaks: tuple[tuple[tuple[str, int], ...], ...]  # per backend, the tensors alive at its high-water mark
    splits: int
    copies: tuple[tuple[str, str, int], ...]  # (tensor, to backend, bytes) for every cross-device copy


def _weight_backend(t: Tensor, p: Placement) -> int | None:
    """The backend of a tensor in a buffer of its own: a weight by its layer, a cache layer by the KV's."""
    if not t.external:
        return None
    if t.name.startswith("cache_"):
        return p.kv_backend(t.layer)
    if t.name.startswith("token_embd"):
        return p.cpu
    return p.layer_backend(t.layer)


def _batch(t: Tensor) -> int:
    """ggml-cuda's get_op_batch_size."""
    if t.op == "GET_ROWS":
        return 0
    if t.op == "MUL_MAT":
        return t.ne[1]
    if t.op in ("MUL_MAT_ID", "ROPE"):
        return t.ne[2]
    return t.ne[1] * t.ne[2] * t.ne[3]


def _pass1(t: Tensor, p: Placement) -> int | None:
    own = _weight_backend(t, p)
    if own is not None:
        return own
    if t.view_src is not None and t.view_src.external:
        return _weight_backend(t.view_src, p)
    if INPUT in t.flags:
        return p.cpu
    if t.op in ("ROPE", "FLASH_ATTN_EXT"):
        return None
    for src in t.src:
        if src is not None and src.external and not src.name.startswith("cache_"):
            backend = _weight_backend(src, p)
            assert backend is not None
            if p.op_offload and backend == p.cpu and p.cpu > 0 and _batch(t) >= MIN_OFFLOAD_BATCH:
                return 0
            return backend
    return None


def assign(ctx: Context, p: Placement, pin_norms: bool) -> dict[int, int]:
    """Every tensor's backend (by id), as ggml_backend_sched_split_graph's passes 1, 2 and 4 leave them."""
    where: dict[int, int] = {}
    for t in [*ctx.leafs, *ctx.nodes]:
        backend = _pass1(t, p)
        if backend is None and pin_norms and t.name == "norm" and t.layer >= 0:
            backend = p.layer_backend(t.layer)
        if backend is not None:
            where[id(t)] = backend
    compute = [t for t in ctx.nodes if t.op not in VIEW_OPS]
    for order, gpu_only in ((compute, True), (compute[::-1], True), (compute, False), (compute[::-1], False)):
        current = None
        for t in order:
            backend = where.get(id(t))
            if backend is not None:
                current = None if gpu_only and backend == p.cpu else backend
            elif current is not None:
                where[id(t)] = current
    for t in ctx.nodes:  # views (and anything left) run where their source is
        if id(t) not in where:
            source = t.view_src or next((s for s in t.src if s is not None), None)
            where[id(t)] = where.get(id(source), p.cpu) if source is not None else p.cpu
    return where


def _readable(src_backend: int, backend: int) -> bool:
    """ggml_backend_sched_buffer_supported: a device reads only its own buffers (CUDA, Vulkan and Metal
    devices_supports_buft in 0c1e570; the CPU reads the host buffers, which are its own)."""
    return src_backend == backend


def reserve(ctx: Context, p: Placement, pin_norms: bool) -> ComputeBuffers:
    """Split the graph, add the copies and let ggml-alloc place it: each backend's compute buffer."""
    where = assign(ctx, p, pin_norms)
    nodes: list[Tensor] = []
    node_buffers: list[int] = []
    leafs, leaf_buffers = _graph_leafs(ctx, p, where)
    copies: dict[tuple[int, int], Tensor] = {}
    copied: list[tuple[str, str, int]] = []
    splits = 0
    split_backend: int | None = None
    pending: list[tuple[Tensor, int]] = []  # the split's nodes, before its inputs are known
    inputs: list[tuple[Tensor, Tensor]] = []
    for t in ctx.nodes:
        backend = where[id(t)]
        if t.op in VIEW_OPS:
            pending.append((t, backend))
            continue
        if backend != split_backend or _weight_split(t, backend, where, p):
            _close_split(inputs, pending, split_backend, where, p, nodes, node_buffers)
            splits += 1
            split_backend = backend
        srcs = list(t.src)
        for j, src in enumerate(srcs):
            if src is None:
                continue
            src_backend = where.get(id(src), _weight_backend(src, p) or p.cpu)
            if _readable(src_backend, backend):
                continue
            key = (id(src), backend)
            if key not in copies:
                copies[key] = _copy(src, p, backend, leafs, leaf_buffers)
                inputs.append((src, copies[key]))
                copied.append((src.name, p.backends[backend].name, copies[key].nbytes))
            srcs[j] = copies[key]
        t.src = tuple(srcs)
        pending.append((t, backend))
    _close_split(inputs, pending, split_backend, where, p, nodes, node_buffers)
    allocator = GraphAllocator([b.alignment for b in p.backends])
    sizes = allocator.reserve(nodes, leafs, node_buffers, leaf_buffers)
    return ComputeBuffers(tuple(sizes), allocator.peaks(), splits, tuple(copied))


def _graph_leafs(ctx: Context, p: Placement, where: dict[int, int]) -> tuple[list[Tensor], list[int]]:
    """The graph's leafs and the buffer of each, the pipeline's copies of the inputs first."""
    leafs: list[Tensor] = []
    leaf_buffers: list[int] = []
    if p.pipeline_copies > 1:  # pass 6: every graph input has its copies too, placed first, never freed
        for t in ctx.leafs:
            if INPUT in t.flags:
                t.flags.add(OUTPUT)
                for c in range(1, p.pipeline_copies):
                    leafs.append(Tensor(f"CPU#{t.name}#{c}", t.type, t.ne, t.nb, flags={INPUT, OUTPUT}))
                    leaf_buffers.append(p.cpu)
    leafs += ctx.leafs
    leaf_buffers += [where.get(id(t), p.cpu) for t in ctx.leafs]
    return leafs, leaf_buffers


def _close_split(
    inputs: list[tuple[Tensor, Tensor]],
    pending: list[tuple[Tensor, int]],
    split_backend: int | None,
    where: dict[int, int],
    p: Placement,
    nodes: list[Tensor],
    node_buffers: list[int],
) -> None:
    """Give ggml-alloc a split: each copied input (after a dependency on its source), then the split's
    nodes; `inputs` and `pending` are emptied for the next split."""
    for src, copy in inputs:
        dep = Tensor(f"{src.name} (dep)", src.type, src.ne, src.nb, "NONE", (src,), src)
        nodes.append(dep)
        node_buffers.append(where.get(id(src), p.cpu))
        nodes.append(copy)
        node_buffers.append(split_backend if split_backend is not None else p.cpu)
    for node, buffer in pending:
        nodes.append(node)
        node_buffers.append(buffer)
    pending.clear()
    inputs.clear()


def _copy(src: Tensor, p: Placement, backend: int, leafs: list[Tensor], leaf_buffers: list[int]) -> Tensor:
    """ggml_dup_tensor_layout of a split input; with pipeline parallelism its copies are graph leafs."""
    name = f"{p.backends[backend].name}#{src.name}#0"
    copy = Tensor(name, src.type, src.ne, src.nb, "NONE", (), layer=src.layer, size=src.size)
    if p.pipeline_copies > 1:
        for c in range(p.pipeline_copies):
            extra = copy if c == 0 else Tensor(name[:-1] + str(c), src.type, src.ne, src.nb, layer=src.layer)
            extra.flags.update((INPUT, OUTPUT))
            leafs.append(extra)
            leaf_buffers.append(backend)
    return copy


def _weight_split(t: Tensor, backend: int, where: dict[int, int], p: Placement) -> bool:
    """A new split at an op whose weight lives on a device this one cannot read (the op_offload case), so that
    the copy of the previous weight can be reused."""
    for src in t.src:
        if src is not None and src.external and not src.name.startswith("cache_"):
            wb = _weight_backend(src, p)
            if wb is not None and not _readable(wb, backend):
                return True
    return False


def single_backend(ctx: Context, alignment: int) -> ComputeBuffers:
    """A CPU-only build: one backend, no split, no copy."""
    allocator = GraphAllocator([alignment])
    sizes = allocator.reserve(ctx.nodes, ctx.leafs, [0] * len(ctx.nodes), [0] * len(ctx.leafs))
    return ComputeBuffers(tuple(sizes), allocator.peaks(), 1, ())


def sizes_by_name(buffers: ComputeBuffers, backends: Sequence[Backend]) -> dict[str, int]:
    return {b.name: size for b, size in zip(backends, buffers.sizes, strict=True)}
