"""The config-alone terms of the vLLM pool: bitsandbytes 4-bit weights as vLLM loads them, non-torch memory by
era, CUDA-graph capture sizes and the estimate, the device totals vLLM reads."""

from __future__ import annotations

import pytest

from planner.engines.vllm.overheads import (
    COMM_BYTES,
    CONTEXT_BYTES,
    CUDAGRAPH_BYTES_PER_GRAPH,
    CUDAGRAPH_BYTES_PER_GRAPH_TP,
    LOCAL_MEMORY_BYTES_PER_THREAD,
    LOCAL_MEMORY_LOGS,
    LOCAL_MEMORY_UNKNOWN_GPU,
    GraphSetup,
    cudagraph_capture_sizes,
    device_total,
    predicted_cudagraphs,
    predicted_non_torch,
)
from planner.engines.vllm.version import model_runner_v2
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


def test_non_torch_is_a_sum_of_named_parts_by_era():
    h100, l4 = device_total("h100"), device_total("l4")
    local_h100 = 132 * 2048 * LOCAL_MEMORY_BYTES_PER_THREAD
    # eras without a baseline count the context; 0.6.5+ and V1 0.9.1+ only what grows after it
    assert predicted_non_torch("0.6.4", "V0", 1, device=h100).bytes == CONTEXT_BYTES + local_h100
    assert predicted_non_torch("0.8.5", "V1", 1, device=h100).bytes == CONTEXT_BYTES + local_h100
    assert predicted_non_torch("0.6.6", "V0", 1, device=h100).bytes == local_h100
    assert predicted_non_torch("0.9.1", "V1", 1, device=h100).bytes == local_h100
    # NCCL / custom all-reduce count where the baseline precedes the distributed init (V0, V1 0.9.1 - 0.10.x);
    # V1 0.11+ sets them up before its baseline (v0.29.0:vllm/v1/worker/gpu_worker.py:416-439)
    assert predicted_non_torch("0.10.1.1", "V1", 2, device=device_total("a100-80gb")).bytes == (
        108 * 2048 * LOCAL_MEMORY_BYTES_PER_THREAD + COMM_BYTES
    )
    assert predicted_non_torch("0.8.0", "V0", 4, device=h100).bytes == local_h100 + COMM_BYTES
    beyond = predicted_non_torch("0.33.0", "V1", 4, device=h100)
    assert beyond.bytes == predicted_non_torch("0.11.0", "V1", 2, device=h100).bytes == local_h100
    assert "no NCCL / custom all-reduce: V1 >= 0.11 sets them up before its baseline" in beyond.source
    # the local-memory reservation follows the GPU's resident threads: an L4 (58 SMs x 1536) holds a third
    l4_local = 58 * 1536 * LOCAL_MEMORY_BYTES_PER_THREAD
    assert predicted_non_torch("0.11.0", "V1", 1, device=l4).bytes == l4_local
    assert predicted_non_torch("0.11.0", "V1", 1).bytes == LOCAL_MEMORY_UNKNOWN_GPU  # GPU not known
    source = predicted_non_torch("0.8.5", "V1", 2, device=h100).source
    assert "local memory 270,336 resident threads" in source and "NCCL + custom all-reduce" in source
    assert "CUDA context" in source
    assert all(predicted_non_torch(v, "V1", 1).how == "PREDICTED" for v in ("0.8.0", "0.20.0"))
    assert "memory_profiling" in predicted_non_torch("0.10.0", "V1", 1).source
    # 0.18 - 0.26 keep the H100 sweep's totals: its logs cannot separate the parts
    assert predicted_non_torch("0.19.0", "V1", 1, device=l4).bytes == round(0.25 * GiB)


def test_the_empirical_parts_are_computed_from_the_logs_they_cite():
    """Bytes per resident thread: the least-squares slope through zero of the three one-GPU logs (T4 0.01,
    A100 0.10, H100 0.16 GiB); each log then within its two-decimal rounding plus the fit's spread."""
    xy = sum(threads * gib * GiB for threads, gib, _ in LOCAL_MEMORY_LOGS)
    xx = sum(threads**2 for threads, _, _ in LOCAL_MEMORY_LOGS)
    assert LOCAL_MEMORY_BYTES_PER_THREAD == round(xy / xx) == 571
    for threads, gib, _ in LOCAL_MEMORY_LOGS:
        assert abs(threads * LOCAL_MEMORY_BYTES_PER_THREAD / GiB - gib) < 0.03
    assert abs(CONTEXT_BYTES / GiB - 0.283) < 0.001  # 0.35 GiB on an RTX 3090 less its local memory
    assert abs(COMM_BYTES / GiB - 0.162) < 0.001  # PR #14447 and #14452 less their local memory


