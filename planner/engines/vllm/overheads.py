"""vLLM's start-up overheads, PREDICTED: non-torch memory by era, the CUDA-graph estimate, and the device
total as vLLM reads it (with the name, capability and SM count it keys its defaults on)."""

from __future__ import annotations

from dataclasses import dataclass

from planner.engines.vllm.version import parse_version
from planner.engines.worksheet import Term
from planner.errors import PlannerError
from planner.units import GiB

# ----------------------------------------------------------------------------------------------------
# The pool from the model config, the GPU and the engine arguments alone: what vLLM measures at startup,
# PREDICTED. Each term says where it comes from: "given" (a flag), "log" (read from a vLLM log) or PREDICTED.

# The device total as vLLM reads it (torch.cuda.mem_get_info()[1], a little under the marketing size), seen in
# real startup logs. Keys are lower-case device names as torch.cuda.get_device_name() prints them, shortened.
DEVICE_TOTALS: dict[str, tuple[float, str, tuple[int, int], str]] = {
    # key: (total GiB, torch.cuda.get_device_name(), compute capability, where the total was seen)
    "h100-80gb": (79.22, "NVIDIA H100 80GB HBM3", (9, 0),
                  "total_gpu_memory (79.22GiB) in vllm PR #10511 and PR #12126 (H100 80GB)"),
    "a100-80gb": (79.15, "NVIDIA A100-SXM4-80GB", (8, 0),
                  "'Free memory on device (59.32/79.15 GiB)' in ovg-project/kvcached issue #29 (A100 80GB)"),
    "a100-40gb": (39.50, "NVIDIA A100-SXM4-40GB", (8, 0),
                  "total_gpu_memory (39.50GiB) in vllm issue #12330 (A100 40GB)"),
    "rtx3090": (23.58, "NVIDIA GeForce RTX 3090", (8, 6),
                "total_gpu_memory (23.58GiB) in vllm PR #14447 (24 GB cards, RTX 3090 class)"),
    "rtx5090": (31.37, "NVIDIA GeForce RTX 5090", (12, 0),
                "total_gpu_memory (31.37GiB) in vllm issue #14452 (RTX 5090)"),
    "t4": (14.56, "Tesla T4", (7, 5),
           "total_gpu_memory (14.56GiB) in Colab T4 logs (tests/planner/test_vllm.py)"),
    "v100-32gb": (31.74, "Tesla V100-SXM2-32GB", (7, 0),
                  "total_gpu_memory (31.74GiB) in a V100 blog log (tests/planner/test_vllm.py)"),
    "gb10": (119.7, "NVIDIA GB10", (12, 1),
             "GB10 (DGX Spark) unified memory: mem_get_info's total is the whole machine's MemTotal, about "
             "119.6-121.7 GiB by driver/kernel (shared/fixtures top_gb10: 122502.8 MiB total)"),
}  # fmt: skip

