"""llama.cpp's model buffers per device: which layer -ngl and the GPU split put on which device, and so
which tensors each device's "model buffer" holds.

Read in ggml-org/llama.cpp@0c1e57098 (vendored by llama-cpp-python 0.3.36), src/llama-model.cpp:
- 1589-1614: layers il >= i_gpu_start = max(n_layer + 1 - n_gpu_layers, 0) go to the GPUs; the output
  layer (output_norm, output) counts as layer n_layer, so -ngl 1 offloads only the output layer and -ngl N
  the output layer and the last N - 1 repeating layers; "the input layer ... always keep it on the CPU":
  token_embd stays in host memory (the CPU_Mapped buffer with mmap);
- 1555-1598: with several GPUs (-sm layer, the default) the offloaded layers are cut into contiguous runs by
  the split points: the cumulative --tensor-split proportions (without -ts, each GPU's free memory at start),
  normalized to 1; layer il goes to the first GPU whose split point exceeds (il - i_gpu_start) / offloaded
  (std::upper_bound), so the output layer, the last, lands on the last GPU; src/llama.cpp:289-300: -sm none
  keeps only --main-gpu; -sm row (make_gpu_buft_list, 1139-1160) puts each offloaded layer's matrices in the
  split buffer type, whose rows ggml-cuda spreads over every GPU by --tensor-split;
- 1911-1925: "offloading output layer to GPU", "offloaded N/M layers to GPU" with M = n_layer + 1;
- src/models/llama.cpp:45 (qwen2.cpp:30, gemma3.cpp:45, ...): a model without output.weight (tied
  embeddings) creates the output from token_embd with TENSOR_DUPLICATED, a second copy on the output layer's
  device;
- 1928-1932: one "model buffer size" line per buffer (device) with the tensors' bytes (each tensor padded to
  the buffer type's alignment, at most 128 B: negligible).
"""

from __future__ import annotations

import bisect
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from planner.errors import PlannerError

MiB = 2**20
_BLOCK = re.compile(r"^blk\.(\d+)\.")
OUTPUT_TENSORS = ("output.weight", "output_norm.weight", "output_norm.bias", "output.bias")
SPLIT_MODES = ("layer", "row", "none")


@dataclass(frozen=True, slots=True)
class GpuSplit:
    """How llama.cpp spreads the offloaded layers over several GPUs (-sm, -ts, -mg)."""

    n_gpus: int = 1
    tensor_split: tuple[float, ...] = ()  # -ts: proportions per GPU (empty: equal, i.e. equal free memory)
    split_mode: str = "layer"  # -sm layer | row | none
    main_gpu: int = 0  # -mg

    def __post_init__(self) -> None:
        if self.n_gpus < 1:
            raise PlannerError("there must be at least one GPU")
        if self.split_mode not in SPLIT_MODES:
            raise PlannerError(
                f"-sm {self.split_mode!r}: llama.cpp's split modes are {', '.join(SPLIT_MODES)}"
            )
        if self.tensor_split and (
            len(self.tensor_split) != self.n_gpus or any(x < 0 for x in self.tensor_split)
        ):
            raise PlannerError(f"-ts needs {self.n_gpus} proportions of at least 0, one per GPU")
        if self.tensor_split and not any(self.tensor_split):
            raise PlannerError("-ts proportions are all 0")
        if not 0 <= self.main_gpu < self.n_gpus:
            n = self.n_gpus
            gpus = "there is 1 GPU (-mg 0)" if n == 1 else f"there are {n} GPUs (-mg 0 to {n - 1})"
            raise PlannerError(f"-mg {self.main_gpu}: {gpus}")

    @property
    def devices(self) -> int:
        """The GPUs the layers are spread over (-sm none keeps only the main GPU)."""
        return 1 if self.split_mode == "none" else self.n_gpus

    def points(self) -> list[float]:
        """The normalized cumulative split points, in float32 as llama-model.cpp:1577-1587 computes them."""
        shares = list(self.tensor_split) if self.tensor_split else [1.0] * self.devices
        total, points = 0.0, []
        for share in shares[: self.devices]:
            total = f32(total + f32(share))
            points.append(total)
        return [f32(p / total) for p in points]


def f32(x: float) -> float:
    """x rounded to a C float: llama.cpp compares the split points in float32."""
    return float(struct.unpack("f", struct.pack("f", x))[0])


def offloaded_layers(n_layer: int, n_gpu_layers: int) -> int:
    """What "offloaded N/M layers to GPU" says for -ngl (negative: all)."""
    if n_gpu_layers < 0:
        return n_layer + 1
    return min(n_gpu_layers, n_layer + 1)


