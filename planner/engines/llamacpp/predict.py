"""llama.cpp's memory terms for a model and the engine's arguments: the shared prediction behind
`memsight plan --engine llamacpp` (from a GGUF file's header) and `memsight explain` (from what a log prints
of the GGUF: its architecture, tensor types and size)."""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.engines.llamacpp.compute import ComputeEstimate, ComputeShape, gpu_compute_bytes
from planner.engines.llamacpp.kv import KVArgs, KVPlan, KVShape, kv_plan
from planner.engines.llamacpp.model import ModelBuffers

MiB = 2**20


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


@dataclass(frozen=True, slots=True)
class LlamaCppPlan:
    """llama.cpp's buffers for one model and its arguments (bytes)."""

    model: ModelBuffers
    kv: KVPlan
    kv_args: KVArgs
    kv_gpu_bytes: int
    compute: ComputeEstimate
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def gpu_bytes(self) -> int:
        return self.model.gpu_bytes + self.kv_gpu_bytes + self.compute.bytes


def kv_on_gpu(kv: KVPlan, shape: KVShape, model: ModelBuffers, kv_offload: bool) -> tuple[int, str]:
    """The KV bytes on the GPU: each layer's KV sits with its layer (llama-kv-cache.cpp:211-219
    model.dev_layer(il)), the repeating layers il >= n_layer + 1 - offloaded; layers spread evenly assumed
    between full and SWA caches."""
    if not model.gpu_layers:
        return 0, "no layer on the GPU: the KV cache is in host memory"
    if not kv_offload:
        return 0, "--no-kv-offload: the KV cache stays in host memory"
    repeating_on_gpu = max(0, min(model.gpu_layers, shape.n_layer + 1) - 1) if model.gpu_layers else 0
    if model.gpu_layers > shape.n_layer:
        repeating_on_gpu = shape.n_layer
    share = repeating_on_gpu / shape.n_layer if shape.n_layer else 0
    gpu = round(kv.bytes * share)
    return gpu, f"{repeating_on_gpu}/{shape.n_layer} repeating layers on the GPU: their share of the KV"


def plan(
    shape: KVShape,
    compute_shape: ComputeShape,
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
    kv_gpu, kv_why = kv_on_gpu(kv, shape, model, args.kv_offload)
    n_kv = max(c.cells for c in kv.caches) if kv.caches else 0
    compute = gpu_compute_bytes(
        compute_shape,
        n_ubatch=args.n_ubatch,
        n_kv=n_kv,
        flash_attn=args.flash_attn,
        output_on_gpu=model.gpu_layers >= 1,
    )
    if not model.gpu_layers:
        compute = ComputeEstimate(0, "none", ("no layer on the GPU: no GPU compute buffer",))
    return LlamaCppPlan(model, kv, kv_args, kv_gpu, compute, (*notes, kv_why))
