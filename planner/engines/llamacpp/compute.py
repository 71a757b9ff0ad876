"""llama.cpp's compute buffers, DERIVED from its graph: the worst-case graph llama.cpp reserves at start-up
(graph.py), split between the devices as ggml's scheduler splits it (sched.py) and placed by ggml-alloc's
rules (galloc.py). Each buffer is the allocator's high-water mark, as llama.cpp logs it ("CUDA0 compute
buffer size", "CUDA_Host compute buffer size"; "CPU compute buffer size" in a CPU-only run).

The graph differs between llama.cpp builds; rules_for_build picks the one a log's build used. The thresholds
between them are those of the pull requests that changed the graph (dates in GraphRules' descriptions) mapped
to build numbers approximately: a build near a threshold may have the other graph. What the graph leaves out
of each buffer is in ComputeEstimate.terms: backend-specific extras (CUDA's flash-attention f16 copies of a
quantized KV cache in 2026 builds; Vulkan's and Metal's graph reordering) are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.engines.llamacpp.graph import (
    GRAPH_0C1E570,
    GRAPH_2024,
    GRAPH_2025,
    GraphRules,
    GraphShape,
    ReserveBatch,
    build_graph,
)
from planner.engines.llamacpp.sched import (
    PIPELINE_COPIES,
    Backend,
    ComputeBuffers,
    Placement,
    reserve,
    single_backend,
)
from planner.errors import PlannerError

MiB = 2**20
CPU_ALIGNMENT = 32  # ggml-backend.cpp TENSOR_ALIGNMENT (the CPU and CUDA_Host buffer types)
# each GPU backend's buffer alignment: ggml-cuda.cu:897 (also ROCm, MUSA: the CUDA code), ggml-metal.cpp:269;
# Vulkan's is the device's minStorageBufferOffsetAlignment, not known from the log (32 assumed)
# an RPC device's is its server's (128 assumed: a CUDA server)
ALIGNMENTS = {"CUDA": 128, "ROCm": 128, "MUSA": 128, "Metal": 32, "Vulkan": 32, "SYCL": 128, "RPC": 128}
# build numbers of the graph changes, approximate (see the module's docstring)
SET_ROWS_BUILD = 6100  # K/V stored with set_rows by default (LLAMA_SET_ROWS, August 2025)
NO_MASK_PAD_BUILD = (
    7200  # the KQ mask no longer padded, created f16 with flash attention (PR 16309, Nov 2025)
)


def rules_for_build(build: int | None) -> GraphRules:
    """The reserve graph of a llama.cpp build (None: the newest, 0c1e570)."""
    if build is None or build >= NO_MASK_PAD_BUILD:
        return GRAPH_0C1E570
    if build >= SET_ROWS_BUILD:
        return GRAPH_2025
    return GRAPH_2024


@dataclass(frozen=True, slots=True)
class Devices:
    """The devices the model is on: GPU backend names (none: a CPU-only run) and each layer's device."""

    gpus: tuple[str, ...]  # "CUDA0", "CUDA1", "Metal", "Vulkan0"
    layer_device: tuple[int, ...]  # il = 0 .. n_layer (the output layer last): an index into gpus, -1: CPU
    kv_offload: bool = True
    # llama-context.cpp: pipeline parallelism when the model spans several devices (-sm layer), every layer
    # is offloaded and the KV with them: 4 copies of every input
    pipeline: bool = False

    @property
    def all_offloaded(self) -> bool:
        return bool(self.gpus) and all(d >= 0 for d in self.layer_device)


def alignment(backend: str) -> int:
    return next((a for prefix, a in ALIGNMENTS.items() if backend.startswith(prefix)), CPU_ALIGNMENT)


