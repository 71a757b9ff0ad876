"""Ollama's own estimate before it starts a runner: the `msg=offload` line's memory.required.kv and
memory.weights.{total,repeating,nonrepeating} (llm/memory.go EstimateGPULayers with fs/ggml GraphSize, v0.3 -
v0.11; the new memory management of v0.12 measures instead of estimating for its own engine).

Ollama does not price this the way the runner then allocates it:
- KV per layer = context x (key + value head dims) x kv heads x bytes per element, with context =
  num_ctx x num_parallel and 2 / 1 / 0.5 bytes for f16 / q8_0 / q4_0 (kvCacheBytesPerElement: no block
  scales, no padding of the cell count); Gemma 3's five sliding layers of every six hold
  num_parallel x window + batch cells instead (v0.9.5 fs/ggml/ggml.go:575-585);
- weights = the repeating blocks ("blk.N") + the output layer: output_norm and `output`, or token_embd where
  the model ties them (v0.9.5 llm/memory.go:174-181); the token embeddings themselves are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import PlannerError
from planner.formats import weight_bytes
from planner.spec import ModelSpec

BYTES_PER_ELEMENT = {"f16": 2.0, "": 2.0, "q8_0": 1.0, "q4_0": 0.5}


@dataclass(frozen=True, slots=True)
class OllamaEstimate:
    kv: int
    weights_repeating: int | None  # None: the weight format is not one memsight prices
    weights_output: int | None

    @property
    def weights(self) -> int | None:
        if self.weights_repeating is None or self.weights_output is None:
            return None
        return self.weights_repeating + self.weights_output


def estimate_kv(
    spec: ModelSpec, context: int, parallel: int, batch: int, kv_type: str, architecture: str | None
) -> int:
    """memory.required.kv for a runner of `context` cells in all (num_ctx x parallel)."""
    bpe = BYTES_PER_ELEMENT.get(kv_type.strip().lower())
    if bpe is None:
        raise PlannerError(f"unknown Ollama KV cache type {kv_type!r}; known: f16, q8_0, q4_0")
    gemma3 = (architecture or spec.model_type) in ("gemma3", "gemma3_text")
    total = 0
    for layer in spec.layers:
        attention = layer.attention
        if attention is None:
            continue
        width = attention.num_kv_heads * (
            attention.k_head_dim + (attention.v_head_dim or attention.k_head_dim)
        )
        cells = context
        if gemma3 and attention.kind == "sliding" and attention.window is not None:
            cells = parallel * attention.window + min(context, batch)
        total += int(cells * width * bpe)
    return total


def ollama_estimate(
    spec: ModelSpec,
    fmt: str | None,
    context: int,
    parallel: int,
    batch: int,
    kv_type: str,
    architecture: str | None = None,
) -> OllamaEstimate:
    kv = estimate_kv(spec, context, parallel, batch, kv_type, architecture)
    if fmt is None:
        return OllamaEstimate(kv, None, None)
    w = weight_bytes(spec, fmt)
    output = w.final_norm + (w.head if w.head else w.embed)
    return OllamaEstimate(kv, sum(w.per_layer), output)
