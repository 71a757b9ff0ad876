"""`memsight plan FILE.gguf --engine llamacpp`: llama.cpp's own buffers before launch
(planner/engines/llamacpp), from the GGUF's header and llama.cpp's arguments, with llama.cpp's flag names.

Its options are part of `memsight plan --help`: at module level nothing heavier than argparse, re and
collections (which argparse loads anyway); the planner's llama.cpp engine is imported by predict()."""

from __future__ import annotations

import argparse
import re
from collections import namedtuple

from planner.errors import PlannerError
from tui.options import InputError, argparse_type, parse_choice, parse_count

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: `plan --help` does not pay for it
if TYPE_CHECKING:
    from typing import Any

MiB = 2**20
GiB = 2**30
KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")
FLAGS = ("n_gpu_layers", "parallel", "kv_unified", "cache_type_k", "cache_type_v", "ubatch_size",
         "flash_attn", "no_kv_offload", "swa_full", "batch_size", "gpus", "tensor_split", "split_mode",
         "main_gpu", "gpu_backend")  # fmt: skip
GPU_BACKENDS = ("CUDA", "ROCm", "Vulkan", "Metal", "CPU")


def count(flag: str, minimum: int = 0) -> Any:
    return argparse_type(parse_count, flag, minimum=minimum)


