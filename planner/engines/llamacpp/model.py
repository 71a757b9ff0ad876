"""llama.cpp's model buffers per device: which tensors -ngl puts on the GPU and which stay on the CPU.

Read in ggml-org/llama.cpp@0c1e57098 (vendored by llama-cpp-python 0.3.36), src/llama-model.cpp:
- 1589-1614: layers il >= i_gpu_start = max(n_layer + 1 - n_gpu_layers, 0) go to the GPU(s); the output
  layer (output_norm, output) counts as layer n_layer, so -ngl 1 offloads only the output layer and -ngl N the
  output layer and the last N - 1 repeating layers; "the input layer ... always keep it on the CPU":
  token_embd stays in host memory (the CPU_Mapped buffer with mmap);
- 1911-1925: "offloading output layer to GPU", "offloaded N/M layers to GPU" with M = n_layer + 1;
- src/models/llama.cpp:45 (qwen2.cpp:30, gemma3.cpp:45, ...): a model without output.weight (tied
  embeddings) creates the output from token_embd with TENSOR_DUPLICATED, a second copy on the output layer's
  device;
- 1928-1932: one "model buffer size" line per buffer (device) with the tensors' bytes (each tensor padded to
  the buffer type's alignment, at most 128 B: negligible).
Several GPUs share the offloaded layers by free memory (or --tensor-split); memsight reports them as one "GPU"
figure, the sum.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

MiB = 2**20
_BLOCK = re.compile(r"^blk\.(\d+)\.")
OUTPUT_TENSORS = ("output.weight", "output_norm.weight", "output_norm.bias", "output.bias")


@dataclass(frozen=True, slots=True)
class ModelBuffers:
    cpu_bytes: int
    gpu_bytes: int
    gpu_layers: int  # layers offloaded, as llama.cpp counts them (the output layer included)
    layers: int  # n_layer + 1
    tied_copy_bytes: int  # the second copy of token_embd a tied model keeps for the output on the GPU
    terms: tuple[str, ...]


def offloaded_layers(n_layer: int, n_gpu_layers: int) -> int:
    """What "offloaded N/M layers to GPU" says for -ngl (negative: all)."""
    if n_gpu_layers < 0:
        return n_layer + 1
    return min(n_gpu_layers, n_layer + 1)


def split_tensors(tensors: Iterable[tuple[str, int]], n_layer: int, n_gpu_layers: int) -> ModelBuffers:
    """Model buffers from the GGUF's tensor table (name, bytes)."""
    gpu_layers = offloaded_layers(n_layer, n_gpu_layers)
    first_gpu = n_layer + 1 - gpu_layers  # i_gpu_start
    cpu = gpu = 0
    embd = 0
    has_output = False
    for name, nbytes in tensors:
        m = _BLOCK.match(name)
        if m:
            layer = int(m.group(1))
        elif name in OUTPUT_TENSORS:
            layer = n_layer
            has_output = has_output or name == "output.weight"
        else:
            layer = -1  # the input layer (token_embd, rope tables, ...): always host memory
        if name == "token_embd.weight":
            embd = nbytes
        if layer >= first_gpu and layer >= 0:
            gpu += nbytes
        else:
            cpu += nbytes
    tied = 0
    if not has_output and gpu_layers >= 1:
        tied = embd
        gpu += embd
    terms = [
        f"-ngl {n_gpu_layers}: {gpu_layers}/{n_layer + 1} layers on the GPU (layers >= {first_gpu} and "
        "the output "
        "layer; token_embd stays in host memory: llama-model.cpp:1589-1614)",
        f"host {cpu:,} B ({cpu / MiB:.2f} MiB), GPU {gpu:,} B ({gpu / MiB:.2f} MiB)",
    ]
    if tied:
        terms.append(
            f"tied embeddings: the output is a second copy of token_embd on the GPU, {tied:,} B "
            "(TENSOR_DUPLICATED, src/models/llama.cpp:45)"
        )
    return ModelBuffers(cpu, gpu, gpu_layers, n_layer + 1, tied, tuple(terms))
