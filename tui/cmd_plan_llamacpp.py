"""`memsight plan FILE.gguf --engine llamacpp`: llama.cpp's own buffers before launch
(planner/engines/llamacpp), from the GGUF's header and llama.cpp's arguments, with llama.cpp's flag names."""

from __future__ import annotations

import argparse
from typing import Any

from planner.errors import PlannerError
from tui.options import argparse_type, parse_choice, parse_count

MiB = 2**20
GiB = 2**30
KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")
FLAGS = ("n_gpu_layers", "parallel", "kv_unified", "cache_type_k", "cache_type_v", "ubatch_size",
         "flash_attn", "no_kv_offload", "swa_full")  # fmt: skip


def count(flag: str, minimum: int = 0) -> Any:
    return argparse_type(parse_count, flag, minimum=minimum)


def choice(*choices: str, what: str) -> dict[str, Any]:
    return {"choices": choices, "type": argparse_type(parse_choice, choices, what)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("llama.cpp (--engine llamacpp; MODEL is a GGUF file; --context is -c)")
    group.add_argument(
        "--n-gpu-layers",
        "-ngl",
        type=count("--n-gpu-layers"),
        default=None,
        help="layers on the GPU (default all)",
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


def given_flags(args: argparse.Namespace) -> list[str]:
    return [f"--{f.replace('_', '-')}" for f in FLAGS if getattr(args, f, None) is not None]


def predict(args: argparse.Namespace, context: int) -> Any:
    from planner.engines import get_engine  # noqa: PLC0415
    from planner.engines.llamacpp.predict import LlamaCppArgs  # noqa: PLC0415

    if not args.model or not str(args.model).lower().endswith(".gguf"):
        raise PlannerError("--engine llamacpp plans a GGUF file: give MODEL as path/to/model.gguf")
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
    )
    return get_engine("llamacpp").predict(args.model, arguments)


def _m(n: int) -> str:
    return f"{n / MiB:,.2f}"


def render(model: str, p: Any) -> str:
    kv = p.kv
    lines = [
        f"memsight plan: {model} under llama.cpp (the formulas of ggml-org/llama.cpp@0c1e57098)",
        f"  n_ctx {kv.n_ctx:,} ({kv.n_ctx_seq:,} cells per sequence), "
        f"-ngl: {p.model.gpu_layers}/{p.model.layers} "
        f"layers on the GPU, K {p.kv_args.type_k}, V {p.kv_args.type_v}",
        "",
        f"  {'buffer':<28}{'MiB':>12}   what llama.cpp logs",
        f"  {'model, GPU':<28}{_m(p.model.gpu_bytes):>12}   load_tensors: CUDA0 model buffer size",
        f"  {'model, host':<28}{_m(p.model.cpu_bytes):>12}   load_tensors: CPU_Mapped model buffer size",
        f"  {'KV cache':<28}{_m(kv.bytes):>12}   llama_kv_cache: size = ... "
        f"(K {_m(kv.k_bytes)}, V {_m(kv.v_bytes)})",
        f"  {'KV buffer, GPU':<28}{_m(p.kv_gpu_bytes):>12}   llama_kv_cache: CUDA0 KV buffer size",
        f"  {'compute buffer, GPU':<28}{_m(p.compute.bytes):>12}   APPROXIMATE (the graph's largest tensors)",
        f"  {'GPU total':<28}{_m(p.gpu_bytes):>12}   ({p.gpu_bytes / GiB:,.2f} GiB)",
        "",
    ]
    lines += [f"  kv: {t}" for t in kv.terms]
    lines += [f"  model: {t}" for t in p.model.terms]
    lines += [f"  compute: {t}" for t in p.compute.terms]
    lines += [f"  note: {n}" for n in p.notes]
    return "\n".join(lines)


def to_json(model: str, p: Any) -> dict[str, Any]:
    """Stable keys, bytes as integers."""
    return {
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
        "compute_how": "APPROXIMATE",
        "gpu_bytes": p.gpu_bytes,
    }