def choice(*choices: str, what: str) -> dict[str, Any]:
    return {"choices": choices, "type": argparse_type(parse_choice, choices, what)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("llama.cpp (--engine llamacpp; MODEL is a GGUF file; --context is -c)")
    group.add_argument(
        "--n-gpu-layers",
        "-ngl",
        type=argparse_type(parse_gpu_layers, "--n-gpu-layers"),
        default=None,
        help="layers on the GPU: N, auto (-1, the default) or all (-2); both put every layer there",
    )
    group.add_argument(
        "--parallel", "-np", type=count("--parallel", 1), default=None, help="sequences (slots)"
    )
    group.add_argument(
        "--kv-unified", "-kvu", action="store_true", default=None, help="one KV buffer for all"
    )
    for flag, short in (("--cache-type-k", "-ctk"), ("--cache-type-v", "-ctv")):
        group.add_argument(
            flag, short, **choice(*KV_TYPES, what=flag), default=None, help="KV type (default f16)"
        )
    group.add_argument("--ubatch-size", "-ub", type=count("--ubatch-size", 1), default=None)
    group.add_argument(
        "--flash-attn", "-fa", **choice("on", "off", what="--flash-attn"), default=None, help="on"
    )
    group.add_argument("--no-kv-offload", "-nkvo", action="store_true", default=None)
    group.add_argument("--swa-full", action="store_true", default=None)
    group.add_argument("--batch-size", "-b", type=count("--batch-size", 1), default=None, help="default 2048")
    group.add_argument(
        "--gpus", type=count("--gpus", 1), default=None, help="GPUs llama.cpp sees (default 1)"
    )
    group.add_argument(
        "--tensor-split", "-ts", type=_split, default=None, help="proportions per GPU, e.g. 3,1"
    )
    group.add_argument(
        "--split-mode", "-sm", **choice("layer", "row", "none", what="--split-mode"), default=None
    )
    group.add_argument("--main-gpu", "-mg", type=count("--main-gpu"), default=None)
    group.add_argument(
        "--gpu-backend", **choice(*GPU_BACKENDS, what="--gpu-backend"), default=None,
        help="the build's GPU backend (default CUDA; CPU: a CPU-only build)",
    )  # fmt: skip


# common/arg.cpp (0c1e570) -ngl: "auto" is -1, "all" is -2, and llama-model.cpp n_gpu_layers() reads any
# negative count as every layer (n_layer + 1); "auto" differs only in letting --fit (on by default) offload
# fewer when a GPU's free memory is short, which a plan made before launch cannot know
NGL_WORDS = {"auto": -1, "all": -2}


def parse_gpu_layers(text: str, what: str) -> int:
    word = NGL_WORDS.get(text.strip().lower())
    if word is not None:
        return word
    if not re.fullmatch(r"\s*-?[0-9][0-9,_]*\s*", text):
        raise InputError(f"{what}: {text!r} is not a number of layers, auto or all")
    return parse_count(text, what, minimum=-2)


def _split(text: str) -> tuple[float, ...]:
    """-ts 3,1 (llama.cpp also takes 3/1)."""
    try:
        parts = tuple(float(x) for x in text.replace("/", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not proportions like 3,1") from None
    if any(x < 0 or x != x for x in parts):
        raise argparse.ArgumentTypeError(f"{text!r} has a negative proportion")
    return parts


def given_flags(args: argparse.Namespace) -> list[str]:
    return [f"--{f.replace('_', '-')}" for f in FLAGS if getattr(args, f, None) is not None]


def predict(args: argparse.Namespace, context: int) -> Any:
    from planner.engines import get_engine  # noqa: PLC0415
    from planner.engines.llamacpp.model import GpuSplit  # noqa: PLC0415
    from planner.engines.llamacpp.predict import DEFAULT_BATCH, LlamaCppArgs  # noqa: PLC0415

    if not args.model or not str(args.model).lower().endswith(".gguf"):
        raise PlannerError("--engine llamacpp plans a GGUF file: give MODEL as path/to/model.gguf")
    n_gpus = args.gpus or (len(args.tensor_split) if args.tensor_split else 1)
    split = GpuSplit(n_gpus, args.tensor_split or (), args.split_mode or "layer", args.main_gpu or 0)
    backend = args.gpu_backend or "CUDA"
    arguments = LlamaCppArgs(
        n_ctx=context,
        n_gpu_layers=-1 if args.n_gpu_layers is None else args.n_gpu_layers,
        n_seq_max=args.parallel or 1,
        kv_unified=bool(args.kv_unified),
        type_k=args.cache_type_k or "f16",
        type_v=args.cache_type_v or "f16",
        n_ubatch=args.ubatch_size or 512,
        flash_attn=args.flash_attn != "off",
        kv_offload=not args.no_kv_offload,
        swa_full=bool(args.swa_full),
        n_batch=args.batch_size or DEFAULT_BATCH,
        gpus=split,
        gpu_backend=backend,
        cpu_only=backend == "CPU",
    )
    return get_engine("llamacpp").predict(args.model, arguments)


class Fit(namedtuple("Fit", ("machine", "label", "memory", "need_bytes", "capacity_bytes"))):
    """Whether llama.cpp's buffers fit a machine: the fullest memory they go in ("CUDA0", or "one pool" where
    GPU and host share the memory), against its capacity. A named tuple, not a dataclass: this module is
    imported by `plan --help`, and dataclasses (with inspect) would be most of its cost."""

    __slots__ = ()

    @property
    def fits(self) -> bool:
        return self.need_bytes <= self.capacity_bytes


def fit(p: Any, machine: Any) -> Fit:
    """On unified memory (or host RAM) every buffer, GPU and host, is in one pool less the OS reserve; on a
    discrete GPU each device holds its own buffers, the fullest one decides. llama.cpp's buffers only: the
    backend's own context (a CUDA context, ~0.3-0.5 GiB) is not in them."""
    rows = [(name, model + kv + compute) for name, model, kv, compute in p.per_device()]
    if machine.unified:
        room = machine.capacity_bytes - machine.os_reserve_bytes
        return Fit(machine.name, machine.label, "one pool", sum(t for _, t in rows), room)
    gpus = rows[:-1]
    if not gpus:
        raise PlannerError(
            f"--machine {machine.name} sizes a GPU's memory; --gpu-backend CPU keeps every buffer in host "
            "memory"
        )
    name, need = max(gpus, key=lambda r: r[1])
    return Fit(machine.name, machine.label, name, need, machine.capacity_bytes)


def _fit_line(f: Fit) -> str:
    verdict = "FITS" if f.fits else f"SHORT by {_m(f.need_bytes - f.capacity_bytes)} MiB"
    spare = f"{_m(f.capacity_bytes - f.need_bytes)} MiB to spare" if f.fits else "does not start"
    return (
        f"  on {f.label}: {verdict}: {f.memory} {_m(f.need_bytes)} of {_m(f.capacity_bytes)} MiB ({spare}; "
        "llama.cpp's buffers, not its backend's context)"
    )


def _m(n: int) -> str:
    return f"{n / MiB:,.2f}"


def render(model: str, p: Any, machine_fit: Fit | None = None) -> str:
    kv = p.kv
    devices = p.per_device()
    gpu_names = [d[0] for d in devices[:-1]]
    first = gpu_names[0] if gpu_names else "CPU"
    lines = [
        f"memsight plan: {model} under llama.cpp (the formulas of ggml-org/llama.cpp@0c1e57098)",
        f"  n_ctx {kv.n_ctx:,} ({kv.n_ctx_seq:,} cells per sequence), "
        f"-ngl: {p.model.gpu_layers}/{p.model.layers} "
        f"layers on the GPU, K {p.kv_args.type_k}, V {p.kv_args.type_v}",
        "",
        f"  {'buffer':<28}{'MiB':>12}   what llama.cpp logs",
        f"  {'model, GPU':<28}{_m(p.model.gpu_bytes):>12}   load_tensors: {first} model buffer size",
        f"  {'model, host':<28}{_m(p.model.cpu_bytes):>12}   load_tensors: CPU_Mapped model buffer size",
        f"  {'KV cache':<28}{_m(kv.bytes):>12}   llama_kv_cache: size = ... "
        f"(K {_m(kv.k_bytes)}, V {_m(kv.v_bytes)})",
        f"  {'KV buffer, GPU':<28}{_m(p.kv_gpu_bytes):>12}   llama_kv_cache: {first} KV buffer size",
        f"  {'compute buffer, GPU':<28}{_m(p.compute.bytes):>12}   {first} compute buffer size "
        f"({p.compute.how} from llama.cpp's graph)",
        f"  {'compute buffer, host':<28}{_m(p.compute.host_bytes):>12}   "
        + (
            f"{first.rstrip('0123456789')}_Host compute buffer size"
            if gpu_names
            else "CPU compute buffer size"
        ),
        f"  {'GPU total':<28}{_m(p.gpu_bytes):>12}   ({p.gpu_bytes / GiB:,.2f} GiB)",
        "",
    ]
    if len(gpu_names) > 1:
        lines.append(f"  {'per device (MiB)':<20}{'model':>12}{'KV':>12}{'compute':>12}{'total':>12}")
        for name, model_b, kv_b, compute_b in devices:
            total = model_b + kv_b + compute_b
            lines.append(f"  {name:<20}{_m(model_b):>12}{_m(kv_b):>12}{_m(compute_b):>12}{_m(total):>12}")
        lines.append("")
    if machine_fit is not None:
        lines += [_fit_line(machine_fit), ""]
    lines += [f"  kv: {t}" for t in kv.terms]
    lines += [f"  model: {t}" for t in p.model.terms]
    lines += [f"  compute: {t}" for t in p.compute.terms]
    lines += [f"  note: {n}" for n in p.notes]
    return "\n".join(lines)


def to_json(model: str, p: Any, machine_fit: Fit | None = None) -> dict[str, Any]:
    """Stable keys, bytes as integers."""
    out = {
        "model": model,
        "engine": "llamacpp",
        "n_ctx": p.kv.n_ctx,
        "n_ctx_seq": p.kv.n_ctx_seq,
        "gpu_layers": p.model.gpu_layers,
        "layers": p.model.layers,
        "model_gpu_bytes": p.model.gpu_bytes,
        "model_host_bytes": p.model.cpu_bytes,
        "kv_bytes": p.kv.bytes,
        "kv_k_bytes": p.kv.k_bytes,
        "kv_v_bytes": p.kv.v_bytes,
        "kv_gpu_bytes": p.kv_gpu_bytes,
        "kv_caches": [
            {"swa": c.swa, "cells": c.cells, "streams": c.streams, "layers": c.layers, "bytes": c.bytes}
            for c in p.kv.caches
        ],
        "compute_gpu_bytes": p.compute.bytes,
        "compute_host_bytes": p.compute.host_bytes,
        "compute_how": p.compute.how,
        "gpu_bytes": p.gpu_bytes,
        "devices": [
            {"device": name, "model_bytes": model_b, "kv_bytes": kv_b, "compute_bytes": compute_b}
            for name, model_b, kv_b, compute_b in p.per_device()
        ],
    }
    if machine_fit is not None:
        f = machine_fit
        out["fit"] = {"machine": f.machine, "memory": f.memory, "need_bytes": f.need_bytes,
                      "capacity_bytes": f.capacity_bytes, "fits": f.fits}  # fmt: skip
    return out
