"""Ollama's own engine (`runner --ollama-engine`): its KV cache and where the weights go, per device.

The KV cache (kvcache/causal.go Causal.Init, v0.12.6 :136-192): each layer holds `cells` slots of
kv_heads x (key + value head dims) elements of the cache type, where
  cells = roundUp(parallel x capacity, padding)                     (full attention)
  cells = roundUp(parallel x swa_memory + batch, padding)           (sliding window, when smaller)
with capacity = KvSize / parallel (runner/ollamarunner/cache.go:35), swa_memory = the window (+1 when
parallel > 1), padding 256 with flash attention and 32 without (ml/backend/ggml/ggml.go:685-691
CacheConfig). Element bytes are ggml's: f16 2, q8_0 34 per 32, q4_0 18 per 32 (planner.formats.GGML_BY_NAME).

The weights (ml/backend/ggml/ggml.go New, v0.12.6 :201-317): the token embeddings stay on the CPU ("input"),
each repeating layer on the device its layer index is given to, and the output head with the final norm on
the output layer's device (index `blocks`); a model with tied embeddings copies token_embd there as its
output. memsight prices each tensor as the GGUF stores it (planner.formats: q4_k_m, q8_0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.errors import PlannerError
from planner.formats import weight_bytes
from planner.spec import ModelSpec

KV_TYPES = {"f16": "f16", "": "f16", "q8_0": "q8_0", "q4_0": "q4_0", "f32": "f32"}


def kv_element_bytes(kv_type: str, elements: int) -> int:
    """Bytes of `elements` cache elements of `kv_type` (ggml's row size: whole blocks)."""
    from planner.engines.llamacpp.kv import row_bytes  # noqa: PLC0415  (one ggml row size for every engine)

    name = KV_TYPES.get(kv_type.strip().lower())
    if name is None:
        raise PlannerError(f"unknown Ollama KV cache type {kv_type!r}; known: f16, q8_0, q4_0")
    return row_bytes(name, elements)


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


@dataclass(frozen=True, slots=True)
class LayerCache:
    layer: int
    cells: int
    bytes: int
    sliding: bool


def ollama_kv_layers(
    spec: ModelSpec, kv_size: int, parallel: int, batch: int, kv_type: str, flash_attention: bool
) -> tuple[LayerCache, ...]:
    """Each attention layer's cache in Ollama's engine for a runner of KvSize `kv_size`."""
    if parallel < 1 or kv_size < parallel:
        raise PlannerError(
            f"KvSize {kv_size} must hold at least one token per parallel sequence ({parallel})"
        )
    padding = 256 if flash_attention else 32
    capacity = kv_size // parallel
    out = []
    for layer in spec.layers:
        attention = layer.attention
        if attention is None or attention.kind not in ("full", "sliding", "mla"):
            continue
        cells = round_up(parallel * capacity, padding)
        sliding = attention.kind == "sliding" and attention.window is not None
        if sliding:
            memory = attention.window + (1 if parallel > 1 else 0)
            if memory < capacity:
                cells = round_up(parallel * memory + batch, padding)
            else:
                sliding = False
        width = attention.num_kv_heads * (
            attention.k_head_dim + (attention.v_head_dim or attention.k_head_dim)
        )
        out.append(LayerCache(layer.index, cells, kv_element_bytes(kv_type, cells * width), sliding))
    return tuple(out)


def weights_by_device(
    spec: ModelSpec, fmt: str, gpu_layer_indices: tuple[int, ...], output_on_gpu: bool
) -> dict[str, int]:
    """Weight bytes on "GPU" and "CPU" for the layers given to the GPU (the embeddings always on the CPU)."""
    w = weight_bytes(spec, fmt)
    on_gpu = set(gpu_layer_indices)
    gpu = sum(b for i, b in enumerate(w.per_layer) if i in on_gpu)
    cpu = w.embed + sum(b for i, b in enumerate(w.per_layer) if i not in on_gpu)
    head = (w.head if w.head else w.embed) + w.final_norm  # tied: token_embd copied as the output
    return {"GPU": gpu + head, "CPU": cpu} if output_on_gpu else {"GPU": gpu, "CPU": cpu + head}


def kv_by_device(layers: tuple[LayerCache, ...], gpu_layer_indices: tuple[int, ...]) -> dict[str, int]:
    """KV bytes on "GPU" and "CPU": each layer's cache lives where its layer runs."""
    on_gpu = set(gpu_layer_indices)
    gpu = sum(c.bytes for c in layers if c.layer in on_gpu)
    return {"GPU": gpu, "CPU": sum(c.bytes for c in layers) - gpu}


def gpu_layers_from(offloaded: int, blocks: int) -> tuple[tuple[int, ...], bool]:
    """The layers "offloaded N/M layers to GPU" puts on the GPU: the last ones, the output counting as one
    (N = blocks + 1 puts the output there too; llama.cpp and Ollama offload from the end)."""
    if offloaded <= 0:
        return (), False
    output = offloaded > blocks
    repeating = min(offloaded, blocks)
    return tuple(range(blocks - repeating, blocks)), output


# ---- the llama runner (Ollama before its own engine, and the models it still runs on llama.cpp): llama.cpp's
# own arithmetic (planner.engines.llamacpp), with Ollama's runner settings: one sequence stream of num_ctx x
# num_parallel cells (the llama.cpp Ollama vendors keeps one unified cache), the cache type for K and V alike.
def llama_runner_kv(
    spec: ModelSpec, kv_size: int, parallel: int, batch: int, kv_type: str, flash_attention: bool
) -> Any:
    """llama.cpp's KV plan (planner.engines.llamacpp.kv.KVPlan) for a llama runner of KvSize `kv_size`."""
    return llama_runner_kv_shaped(spec, kv_size, parallel, batch, kv_type, flash_attention)[0]


def llama_runner_kv_shaped(
    spec: ModelSpec, kv_size: int, parallel: int, batch: int, kv_type: str, flash_attention: bool
) -> tuple[Any, Any]:
    """(KVPlan, the KVShape it was computed for)."""
    from planner.engines.llamacpp.kv import KVArgs, KVShape, kv_plan  # noqa: PLC0415

    layers = [layer.attention for layer in spec.layers if layer.attention is not None]
    if not layers:
        raise PlannerError(f"{spec.name}: no attention layer with a KV cache")
    k = max(a.num_kv_heads * a.k_head_dim for a in layers)
    v = max(a.num_kv_heads * (a.v_head_dim or a.k_head_dim) for a in layers)
    swa = [a for a in layers if a.kind == "sliding" and a.window is not None]
    why = f"memsight's spec of {spec.name}: {len(layers)} attention layers, {len(swa)} sliding"
    shape = KVShape(spec.model_type, len(spec.layers), k, v, len(layers), len(swa),
                    swa[0].window if swa else 0, why)  # fmt: skip
    name = KV_TYPES.get(kv_type.strip().lower(), kv_type)
    args = KVArgs(n_ctx=kv_size, n_seq_max=parallel, kv_unified=True, type_k=name, type_v=name,
                  n_ubatch=batch, flash_attn=flash_attention)  # fmt: skip
    return kv_plan(shape, args), shape


def llama_runner_weights(spec: ModelSpec, fmt: str, n_gpu_layers: int) -> Any:
    """llama.cpp's model buffers (planner.engines.llamacpp.model.split_tensors) for -ngl `n_gpu_layers`, the
    tensors priced by planner.formats in the GGUF file type."""
    from planner.engines.llamacpp.model import split_tensors  # noqa: PLC0415

    w = weight_bytes(spec, fmt)
    tensors = [("token_embd.weight", w.embed), ("output_norm.weight", w.final_norm)]
    if w.head:
        tensors.append(("output.weight", w.head))
    tensors += [(f"blk.{i}.weights", b) for i, b in enumerate(w.per_layer)]
    return split_tensors(tensors, len(spec.layers), n_gpu_layers)