def layer_devices(n_layer: int, n_gpu_layers: int, split: GpuSplit = GpuSplit()) -> tuple[int, ...]:
    """Each layer's device, il = 0 .. n_layer (the output layer last): a GPU index, or -1 for the CPU."""
    gpu_layers = offloaded_layers(n_layer, n_gpu_layers)
    first = n_layer + 1 - gpu_layers
    points = split.points()
    out = []
    for il in range(n_layer + 1):
        if il < first:
            out.append(-1)
        elif split.split_mode == "none":
            out.append(split.main_gpu)
        else:
            # the layer share (il - first) / gpu_layers, compared in float32 as llama.cpp does
            out.append(min(bisect.bisect_right(points, f32((il - first) / gpu_layers)), split.devices - 1))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class ModelBuffers:
    cpu_bytes: int
    gpu_bytes: int  # all GPUs together
    gpu_layers: int  # layers offloaded, as llama.cpp counts them (the output layer included)
    layers: int  # n_layer + 1
    tied_copy_bytes: int  # the second copy of token_embd a tied model keeps for the output on the GPU
    terms: tuple[str, ...]
    per_gpu: tuple[int, ...] = ()  # each GPU's model buffer (-sm row: its share of the split matrices)
    devices: tuple[int, ...] = field(default=())  # layer_devices

    @property
    def n_gpus(self) -> int:
        return len(self.per_gpu)


def _layer_of(name: str, n_layer: int) -> int:
    m = _BLOCK.match(name)
    if m:
        return int(m.group(1))
    if name in OUTPUT_TENSORS:
        return n_layer
    return -1  # the input layer (token_embd, rope tables, ...): always host memory


def split_tensors(
    tensors: Iterable[tuple[str, int] | tuple[str, int, bool]],
    n_layer: int,
    n_gpu_layers: int,
    split: GpuSplit = GpuSplit(),
) -> ModelBuffers:
    """Model buffers per device from the GGUF's tensor table (name, bytes[, is a matrix])."""
    devices = layer_devices(n_layer, n_gpu_layers, split)
    gpu_layers = offloaded_layers(n_layer, n_gpu_layers)
    per_gpu = [0] * split.n_gpus
    row_shares = [p - q for p, q in zip(split.points(), [0.0, *split.points()[:-1]], strict=True)]
    cpu = embd = 0
    has_output = False
    for entry in tensors:
        name, nbytes = entry[0], entry[1]
        is_matrix = entry[2] if len(entry) > 2 else True  # type: ignore[misc]
        layer = _layer_of(name, n_layer)
        has_output = has_output or name == "output.weight"
        if name == "token_embd.weight":
            embd = nbytes
        device = devices[layer] if layer >= 0 else -1
        if device < 0:
            cpu += nbytes
        elif split.split_mode == "row" and is_matrix and layer < n_layer:
            for gpu, share in enumerate(row_shares):  # the split buffer's rows, spread over every GPU
                per_gpu[gpu] += round(nbytes * share)
        else:
            per_gpu[device] += nbytes
    tied = 0
    if not has_output and gpu_layers >= 1:
        tied = embd
        per_gpu[devices[n_layer]] += embd
    gpu = sum(per_gpu)
    return ModelBuffers(
        cpu,
        gpu,
        gpu_layers,
        n_layer + 1,
        tied,
        _terms(n_layer, n_gpu_layers, gpu_layers, split, devices, cpu, per_gpu, tied),
        tuple(per_gpu),
        devices,
    )


def _terms(
    n_layer: int, n_gpu_layers: int, gpu_layers: int, split: GpuSplit, devices: Sequence[int], cpu: int,
    per_gpu: Sequence[int], tied: int,
) -> tuple[str, ...]:  # fmt: skip
    first = n_layer + 1 - gpu_layers
    terms = [
        f"-ngl {n_gpu_layers}: {gpu_layers}/{n_layer + 1} layers on the GPU (layers >= {first} and the "
        "output layer; token_embd stays in host memory: llama-model.cpp:1589-1614)",
    ]
    if split.n_gpus > 1:
        runs = []
        for gpu in range(split.n_gpus):
            layers = [il for il, d in enumerate(devices) if d == gpu]
            named = [str(il) if il < n_layer else "output" for il in layers]
            runs.append(
                f"GPU{gpu} "
                + (
                    f"layers {named[0]}-{named[-1]}"
                    if len(named) > 1
                    else f"layer {named[0]}"
                    if named
                    else "no layer"
                )
            )
        shares = ", ".join(f"{x:g}" for x in split.tensor_split) or "equal (free memory assumed equal)"
        terms.append(
            f"-sm {split.split_mode}, -ts {shares}: "
            + "; ".join(runs)
            + (" (matrices split by rows over every GPU)" if split.split_mode == "row" else "")
        )
    listed = ", ".join(f"GPU{i} {b / MiB:,.2f} MiB" for i, b in enumerate(per_gpu))
    terms.append(f"host {cpu:,} B ({cpu / MiB:.2f} MiB); {listed}")
    if tied:
        terms.append(
            f"tied embeddings: the output is a second copy of token_embd on the GPU, {tied:,} B "
            "(TENSOR_DUPLICATED, src/models/llama.cpp:45)"
        )
    return tuple(terms)
