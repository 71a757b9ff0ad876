"""llama.cpp's memory terms for a model and the engine's arguments: the shared prediction behind
`memsight plan --engine llamacpp` (from a GGUF file's header) and `memsight explain` (from what a log prints
of the GGUF: its architecture, tensor types and size)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from planner.engines.llamacpp.compute import ComputeEstimate, Devices, compute_buffers, rules_for_build
from planner.engines.llamacpp.graph import ARCH_FAMILIES, GraphShape, ReserveBatch
from planner.engines.llamacpp.kv import KVArgs, KVPlan, KVShape, kv_plan
from planner.engines.llamacpp.model import GpuSplit, ModelBuffers
from planner.errors import PlannerError

MiB = 2**20
DEFAULT_BATCH = 2048  # -b: llama-server's and llama-cli's n_batch (common.h)
N_CTX_MAX = 2**32 - 1  # llama_context_params.n_ctx is a uint32_t (llama.h): a larger -c wraps around


@dataclass(frozen=True, slots=True)
class LlamaCppArgs:
    """The llama.cpp arguments memory depends on (llama-server / llama-cli flags)."""

    n_ctx: int  # -c
    n_gpu_layers: int = -1  # -ngl (-1: all)
    n_seq_max: int = 1  # -np
    kv_unified: bool = False  # --kv-unified
    type_k: str = "f16"  # -ctk
    type_v: str = "f16"  # -ctv
    n_ubatch: int = 512  # -ub
    flash_attn: bool = True  # -fa (llama.cpp's "auto" turns it on where the GPU supports it)
    kv_offload: bool = True  # --no-kv-offload keeps the KV in host memory
    swa_full: bool = False  # --swa-full
    n_batch: int = DEFAULT_BATCH  # -b
    n_outputs: int | None = None  # output rows reserved; None: llama-server 0c1e570's, one per slot (-np)
    build: int | None = None  # the llama.cpp build whose graph sizes the compute buffers (None: 0c1e570)
    gpus: GpuSplit = field(default_factory=GpuSplit)  # -sm / -ts / -mg over this many GPUs
    gpu_backend: str = "CUDA"  # the GPU backend's name: CUDA, ROCm, Vulkan, Metal
    cpu_only: bool = False  # a build without a GPU backend: one CPU compute buffer
    devices: tuple[str, ...] = ()  # the devices by name, in llama.cpp's order, where a log names them

    def __post_init__(self) -> None:
        if self.n_ctx > N_CTX_MAX:
            raise PlannerError(
                f"--context (-c) {self.n_ctx:,}: llama.cpp's n_ctx is a uint32, at most {N_CTX_MAX:,}"
            )
        # a Metal build sees one device (the Apple GPU): there is no second one to split layers over
        if self.gpu_backend == "Metal" and not self.cpu_only and self.gpus.n_gpus > 1:
            raise PlannerError(
                f"--gpu-backend Metal is one device: --gpus {self.gpus.n_gpus} needs CUDA, ROCm or Vulkan"
            )

    def device_names(self) -> tuple[str, ...]:
        if self.cpu_only:
            return ()
        if self.devices:
            return self.devices
        if self.gpu_backend == "Metal":
            return ("Metal",)
        return tuple(f"{self.gpu_backend}{i}" for i in range(self.gpus.n_gpus))


@dataclass(frozen=True, slots=True)
class LlamaCppPlan:
    """llama.cpp's buffers for one model and its arguments (bytes)."""

    model: ModelBuffers
    kv: KVPlan
    kv_args: KVArgs
    kv_gpu_bytes: int
    compute: ComputeEstimate
    notes: tuple[str, ...] = field(default_factory=tuple)
    kv_per_gpu: tuple[int, ...] = ()

    @property
    def gpu_bytes(self) -> int:
        return self.model.gpu_bytes + self.kv_gpu_bytes + self.compute.bytes

    def per_device(self) -> tuple[tuple[str, int, int, int], ...]:
        """(device, model, KV, compute) bytes for each GPU, then the host."""
        compute = dict(self.compute.per_device)
        rows = []
        for i, name in enumerate(n for n, _ in self.compute.per_device if n != "CPU"):
            model = self.model.per_gpu[i] if i < len(self.model.per_gpu) else 0
            kv = self.kv_per_gpu[i] if i < len(self.kv_per_gpu) else 0
            rows.append((name, model, kv, compute[name]))
        rows.append(("host", self.model.cpu_bytes, self.kv.bytes - self.kv_gpu_bytes, compute.get("CPU", 0)))
        return tuple(rows)