@dataclass(frozen=True, slots=True)
class ComputeEstimate:
    bytes: int  # the GPU compute buffers, summed over the GPUs
    host_bytes: int  # the CPU's (in a GPU run, the pinned host buffer: CUDA_Host, Vulkan_Host)
    per_device: tuple[tuple[str, int], ...]  # each backend's buffer
    how: str  # "DERIVED"
    terms: tuple[str, ...]
    nodes: int = 0  # the graph's nodes, as llama.cpp logs them ("graph nodes = N")


def _placement(devices: Devices) -> Placement:
    if max(devices.layer_device, default=-1) >= len(devices.gpus):
        # a layer on a device the backends do not list would be read past them (sched.py _copy)
        raise PlannerError(
            f"layers placed on {max(devices.layer_device) + 1} GPUs but the backend lists "
            f"{len(devices.gpus)} ({', '.join(devices.gpus)})"
        )
    backends = tuple(Backend(g, alignment(g)) for g in devices.gpus) + (Backend("CPU", CPU_ALIGNMENT),)
    cpu = len(backends) - 1
    layer = devices.layer_device

    def layer_backend(il: int) -> int:
        d = layer[min(max(il, 0), len(layer) - 1)] if il >= 0 else -1
        return cpu if d < 0 else d

    def kv_backend(il: int) -> int:
        return layer_backend(il) if devices.kv_offload else cpu

    return Placement(
        backends, layer_backend, kv_backend, pipeline_copies=PIPELINE_COPIES if devices.pipeline else 1
    )


def compute_buffers(
    shape: GraphShape, batch: ReserveBatch, devices: Devices, rules: GraphRules = GRAPH_0C1E570
) -> ComputeEstimate:
    ctx = build_graph(shape, batch, rules)
    if not devices.gpus:
        buffers = single_backend(ctx, CPU_ALIGNMENT)
        names = ("CPU",)
    else:
        placement = _placement(devices)
        buffers = reserve(ctx, placement, pin_norms=devices.all_offloaded)
        names = tuple(b.name for b in placement.backends)
    per_device = tuple(zip(names, buffers.sizes, strict=True))
    gpu = sum(size for name, size in per_device if name != "CPU")
    host = dict(per_device)["CPU"]
    terms = _terms(shape, batch, rules, buffers, names)
    return ComputeEstimate(gpu, host, per_device, "DERIVED", terms, len(ctx.nodes))


def _terms(
    shape: GraphShape, batch: ReserveBatch, rules: GraphRules, buffers: ComputeBuffers, names: tuple[str, ...]
) -> tuple[str, ...]:
    attention = (
        "flash attention (no score matrix)"
        if batch.flash_attn
        else (
            f"scores kq {batch.n_kv} x {batch.n_tokens // batch.n_stream} x {shape.n_head} heads f32 a layer"
        )
    )
    terms = [
        f"the reserve graph of llama.cpp {rules.name}: {batch.n_tokens} tokens ({batch.n_stream} stream(s)), "
        f"{batch.n_outputs} output row(s) x {shape.n_vocab} vocab, {attention}; {buffers.splits} split(s)",
    ]
    for (name, size), peak in zip(zip(names, buffers.sizes, strict=True), buffers.peaks, strict=True):
        live = sum(b for _, b in peak)
        top = ", ".join(f"{n} {b / MiB:,.2f}" for n, b in peak[:4])
        holes = size - live
        terms.append(
            f"{'host' if name == 'CPU' else name} {size / MiB:,.2f} MiB: ggml-alloc's high-water mark, when "
            f"{top} MiB{' ...' if len(peak) > 4 else ''} were live"
            + (f" (+ {holes / MiB:,.2f} MiB of freed gaps)" if holes > 0 else "")
        )
    if buffers.copies:
        listed = ", ".join(f"{n} -> {to} {b / MiB:,.2f}" for n, to, b in buffers.copies[:6])
        more = f" and {len(buffers.copies) - 6} more" if len(buffers.copies) > 6 else ""
        terms.append(f"copied between devices (MiB): {listed}{more}")
    return tuple(terms)
