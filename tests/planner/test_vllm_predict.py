"""The config-alone terms of the vLLM pool: bitsandbytes 4-bit weights as vLLM loads them, non-torch memory by
era, CUDA-graph capture sizes and the estimate, the device totals vLLM reads."""

from __future__ import annotations

import pytest

from planner.engines.vllm.overheads import (
    CUDAGRAPH_BYTES_PER_GRAPH,
    NON_TORCH_GROWTH_DISTRIBUTED,
    NON_TORCH_GROWTH_ONE_GPU,
    NON_TORCH_WITH_CONTEXT,
    cudagraph_capture_sizes,
    device_total,
    predicted_cudagraphs,
    predicted_non_torch,
)
from planner.errors import PlannerError
from planner.formats import weight_bytes
from planner.params import count_params
from planner.spec import load_spec
from planner.units import GiB


def test_bnb_4bit_bytes_exact():
    spec = load_spec("llama-3.1-8b")
    h, i, kv, v, layers = 4096, 14336, 1024, 128256, 32
    linear = h * h * 2 + h * kv * 2 + 3 * h * i  # q, o, k, v, gate, up, down per layer
    packed = linear // 2  # two 4-bit values per byte
    absmax = 4 * (h * h // 64 * 2 + h * kv // 64 * 2 + 3 * h * i // 64)  # fp32 per 64 weights, per matrix
    norms = 2 * h * 2  # two RMSNorms per layer, bf16
    expected = layers * (packed + absmax + norms) + 2 * v * h * 2 + h * 2  # embed + lm_head + final norm bf16
    assert weight_bytes(spec, "bnb_nf4").total == expected
    assert weight_bytes(spec, "bnb_fp4").total == expected


def test_bnb_quantization_config_and_skip_modules():
    config = dict(load_spec("llama-3.1-8b").config)
    config["quantization_config"] = {
        "quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
        "bnb_4bit_use_double_quant": True, "llm_int8_skip_modules": ["model.layers.0.mlp"],
    }  # fmt: skip
    spec = load_spec(config)
    assert spec.default_format == "bnb_nf4" and spec.quantization.group_size == 64
    plain = dict(config, quantization_config=dict(config["quantization_config"], llm_int8_skip_modules=[]))
    kept = weight_bytes(spec).total - weight_bytes(load_spec(plain)).total
    mlp = 3 * 4096 * 14336
    assert kept == mlp * 2 - (mlp // 2 + 4 * 3 * (4096 * 14336 // 64))  # layer 0's MLP in bf16, not 4-bit
    assert count_params(spec).total == count_params(load_spec(plain)).total
    config["quantization_config"] = dict(config["quantization_config"], bnb_4bit_quant_type="int3")
    with pytest.raises(PlannerError, match="bnb_4bit_quant_type"):
        load_spec(config)


def test_non_torch_by_era():
    assert predicted_non_torch("0.6.4", "V0", 1).bytes == NON_TORCH_WITH_CONTEXT
    assert predicted_non_torch("0.6.6", "V0", 1).bytes == NON_TORCH_GROWTH_ONE_GPU
    assert predicted_non_torch("0.8.5", "V1", 1).bytes == NON_TORCH_WITH_CONTEXT
    assert predicted_non_torch("0.9.1", "V1", 1).bytes == NON_TORCH_GROWTH_ONE_GPU
    assert predicted_non_torch("0.33.0", "V1", 4).bytes == NON_TORCH_GROWTH_DISTRIBUTED
    assert all(predicted_non_torch(v, "V1", 1).how == "PREDICTED" for v in ("0.8.0", "0.20.0"))
    assert "memory_profiling" in predicted_non_torch("0.10.0", "V1", 1).source


def test_capture_sizes_and_graph_estimate():
    assert cudagraph_capture_sizes("0.10.0", 256) == (1, 2, 4, *range(8, 257, 8))
    sizes = cudagraph_capture_sizes("0.20.0", 256)
    assert sizes[-1] == 512 and len(sizes) == 51
    assert cudagraph_capture_sizes("0.20.0", 4) == (1, 2, 4, 8)  # up to 2 x max_num_seqs
    assert predicted_cudagraphs("0.19.0", "V1", 256).bytes == 0  # not deducted by default before 0.20
    assert predicted_cudagraphs("0.20.0", "V1", 256).bytes == 51 * CUDAGRAPH_BYTES_PER_GRAPH
    assert predicted_cudagraphs("0.20.0", "V1", 256, enforce_eager=True).bytes == 0
    assert predicted_cudagraphs("0.10.0", "V0", 256).bytes == 0


def test_device_totals():
    assert device_total("h100").total_bytes == round(79.22 * GiB)
    assert device_total("NVIDIA A100-SXM4-80GB").capability == (8, 0)
    assert device_total("spark").name == "NVIDIA GB10"
    with pytest.raises(PlannerError, match="no recorded mem_get_info total"):
        device_total("tpu-v9")