# Non-torch memory as vLLM counts it, by era. WHAT is counted is read from the release sdists (file:line
# below); HOW MUCH it is cannot be derived from vLLM's source: it is the CUDA driver's context (its size grows
# with the SM count and with every kernel module the process loads), NCCL's and the custom all-reduce's
# buffers, and the caching allocator's fragmentation. Those sizes are EMPIRICAL constants, each taken from
# the logged values named in its source string.
# - V0 <= 0.6.4: (total - free) - torch allocated after the profile, with no baseline: the CUDA context,
#   cuBLAS's handle and NCCL count (v0.6.4.post1:vllm/worker/worker.py:177-248; init_gpu_memory only checks).
# - V0 0.6.5 - 0.6.6: memory_profiling(): used after - baseline - weights - torch ALLOCATED growth, where the
#   baseline is total - free right after torch.cuda.set_device() (v0.6.5:vllm/worker/worker.py:138-143,
#   v0.6.5:vllm/utils.py:1736, v0.6.6.post1:vllm/utils.py:1819): the context is before the baseline, but
#   what torch reserves and does not use after empty_cache() (fragmentation) counts as non-torch.
# - V0 0.7.0 - 0.10 and V1 0.9.1 - 0.26: the growth of (cuda used - torch RESERVED) after the baseline
#   (v0.7.0:vllm/utils.py:1952-1954 MemorySnapshot, PR #11809; v0.8.5:vllm/utils.py:2145-2147): module
#   loads after the baseline and NCCL / custom all-reduce buffers (TP/PP), no fragmentation.
# - V1 0.7.0 - 0.9.0: max(0, cuda used - torch allocated) after the profile, no baseline: the context, the
#   fragmentation and other processes on the device (v0.7.1:vllm/v1/worker/gpu_worker.py:180-187,
#   v0.8.5:vllm/v1/worker/gpu_worker.py:165-212).
# - V1 >= 0.27: free before the instance - free after the profile (v0.33.0:vllm/utils/mem_utils.py:230-321);
#   the weights are in it, the non-torch part is again the growth after the baseline.
# The growth constants: logged one-GPU values 0.04 (8 GiB card, vllm #12095), 0.10 (A100 40GB, vllm #12330),
# 0.16 (H100, vllm PR #12126) GiB; several GPUs 0.20 (TP=4 RTX 3090, vllm PR #14447) and 0.33 (PP=2 RTX 5090,
# vllm #14452, which is also a test log) GiB. The context constant: 0.35 GiB, logged with the context inside
# on an RTX 3090 (vllm #10517, 0.6.4); an A6000 logged 0.44 (vllm #10360, 0.6.4.post1, also a test log). No
# H100 value with the context inside is held; a GPU with more SMs has a larger context.
# - V1 0.18 - 0.26: the same growth, but profile_cudagraph_memory() (capturing and freeing graphs) now runs
#   inside the memory_profiling() window, after which the growth is measured (v0.18.0:vllm/v1/worker/
#   gpu_worker.py:384-399, v0.19.0:gpu_worker.py:366-381, v0.26.0:gpu_worker.py:484-506; not in 0.17.0),
#   unless enforce_eager. The sizes of this era are EMPIRICAL from llm-d-planner's vLLM 0.19.0 H100 80GB
#   sweep (the logs under tests/data/vllm_logs/llmdplanner_* and the rest of that sweep): one GPU 0.24 -
#   0.27 GiB (25 dense logs; granite 3.x logged 0.46), TP > 1 2.06 - 2.21 GiB per rank (TP=2 and TP=4;
#   likely the NCCL communicator's memory set up on first use, after the baseline, which vLLM takes after
#   init_distributed_environment, v0.19.0:gpu_worker.py:259-282), pipeline stages without TP 0.07 GiB
#   (PP=2, PP=4). Only H100s were logged: other GPUs, interconnects and NCCL versions may differ.
NON_TORCH_GROWTH_ONE_GPU = round(0.10 * GiB)
NON_TORCH_GROWTH_DISTRIBUTED = round(0.25 * GiB)
NON_TORCH_GRAPHS_ONE_GPU = round(0.25 * GiB)
NON_TORCH_GRAPHS_TP = round(2.1 * GiB)
NON_TORCH_GRAPHS_PP_ONLY = round(0.07 * GiB)
# - Under TP the sizes stay per era. Tested and refuted (vllm #21348 held out): that the 0.19 sweep's 1.85 GiB
#   TP-minus-one-GPU difference is the NCCL communicator the logits gather creates on first use (torch.
#   distributed's device group, v0.10.0:vllm/model_executor/layers/logits_processor.py:89-101,
#   vllm/distributed/device_communicators/base_device_communicator.py:129, distributed/parallel_state.py:224),
#   which every era with a baseline would count: a 0.12.0 H100 80GB HBM3 TP=2 log (tests/data/vllm_logs/
#   videocutting_*) leaves at most 0.64 GiB per rank for non-torch, so that difference belongs to 0.18+'s
#   graph captures inside the window. In 0.9.1 - 0.10.x the baseline is taken before
#   init_worker_distributed_environment (v0.10.0:vllm/v1/worker/gpu_worker.py:163 snapshot, :181 init;
#   v0.11.0:gpu_worker.py:169 init, :182 snapshot), so PyNccl's communicator and the custom all-reduce
#   buffers count there: their size is not held.
NON_TORCH_SOURCE_GRAPHS = (
    "counted by memory_profiling(): growth of (cuda used - torch reserved) after the baseline taken after "
    "init_distributed_environment, with the CUDA-graph estimate's captures inside the window "
    "(v0.18.0:vllm/v1/worker/gpu_worker.py:384-399; v0.19.0:gpu_worker.py:259-282,366-381); size EMPIRICAL "
    "from llm-d-planner's vLLM 0.19.0 H100 80GB logs: 0.24-0.27 GiB on one GPU, 2.06-2.21 GiB per rank at "
    "TP=2/4, 0.07 GiB per stage at PP=2/4 (H100 only; other GPUs/interconnects not held)"
)
NON_TORCH_WITH_CONTEXT = round(0.35 * GiB)  # vllm issue #10517 (0.6.4, RTX 3090): non_torch_memory=0.35GiB
NON_TORCH_SOURCE_GROWTH = (
    "counted by memory_profiling(): growth of (cuda used - torch reserved) after the baseline taken at "
    "init_device, the CUDA context before it (v0.7.0:vllm/utils.py:1952-1954; "
    "v0.8.5:vllm/utils.py:2145-2147); size EMPIRICAL (not derivable from the source): logged 0.04-0.16 GiB "
    "on one GPU (vllm #12095, #12330, PR #12126), 0.20-0.33 GiB under TP/PP (vllm PR #14447, #14452)"
)
NON_TORCH_SOURCE_GROWTH_ALLOCATED = (
    "counted by memory_profiling(): used - baseline - weights - torch ALLOCATED growth, so allocator "
    "fragmentation is non-torch (v0.6.5:vllm/utils.py:1736, v0.6.6.post1:vllm/utils.py:1819; baseline after "
    "set_device, v0.6.5:vllm/worker/worker.py:138-143); size EMPIRICAL: the growth constant (the "
    "fragmentation is not derivable)"
)
NON_TORCH_SOURCE_CONTEXT = (
    "counted: cuda used - torch allocated after the profile, no baseline, so the CUDA context, loaded kernel "
    "modules and fragmentation count (v0.6.4.post1:vllm/worker/worker.py:177-248; "
    "v0.7.1:vllm/v1/worker/gpu_worker.py:180-187; v0.8.5:vllm/v1/worker/gpu_worker.py:165-212); size "
    "EMPIRICAL (a driver figure): 0.35 GiB logged on an RTX 3090 (vllm #10517; an A6000 logged 0.44, vllm "
    "#10360); larger on GPUs with more SMs"
)
# CUDA graphs, deducted before the pool by V1 from 0.20 (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default
# "1", v0.20.0:vllm/envs.py:1724; v0.26.0:vllm/v1/worker/gpu_worker.py:508-544). The estimate captures two
# graphs per mode and extrapolates the second one's cost to every capture size (vllm issue #45178). What one
# graph costs is the CUDA driver's (graph nodes, the private pool's segments), not derivable from vLLM's
# source: EMPIRICAL 24 MiB per graph, from the logged estimates 0.17 GiB for 7 PIECEWISE graphs (club-3090
# #127) and 0.36 GiB for 16 (gpustack/runner #251), and vllm issue #50780's measured FULL graph.
CUDAGRAPH_BYTES_PER_GRAPH = 24 * 2**20
CUDAGRAPH_SOURCE = (
    "deducted from 0.20 by default (v0.20.0:vllm/envs.py:1724, "
    "v0.26.0:vllm/v1/worker/gpu_worker.py:508-544); size EMPIRICAL: 24 MiB per captured graph (logged "
    "0.17 GiB / 7 graphs, club-3090 #127; 0.36 GiB / 16, gpustack/runner #251; vllm #50780)"
)