def kv_on_gpus(
    kv: KVPlan, shape: KVShape, model: ModelBuffers, kv_offload: bool
) -> tuple[tuple[int, ...], str]:
    """Each GPU's KV bytes: each layer's KV sits with its layer (llama-kv-cache.cpp:211-219
    model.dev_layer(il)); layers spread evenly assumed between full and SWA caches."""
    n_gpus = max(model.n_gpus, 1)
    if not model.gpu_layers:
        return (0,) * n_gpus, "no layer on the GPU: the KV cache is in host memory"
    if not kv_offload:
        return (0,) * n_gpus, "--no-kv-offload: the KV cache stays in host memory"
    repeating = model.devices[: shape.n_layer]
    per_gpu = tuple(
        round(kv.bytes * sum(1 for d in repeating if d == gpu) / shape.n_layer) if shape.n_layer else 0
        for gpu in range(n_gpus)
    )
    on_gpu = sum(1 for d in repeating if d >= 0)
    return per_gpu, f"{on_gpu}/{shape.n_layer} repeating layers on the GPU: their share of the KV"


def reserve_batch(args: LlamaCppArgs, kv: KVPlan) -> ReserveBatch:
    """The micro-batch sched_reserve builds (llama-context.cpp:246-248, 627-670): n_batch and n_ubatch cut to
    the requested n_ctx, the tokens a multiple of the sequences, one output row per sequence (llama-server
    0c1e570) or every token (builds before n_outputs_max)."""
    n_batch = min(args.n_ctx, args.n_batch)
    n_tokens = min(kv.n_ctx, n_batch, args.n_ubatch)
    n_tokens = -(-n_tokens // args.n_seq_max) * args.n_seq_max
    streams = kv.caches[0].streams if kv.caches else 1
    n_outputs = min(n_tokens, args.n_outputs if args.n_outputs is not None else args.n_seq_max)
    full = next((c.cells for c in kv.caches if not c.swa), 0)
    swa = next((c.cells for c in kv.caches if c.swa), 0)
    return ReserveBatch(
        n_tokens, n_outputs, streams, full or swa, swa, args.flash_attn, args.type_k, args.type_v
    )


def plan(
    shape: KVShape,
    graph: GraphShape,
    model: ModelBuffers,
    args: LlamaCppArgs,
    notes: tuple[str, ...] = (),
) -> LlamaCppPlan:
    kv_args = KVArgs(
        n_ctx=args.n_ctx,
        n_seq_max=args.n_seq_max,
        kv_unified=args.kv_unified,
        type_k=args.type_k,
        type_v=args.type_v,
        n_ubatch=args.n_ubatch,
        swa_full=args.swa_full,
        flash_attn=args.flash_attn,
    )
    kv = kv_plan(shape, kv_args)
    kv_gpus, kv_why = kv_on_gpus(kv, shape, model, args.kv_offload)
    pipeline = args.gpus.devices > 1 and model.gpu_layers == model.layers and args.kv_offload
    # a GPU build keeps its GPU backend with no layer offloaded: big matrix products still run there
    devices = Devices(args.device_names(), model.devices, args.kv_offload, pipeline)
    compute = compute_buffers(graph, reserve_batch(args, kv), devices, rules_for_build(args.build))
    if graph.arch not in ARCH_FAMILIES:
        why = f"APPROXIMATE: memsight has no graph of {graph.arch!r}; this is llama's graph for its shapes"
        compute = dataclasses.replace(compute, how="APPROXIMATE", terms=(why, *compute.terms))
    return LlamaCppPlan(model, kv, kv_args, sum(kv_gpus), compute, (*notes, kv_why), kv_gpus)
