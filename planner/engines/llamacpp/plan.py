"""`memsight plan FILE.gguf --engine llamacpp`: llama.cpp's buffers before launch, from the GGUF's header
(planner/checkpoint.py reads it without loading a tensor) and llama.cpp's arguments."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from planner.engines.llamacpp.graph import GraphShape
from planner.engines.llamacpp.kv import SWA_PATTERNS, KVShape, swa_layer_count, swa_layer_ids
from planner.engines.llamacpp.model import split_tensors
from planner.engines.llamacpp.predict import LlamaCppArgs, LlamaCppPlan, plan
from planner.errors import PlannerError


def _checkpoint(path: str) -> Any:
    from planner.checkpoint import read_checkpoint  # noqa: PLC0415

    info = read_checkpoint(path)
    if info.format != "gguf":
        raise PlannerError(f"{path}: --engine llamacpp plans a GGUF file; this is {info.format}")
    return info


def gguf_info(path: str) -> Any:
    """The GGUF's header as read_checkpoint reads it (its tensors, their bytes by type)."""
    return _checkpoint(path)


def gguf_tensors(path: str) -> list[tuple[str, int]]:
    return [(t.name, t.nbytes) for t in _checkpoint(path).tensors]


def weight_table(path: str) -> Callable[[str, int, int], int]:
    """Each weight's bytes in the GGUF, for the graph (a tied output is token_embd's copy)."""
    return _sizes({t.name: t.nbytes for t in _checkpoint(path).tensors})


def _sizes(table: Mapping[str, int]) -> Callable[[str, int, int], int]:
    def size(name: str, layer: int, values: int) -> int:
        if name == "output.weight" and name not in table:
            return table.get("token_embd.weight", values * 4)
        return table.get(name, values * 4)

    return size


def _key(meta: Mapping[str, Any], arch: str, key: str, default: Any = None) -> Any:
    value = meta.get(f"{arch}.{key}", default)
    if value is None:
        raise PlannerError(f"the GGUF has no {arch}.{key}")
    if isinstance(value, list):  # per-layer values (head_count_kv of some models): the largest
        value = max(value)
    return value


def shapes(
    meta: Mapping[str, Any], tensors: list[tuple[str, int]], shape_of: Mapping[str, tuple[int, ...]]
) -> tuple[KVShape, GraphShape]:
    """(KVShape, GraphShape) from the GGUF's metadata, as llama.cpp's hparams read them."""
    arch = str(meta.get("general.architecture", ""))
    if not arch:
        raise PlannerError("the GGUF names no general.architecture")
    n_layer = int(_key(meta, arch, "block_count"))
    n_embd = int(_key(meta, arch, "embedding_length"))
    n_head = int(_key(meta, arch, "attention.head_count"))
    head_kv = int(_key(meta, arch, "attention.head_count_kv", n_head))
    k_len = int(_key(meta, arch, "attention.key_length", n_embd // n_head))
    v_len = int(_key(meta, arch, "attention.value_length", n_embd // n_head))
    n_swa = int(meta.get(f"{arch}.attention.sliding_window", 0) or 0)
    nextn = int(meta.get(f"{arch}.nextn_predict_layers", 0) or 0)
    interval = meta.get(f"{arch}.full_attention_interval")
    kv_layers, swa, why = n_layer - nextn, 0, f"all {n_layer - nextn} layers have a KV cache"
    if interval:
        kv_layers = sum(1 for il in range(n_layer - nextn) if (il + 1) % int(interval) == 0)
        why = f"hybrid: every {interval}th layer is attention: {kv_layers} KV layers"
    swa_ids: frozenset[int] = frozenset()
    if n_swa and arch in SWA_PATTERNS:
        pattern = meta.get(f"{arch}.attention.sliding_window_pattern")
        swa, why = swa_layer_count(arch, kv_layers, int(pattern) if isinstance(pattern, int) else None)
        swa_ids = swa_layer_ids(arch, n_layer, int(pattern) if isinstance(pattern, int) else None)
    embd = shape_of.get("token_embd.weight")
    if embd is None:
        raise PlannerError("the GGUF has no token_embd.weight")
    n_vocab = embd[0]
    n_ff = int(meta.get(f"{arch}.feed_forward_length", 0) or 0)
    if meta.get(f"{arch}.expert_used_count"):
        n_ff = int(meta.get(f"{arch}.expert_feed_forward_length", n_ff)) * int(
            meta[f"{arch}.expert_used_count"]
        )
    kv = KVShape(arch, n_layer, head_kv * k_len, head_kv * v_len, kv_layers, swa, n_swa, why)
    names = {name for name, _ in tensors}
    graph = GraphShape(
        arch,
        n_layer,
        n_embd,
        n_head,
        head_kv,
        k_len,
        v_len,
        n_ff,
        n_vocab,
        swa_ids,
        qkv_bias="blk.0.attn_q.bias" in names,
        qk_norm="blk.0.attn_q_norm.weight" in names,
    )
    return kv, graph


def predict(path: str, args: LlamaCppArgs) -> LlamaCppPlan:
    info = _checkpoint(path)
    tensors = [(t.name, t.nbytes) for t in info.tensors]
    shape_of = {t.name: t.shape for t in info.tensors}
    kv, graph = shapes(info.metadata, tensors, shape_of)
    graph = dataclasses.replace(graph, weight_bytes=_sizes(dict(tensors)))
    matrices = [(t.name, t.nbytes, len(t.shape) >= 2) for t in info.tensors]
    buffers = split_tensors(matrices, kv.n_layer, args.n_gpu_layers, args.gpus)
    return plan(
        kv, graph, buffers, args, notes=(f"GGUF {path}: {len(tensors)} tensors, {info.tensor_bytes:,} B",)
    )