def cudagraph_capture_sizes(version: str, max_num_seqs: int) -> tuple[int, ...]:
    """vLLM's default cudagraph_capture_sizes: 1, 2, 4, then multiples of 8 up to 256, then of 16 up to 512,
    kept up to max_cudagraph_capture_size = min(2 * max_num_seqs, 512) (v0.11.0:vllm/config/compilation.py
    `_set_cudagraph_sizes`; 0.6 - 0.10: V0 _BATCH_SIZES_TO_CAPTURE [1, 2, 4] + range(8, 256+1, 8) up to
    max_num_seqs)."""
    ver = parse_version(version)
    sizes = [1, 2, 4, *range(8, 257, 8)]
    if ver >= (0, 11, 0):
        sizes += list(range(272, 513, 16))
        limit = min(2 * max_num_seqs, 512)
    else:
        limit = max_num_seqs
    kept = [s for s in sizes if s <= limit]
    return tuple(kept) or (1,)


@dataclass(frozen=True, slots=True)
class Device:
    key: str
    total_bytes: int  # as torch.cuda.mem_get_info() reports it
    name: str  # torch.cuda.get_device_name()
    capability: tuple[int, int]
    source: str
    sm_count: int | None = None  # torch.cuda.get_device_properties().multi_processor_count


# Streaming multiprocessors per GPU (NVIDIA's published figures for these parts; what
# torch.cuda.get_device_properties().multi_processor_count returns): V1 0.17+'s Triton sampler sizes its
# kept buffer by it (num_compute_units, v0.19.0:vllm/v1/sample/ops/topk_topp_triton.py:1010).
DEVICE_SM_COUNTS: dict[str, int] = {
    "h100-80gb": 132, "a100-80gb": 108, "a100-40gb": 108, "rtx3090": 82, "rtx5090": 170, "t4": 40,
    "v100-32gb": 80, "gb10": 48,
}  # fmt: skip


