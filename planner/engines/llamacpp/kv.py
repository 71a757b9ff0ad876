"""llama.cpp's KV buffer, from the model's shapes and the context arguments, as llama.cpp sizes it.

Read in the llama.cpp that llama-cpp-python 0.3.36 vendors (ggml-org/llama.cpp@0c1e57098, "b0c1e570" below):
- src/llama-context.cpp:289-306: n_ctx is padded to 256; with a unified KV cache (--kv-unified) every sequence
  shares n_ctx cells (n_ctx_seq = n_ctx), else each of the n_seq_max (-np) sequences gets its own stream of
  n_ctx_seq = pad(n_ctx / n_seq_max, 256) cells;
- src/llama-kv-cache.cpp:65-305: per layer with a KV cache, K is [n_embd_k_gqa, cells, streams] and V is
  [n_embd_v_gqa, cells, streams] in the -ctk / -ctv types (V padded to the widest layer when flash attention
  is off: [TAG_V_CACHE_VARIABLE]); the buffer is one per device (a layer's KV follows its layer, or stays on
  the CPU with --no-kv-offload);
- src/llama-kv-cache-iswa.cpp:60-105: a model with sliding-window layers gets two caches: the full layers
  with n_ctx_seq cells, the SWA layers with pad(min(n_ctx_seq, n_swa * (unified ? n_seq_max : 1) + n_ubatch),
  256) cells (all n_ctx_seq with --swa-full);
- src/models/<arch>.cpp load_swa_pattern(ml, n): which layers are SWA (il % n < n - 1; gemma2 and gpt-oss 2,
  gemma3 6, cohere2 / llama4 / olmo2 / exaone4 4, gemma3n 5), unless the GGUF lists them;
- ggml's row size: a row of n values of a block type takes n / block x block bytes (ggml.c ggml_row_size).
Older builds padded n_ctx to 32 (256 with flash attention) and had one stream (before ~b6400).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import PlannerError
from planner.formats import GGML_BY_NAME
from planner.units import ceil_div

MiB = 2**20
CTX_PAD = 256  # llama-context.cpp: GGML_PAD(n_ctx, 256)
SWA_PAD = 256  # llama-kv-cache-iswa.cpp: the SWA cache is always padded to 256
# src/models/<arch>.cpp load_swa_pattern(ml, n_pattern) in b0c1e570 (the GGUF key
# <arch>.attention.sliding_window_pattern wins where present)
SWA_PATTERNS: dict[str, int] = {
    "gemma2": 2, "gemma3": 6, "gemma-embedding": 6, "gemma3n": 5, "gpt-oss": 2, "openai-moe": 2,
    "cohere2": 4, "llama4": 4, "olmo2": 4, "exaone4": 4, "exaone-moe": 4, "afmoe": 4, "mellum": 4,
    "plamo3": 8,
}  # fmt: skip
KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")


def row_bytes(ggml_type: str, n: int) -> int:
    """ggml_row_size: bytes of a row of n values of a ggml type."""
    try:
        block, size = GGML_BY_NAME[ggml_type.upper()]
    except KeyError:
        raise PlannerError(f"unknown ggml type {ggml_type!r}; KV types: {', '.join(KV_TYPES)}") from None
    if n % block:
        raise PlannerError(f"a row of {n} values is not a whole number of {ggml_type} blocks of {block}")
    return n // block * size


def pad(n: int, multiple: int) -> int:
    return ceil_div(n, multiple) * multiple


@dataclass(frozen=True, slots=True)
class KVShape:
    """What the KV cache needs to know of a model (llama.cpp's hparams)."""

    arch: str
    n_layer: int
    n_embd_k_gqa: int  # K values per token per layer (all KV heads)
    n_embd_v_gqa: int
    kv_layers: int  # layers that have a KV cache
    swa_layers: int  # of kv_layers, sliding-window ones
    n_swa: int  # the window (0: none)
    why_layers: str  # how kv_layers / swa_layers were found


@dataclass(frozen=True, slots=True)
class KVArgs:
    n_ctx: int  # -c, as asked (llama.cpp pads it)
    n_seq_max: int = 1  # -np
    kv_unified: bool = False  # --kv-unified (llama-server turns it on when -np is auto)
    type_k: str = "f16"  # -ctk
    type_v: str = "f16"  # -ctv
    n_ubatch: int = 512  # -ub
    swa_full: bool = False  # --swa-full
    flash_attn: bool = True


@dataclass(frozen=True, slots=True)
class KVCache:
    """One KV cache (an iSWA model has a full one and an SWA one)."""

    swa: bool
    cells: int  # per stream
    streams: int
    layers: int
    k_bytes: int
    v_bytes: int

    @property
    def bytes(self) -> int:
        return self.k_bytes + self.v_bytes


@dataclass(frozen=True, slots=True)
class KVPlan:
    n_ctx: int  # after padding
    n_ctx_seq: int
    caches: tuple[KVCache, ...]
    terms: tuple[str, ...]

    @property
    def bytes(self) -> int:
        return sum(c.bytes for c in self.caches)

    @property
    def k_bytes(self) -> int:
        return sum(c.k_bytes for c in self.caches)

    @property
    def v_bytes(self) -> int:
        return sum(c.v_bytes for c in self.caches)


def swa_layer_ids(arch: str, n_layer: int, pattern: int | None = None) -> frozenset[int]:
    """The sliding-window layers: llama.cpp's set_swa_pattern (llama-hparams.cpp:8-22, dense_first false)."""
    n = pattern if pattern is not None else SWA_PATTERNS.get(arch)
    if n is None:
        raise PlannerError(f"the sliding-window layer pattern of {arch!r} is not known to memsight")
    return frozenset(il for il in range(n_layer) if n == 0 or il % n < n - 1)


def swa_layer_count(arch: str, n_layer: int, pattern: int | None = None) -> tuple[int, str]:
    """(SWA layers, why)."""
    count = len(swa_layer_ids(arch, n_layer, pattern))
    n = pattern if pattern is not None else SWA_PATTERNS.get(arch)
    return count, f"SWA pattern {n} of {arch} (src/models/{arch}.cpp load_swa_pattern): {count} of {n_layer}"


def kv_plan(shape: KVShape, args: KVArgs) -> KVPlan:
    """The KV cache(s) llama.cpp b0c1e570 allocates for these arguments."""
    if args.n_ctx < 1 or args.n_seq_max < 1 or args.n_ubatch < 1:
        raise PlannerError("n_ctx, n_seq_max and n_ubatch must be at least 1")
    n_ctx = pad(args.n_ctx, CTX_PAD)
    terms = [f"n_ctx {args.n_ctx} padded to {CTX_PAD}: {n_ctx} (llama-context.cpp:289)"]
    if args.kv_unified or args.n_seq_max == 1:
        n_ctx_seq, streams = n_ctx, 1
    else:
        n_ctx_seq = pad(n_ctx // args.n_seq_max, CTX_PAD)
        streams = args.n_seq_max
        n_ctx = n_ctx_seq * args.n_seq_max
        terms.append(
            f"{args.n_seq_max} sequences, not unified: {streams} streams of "
            f"pad(n_ctx / {args.n_seq_max}, 256) = "
            f"{n_ctx_seq} cells (llama-context.cpp:294-305)"
        )
    k_row = row_bytes(args.type_k, shape.n_embd_k_gqa)
    v_row = row_bytes(args.type_v, shape.n_embd_v_gqa)
    caches = []
    full_layers = shape.kv_layers - shape.swa_layers
    if full_layers:
        caches.append(_cache(False, n_ctx_seq, streams, full_layers, k_row, v_row))
    if shape.swa_layers:
        if args.swa_full:
            swa_cells = n_ctx_seq
            terms.append("--swa-full: the SWA cache has every cell")
        else:
            window = shape.n_swa * (args.n_seq_max if args.kv_unified else 1) + args.n_ubatch
            swa_cells = pad(min(n_ctx_seq, window), SWA_PAD)
            terms.append(
                f"SWA cache: pad(min({n_ctx_seq}, n_swa {shape.n_swa} x "
                f"{args.n_seq_max if args.kv_unified else 1} + n_ubatch {args.n_ubatch}), 256) = {swa_cells} "
                "cells (llama-kv-cache-iswa.cpp:73)"
            )
        caches.append(_cache(True, swa_cells, streams, shape.swa_layers, k_row, v_row))
    terms.append(
        f"K row {shape.n_embd_k_gqa} x {args.type_k} = {k_row} B, "
        f"V row {shape.n_embd_v_gqa} x {args.type_v} = "
        f"{v_row} B per cell per layer; {shape.why_layers}"
    )
    for c in caches:
        terms.append(
            f"{'SWA' if c.swa else 'full'} cache: {c.cells} cells x {c.streams} stream(s) x "
            f"{c.layers} layers x "
            f"({k_row} + {v_row}) B = {c.bytes:,} B ({c.bytes / MiB:.2f} MiB)"
        )
    return KVPlan(n_ctx, n_ctx_seq, tuple(caches), tuple(terms))


def _cache(swa: bool, cells: int, streams: int, layers: int, k_row: int, v_row: int) -> KVCache:
    return KVCache(
        swa, cells, streams, layers, cells * streams * layers * k_row, cells * streams * layers * v_row
    )