def test_capture_sizes_and_graph_estimate():
    assert cudagraph_capture_sizes("0.10.0", 256) == (1, 2, 4, *range(8, 257, 8))
    sizes = cudagraph_capture_sizes("0.20.0", 256)
    assert sizes[-1] == 512 and len(sizes) == 51
    assert cudagraph_capture_sizes("0.20.0", 4) == (1, 2, 4, 8)  # up to 2 x max_num_seqs
    assert predicted_cudagraphs("0.19.0", "V1", 256).bytes == 0  # not deducted by default before 0.20
    # FULL_AND_PIECEWISE: a PIECEWISE graph per size (51) and a FULL one per size up to max_num_seqs (35)
    assert predicted_cudagraphs("0.20.0", "V1", 256).bytes == (51 + 35) * CUDAGRAPH_BYTES_PER_GRAPH
    assert predicted_cudagraphs("0.20.0", "V1", 256, tp=2).bytes == (51 + 35) * CUDAGRAPH_BYTES_PER_GRAPH_TP
    assert predicted_cudagraphs("0.20.0", "V1", 256, enforce_eager=True).bytes == 0
    assert predicted_cudagraphs("0.10.0", "V0", 256).bytes == 0
    assert abs(CUDAGRAPH_BYTES_PER_GRAPH / 2**20 - 7.91) < 0.01  # 0.19.0 H100 sweep: 0.61-0.84 GiB / 102


@pytest.mark.parametrize(
    ("version", "kwargs", "graphs", "why"),
    [
        ("0.22.1", {"setup": GraphSetup(mode="NONE")}, 0, "cudagraph_mode NONE"),
        ("0.22.1", {"setup": GraphSetup(mode="PIECEWISE")}, 51, ""),
        ("0.22.1", {"setup": GraphSetup(graphs=(19, 11))}, 30, "the counts the log printed"),
        ("0.22.1", {"setup": GraphSetup(capture_sizes=(1, 2, 4, 8))}, 8, "the log's cudagraph_capture_sizes"),
        ("0.22.1", {"estimate": False}, 0, "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0"),
        ("0.19.0", {"estimate": True}, 86, ""),  # 0.18-0.19 deduct it when the env var asks
        ("0.22.1", {"platform": "rocm"}, 0, "on CUDA only"),  # v0.22.1 gpu_worker: is_cuda()
        ("0.26.0", {"platform": "rocm"}, 86, ""),  # v0.26.0: is_cuda_alike()
        ("0.20.0", {"platform": "rocm"}, 0, "on CUDA only"),  # v0.20.0: not is_rocm()
    ],
)
def test_when_vllm_takes_a_graph_estimate_from_the_pool(version, kwargs, graphs, why):
    term = predicted_cudagraphs(version, "V1", 256, **kwargs)
    assert term.bytes == graphs * CUDAGRAPH_BYTES_PER_GRAPH
    assert why in term.source


def test_device_totals():
    assert device_total("h100").total_bytes == round(79.22 * GiB)
    assert device_total("NVIDIA A100-SXM4-80GB").capability == (8, 0)
    assert device_total("spark").name == "NVIDIA GB10"
    with pytest.raises(PlannerError, match="no recorded mem_get_info total"):
        device_total("tpu-v9")


@pytest.mark.parametrize(
    ("gpu", "total_gib", "sms", "platform"),
    [("l4", 22.05, 58, "cuda"), ("l40s", 44.52, 142, "cuda"), ("rtx4090", 23.57, 128, "cuda"),
     ("rtx5090", 31.37, 170, "cuda"), ("rtx5090-wsl", 31.84, 170, "cuda"), ("rtx3090-wsl", 24.0, 82, "cuda"),
     ("mi300x", 191.69, 304, "rocm"), ("a10", 22.07, 72, "cuda")],
)  # fmt: skip
def test_the_gpu_table_covers_the_common_cards_each_with_its_source(gpu, total_gib, sms, platform):
    device = device_total(gpu)
    assert device.total_bytes == round(total_gib * GiB)
    assert device.sm_count == sms and device.platform == platform
    assert device.source  # where the total was seen (or how it was derived, said so)


def test_gb10_gives_vllm_no_nvml_total_for_its_scheduler_defaults():
    spark = device_total("gb10")
    assert spark.total_bytes == round(119.7 * GiB)  # mem_get_info
    assert spark.scheduler_total_bytes == 0  # NVML_ERROR_NOT_SUPPORTED: vLLM takes 0 (small defaults)
    assert device_total("h100").scheduler_total_bytes == device_total("h100").total_bytes


@pytest.mark.parametrize(
    "ver,model_type,moe,hybrid,quantized,v2",
    [
        ((0, 21, 0), "llama", False, False, False, False),  # no default yet
        ((0, 22, 1), "qwen3", False, False, False, True),  # Qwen3ForCausalLM only
        ((0, 22, 1), "qwen3", False, False, True, False),  # ... unless quantized
        ((0, 22, 1), "qwen3_moe", True, False, False, False),  # the mlops 0.22.1 log's model: V1 runner
        ((0, 24, 0), "llama", False, False, False, True),
        ((0, 24, 0), "qwen3_5_moe", True, True, True, False),  # the club-3090 0.24.0 logs' model
        ((0, 26, 0), "gemma2", False, False, False, True),  # any dense, non-hybrid model
        ((0, 26, 1), "qwen3_moe", True, False, False, False),  # the Qwen3-Coder 0.26.1 log: V1 runner
        ((0, 28, 0), "qwen2_moe", True, False, False, True),  # a listed MoE
        ((0, 29, 0), "gpt_oss", True, False, True, True),  # every model (the akamas L4 logs)
    ],
)
def test_model_runner_v2_by_default_follows_vllms_config(ver, model_type, moe, hybrid, quantized, v2):
    assert model_runner_v2(ver, model_type, moe=moe, hybrid=hybrid, quantized=quantized) is v2