def device_total(gpu: str) -> Device:
    """A GPU's total as vLLM reads it, with the name and capability vLLM keys its defaults on."""
    key = gpu.strip().lower().replace("nvidia ", "").replace(" ", "-")
    aliases = {"h100": "h100-80gb", "h100-80gb-hbm3": "h100-80gb", "a100": "a100-80gb",
               "a100-sxm4-80gb": "a100-80gb", "a100-sxm4-40gb": "a100-40gb", "geforce-rtx-3090": "rtx3090",
               "geforce-rtx-5090": "rtx5090", "tesla-t4": "t4", "spark": "gb10", "dgx-spark": "gb10",
               "tesla-v100-sxm2-32gb": "v100-32gb"}  # fmt: skip
    key = aliases.get(key, key)
    if key not in DEVICE_TOTALS:
        raise PlannerError(
            f"no recorded mem_get_info total for GPU {gpu!r}; known: {', '.join(DEVICE_TOTALS)}; "
            "or give the total as --total-gib"
        )
    gib_value, name, capability, source = DEVICE_TOTALS[key]
    return Device(key, round(gib_value * GiB), name, capability, source, DEVICE_SM_COUNTS.get(key))


def non_torch_era(version: str, engine: str, enforce_eager: bool = False) -> str:
    """How a vLLM version counts non-torch memory (the era table above): "context" (the CUDA context
    included, no baseline), "allocated" (growth after the baseline plus fragmentation), "graphs" (growth with
    the graph estimate's captures inside the window) or "growth" (only what grew after the baseline)."""
    ver = parse_version(version)
    if (engine == "V0" and ver <= (0, 6, 4)) or (engine == "V1" and ver < (0, 9, 1)):
        return "context"
    if engine == "V1" and (0, 18, 0) <= ver < (0, 27, 0) and not enforce_eager:
        return "graphs"
    if engine == "V0" and ver < (0, 7, 0):
        return "allocated"
    return "growth"


def predicted_non_torch(
    version: str, engine: str, world_size: int, *, tp: int | None = None, enforce_eager: bool = False
) -> Term:
    """vLLM's non-torch memory for a version/engine, PREDICTED (see the era table above). `tp` (the tensor
    parallel size, default world_size) separates TP from pipeline stages where the era's sizes differ."""
    era = non_torch_era(version, engine, enforce_eager)
    if era == "context":
        return Term("non-torch", NON_TORCH_WITH_CONTEXT, "PREDICTED", NON_TORCH_SOURCE_CONTEXT)
    tp = world_size if tp is None else tp
    if era == "graphs":
        if tp > 1:
            size = NON_TORCH_GRAPHS_TP
        elif world_size > 1:
            size = NON_TORCH_GRAPHS_PP_ONLY
        else:
            size = NON_TORCH_GRAPHS_ONE_GPU
        return Term("non-torch", size, "PREDICTED", NON_TORCH_SOURCE_GRAPHS)
    size = NON_TORCH_GROWTH_ONE_GPU if world_size == 1 else NON_TORCH_GROWTH_DISTRIBUTED
    source = NON_TORCH_SOURCE_GROWTH_ALLOCATED if era == "allocated" else NON_TORCH_SOURCE_GROWTH
    return Term("non-torch", size, "PREDICTED", source)


def predicted_cudagraphs(
    version: str, engine: str, max_num_seqs: int, *, enforce_eager: bool = False, estimate: bool | None = None
) -> Term:
    """The CUDA-graph estimate vLLM deducts before the pool (0 where it does not)."""
    ver = parse_version(version)
    if estimate is None:
        estimate = engine == "V1" and ver >= (0, 20, 0)
    if enforce_eager or not (engine == "V1" and ver >= (0, 18, 0) and estimate):
        why = (
            "enforce_eager: no graphs"
            if enforce_eager
            else f"vLLM {version} does not deduct graphs before the pool"
        )
        return Term("CUDA graphs", 0, "PREDICTED", why)
    graphs = len(cudagraph_capture_sizes(version, max_num_seqs))
    return Term(
        "CUDA graphs",
        graphs * CUDAGRAPH_BYTES_PER_GRAPH,
        "PREDICTED",
        f"{graphs} capture sizes; {CUDAGRAPH_SOURCE}",
    )
