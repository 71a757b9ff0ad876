"""vLLM's start-up overheads, PREDICTED: non-torch memory by era, the CUDA-graph estimate, and the device
total as vLLM reads it (with the name, capability and SM count it keys its defaults on)."""

from __future__ import annotations

from dataclasses import dataclass

from planner.engines.vllm.version import Version, parse_version
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
    "a10": (22.07, "NVIDIA A10", (8, 6),
            "total_gpu_memory (22.07GiB) in the OCI AI Quick Actions troubleshooting guide's A10 log "
            "(oracle-samples/oci-data-science-ai-samples; tests/planner/test_vllm.py 'OCI A10')"),
    "l4": (22.05, "NVIDIA L4", (8, 9),
           "'GPU 0 has a total capacity of 22.05 GiB' on vLLM's 4 x L4 CI runners (vllm-project/afd-plugin "
           "PR #250; pytorch/pytorch #175666); nvidia-smi shows 23034 MiB (akamaslabs/vllm-benchmark study "
           "10's DCGM view)"),
    "l40s": (44.52, "NVIDIA L40S", (8, 9),
             "total_gpu_memory 44.52 GiB in vllm issue #14011 on an NVIDIA L20, the same 48 GB Ada board "
             "(46068 MiB in nvidia-smi) as the L40S; not an L40S log"),
    "rtx3090": (23.58, "NVIDIA GeForce RTX 3090", (8, 6),
                "total_gpu_memory (23.58GiB) in vllm PR #14447 (24 GB cards, RTX 3090 class)"),
    "rtx4090": (23.57, "NVIDIA GeForce RTX 4090", (8, 9),
                "not read from a 4090 log: its 24564 MiB frame buffer (nvidia-smi in vllm #7553) less the "
                "430 MiB the driver keeps on a 24 GB GDDR6X card (3090: 24576 MiB, 23.58 GiB in PR #14447); "
                "4090 logs show 23.5-23.7 by driver"),
    "rtx5090": (31.37, "NVIDIA GeForce RTX 5090", (12, 0),
                "total_gpu_memory (31.37GiB) in vllm issue #14452 (RTX 5090)"),
    "t4": (14.56, "Tesla T4", (7, 5),
           "total_gpu_memory (14.56GiB) in Colab T4 logs (tests/planner/test_vllm.py)"),
    "v100-32gb": (31.74, "Tesla V100-SXM2-32GB", (7, 0),
                  "total_gpu_memory (31.74GiB) in a V100 blog log (tests/planner/test_vllm.py)"),
    "gb10": (119.7, "NVIDIA GB10", (12, 1),
             "GB10 (DGX Spark) unified memory: mem_get_info's total is the whole machine's MemTotal, about "
             "119.6-121.7 GiB by driver/kernel (shared/fixtures top_gb10: 122502.8 MiB total)"),
    "h200": (139.72, "NVIDIA H200", (9, 0),
             "'requested GPU memory: 69.86 GiB' at gpu_memory_utilization 0.5 in vllm PR #21429's DEBUG log "
             "(H200 141GB; 'Initial free memory: 139.12 GiB')"),
    "mi300x": (191.69, "AMD Instinct MI300X", (9, 4),
               "'Free memory on device (191.36/191.69 GiB)' in a vLLM 0.27 ROCm start-up on one MI300X "
               "virtual function (a DigitalOcean GPU droplet write-up); ROCm, not CUDA (gfx942)"),
}  # fmt: skip
# Under WSL2 the driver reports the card's whole frame buffer as mem_get_info's total (what nvidia-smi shows),
# not the native Linux total: 'Free memory on device cuda:0 (30.12/31.84 GiB)' on an RTX 5090 under WSL2
# (Alex8791-cyber/cognithor PR #318; 31.84 GiB = the 5090's 32607 MiB) against 31.37 natively (vllm #14452).
# The same rule for a 3090 gives its 24576 MiB frame buffer (shared/fixtures nvidia-smi_rtx3090: 24576MiB).
WSL_TOTALS: dict[str, tuple[float, str]] = {
    "rtx5090": (31.84, "'Free memory on device cuda:0 (30.12/31.84 GiB)' under WSL2 (cognithor PR #318)"),
    "rtx3090": (24.00, "the 3090's frame buffer, 24576 MiB (shared/fixtures nvidia-smi_rtx3090), by the "
                       "WSL2 rule the 5090 shows (31.84 GiB = its 32607 MiB)"),
    "rtx4090": (23.99, "the 4090's 24564 MiB frame buffer (nvidia-smi in vllm #7553) by the WSL2 rule the "
                       "5090 shows"),
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
#   buffers count there: sized on Hopper from one log (part 4 below, DISTRIBUTED_INIT_HOPPER_LOG).
NON_TORCH_SOURCE_GRAPHS = (
    "counted by memory_profiling(): growth of (cuda used - torch reserved) after the baseline taken after "
    "init_distributed_environment, with the CUDA-graph estimate's captures inside the window "
    "(v0.18.0:vllm/v1/worker/gpu_worker.py:384-399; v0.19.0:gpu_worker.py:259-282,366-381); size EMPIRICAL "
    "from llm-d-planner's vLLM 0.19.0 H100 80GB logs: 0.24-0.27 GiB on one GPU, 2.06-2.21 GiB per rank at "
    "TP=2/4, 0.07 GiB per stage at PP=2/4 (H100 only; other GPUs/interconnects not held)"
)
NON_TORCH_SOURCE_GROWTH = (
    "counted by memory_profiling(): growth of (cuda used - torch reserved) after the baseline taken at "
    "init_device, the CUDA context before it (v0.7.0:vllm/utils.py:1952-1954; "
    "v0.8.5:vllm/utils.py:2145-2147)"
)
NON_TORCH_SOURCE_GROWTH_ALLOCATED = (
    "counted by memory_profiling(): used - baseline - weights - torch ALLOCATED growth, so allocator "
    "fragmentation is non-torch (v0.6.5:vllm/utils.py:1736, v0.6.6.post1:vllm/utils.py:1819; baseline after "
    "set_device, v0.6.5:vllm/worker/worker.py:138-143); the fragmentation is not derivable and not added"
)
NON_TORCH_SOURCE_CONTEXT = (
    "counted: cuda used - torch allocated after the profile, no baseline, so the CUDA context, loaded kernel "
    "modules and fragmentation count (v0.6.4.post1:vllm/worker/worker.py:177-248; "
    "v0.7.1:vllm/v1/worker/gpu_worker.py:180-187; v0.8.5:vllm/v1/worker/gpu_worker.py:165-212)"
)
# CUDA graphs, deducted before the pool by V1 from 0.20 (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default
# "1", v0.20.0:vllm/envs.py:1724; v0.26.0:vllm/v1/worker/gpu_worker.py:508-544). The estimate
# (gpu_model_runner.py profile_cudagraph_memory, the same in v0.18.0:5593-5690 ... v0.29.0:6733-6899) captures
# the two largest graphs of each mode (PIECEWISE, then FULL) and counts first + (n - 1) x second, the modes'
# first captures overlaid (the max of them). What one graph costs is the CUDA driver's (graph nodes, the
# private pool's segments), not vLLM's: EMPIRICAL bytes per captured graph, the mean estimate per graph of the
# 0.19.0 H100 sweep (tests/data/vllm_logs/llmdplanner_*: each logs "Profiling CUDA graph memory: PIECEWISE=51
# (largest=512), FULL=51 (largest=512)" and "Estimated CUDA graph memory"), one GPU and under TP apart (a TP
# rank's graphs also register their buffers with the custom all-reduce). (graphs, logged GiB, where)
CUDAGRAPH_ONE_GPU_LOGS: tuple[tuple[int, float, str], ...] = (
    (102, 0.84, "Llama-3.1-8B"), (102, 0.84, "Qwen3-8B"), (102, 0.84, "gemma-2-9b-it"), (102, 0.81, "phi-4"),
    (102, 0.61, "Qwen2.5-7B-Instruct"),
)  # fmt: skip
CUDAGRAPH_TP_LOGS: tuple[tuple[int, float, str], ...] = (
    (102, 1.69, "Llama-3.1-8B TP=2"), (102, 1.63, "Qwen2.5-72B-Instruct TP=2"),
)  # fmt: skip


def _bytes_per_graph(logs: tuple[tuple[int, float, str], ...]) -> int:
    return round(sum(gib * GiB for _, gib, _ in logs) / sum(n for n, _, _ in logs))


CUDAGRAPH_BYTES_PER_GRAPH = _bytes_per_graph(CUDAGRAPH_ONE_GPU_LOGS)
CUDAGRAPH_BYTES_PER_GRAPH_TP = _bytes_per_graph(CUDAGRAPH_TP_LOGS)
CUDAGRAPH_SOURCE = (
    "EMPIRICAL bytes per captured graph: the mean of vLLM 0.19.0's logged estimates on one H100 "
    "(0.61-0.84 GiB for 102 graphs) and at TP=2 (1.63-1.69 GiB), llm-d-planner's sweep"
)


def cudagraph_capture_sizes(version: str, max_num_seqs: int) -> tuple[int, ...]:
    """vLLM's default cudagraph_capture_sizes: 1, 2, 4, then multiples of 8 up to 256, then of 16 up to 512,
    kept up to max_cudagraph_capture_size = min(2 * max_num_seqs, 512) (v0.11.0:vllm/config/compilation.py
    `_set_cudagraph_sizes`; v0.29.0:vllm/config/vllm.py:1940-2060 the same for non-Blackwell GPUs; 0.6 - 0.10:
    V0 _BATCH_SIZES_TO_CAPTURE [1, 2, 4] + range(8, 256+1, 8) up to max_num_seqs)."""
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
    platform: str = "cuda"  # "cuda" | "rocm"
    # whether NVML answers nvmlDeviceGetMemoryInfo on it (GB10: NVML_ERROR_NOT_SUPPORTED, shared/fixtures
    # nvml_gb10_ctypes_memoryinfo_nvitop-208.txt), which vLLM's scheduler defaults read
    nvml_memory_info: bool = True

    @property
    def scheduler_total_bytes(self) -> int:
        """What vLLM's get_device_total_memory() gives its scheduler defaults: NVML's total, 0 where NVML
        cannot answer (planner.engines.vllm.scheduler)."""
        return self.total_bytes if self.nvml_memory_info else 0

    @property
    def resident_threads(self) -> int | None:
        """The most threads the GPU keeps resident at once: SMs x the compute capability's limit per SM."""
        per_sm = RESIDENT_THREADS_PER_SM.get(self.capability) if self.platform == "cuda" else None
        return None if per_sm is None or self.sm_count is None else per_sm * self.sm_count


# "Maximum number of resident threads per SM" by compute capability (CUDA C++ Programming Guide, Technical
# Specifications per Compute Capability): 2048 on 7.0, 8.0, 9.0 and 10.0; 1024 on 7.5; 1536 on 8.6, 8.9,
# 12.0 and 12.1.
RESIDENT_THREADS_PER_SM: dict[tuple[int, int], int] = {
    (7, 0): 2048, (7, 5): 1024, (8, 0): 2048, (8, 6): 1536, (8, 9): 1536, (9, 0): 2048, (10, 0): 2048,
    (12, 0): 1536, (12, 1): 1536,
}  # fmt: skip


# Streaming multiprocessors per GPU (NVIDIA's published figures for these parts; what
# torch.cuda.get_device_properties().multi_processor_count returns): V1 0.17+'s Triton sampler sizes its
# kept buffer by it (num_compute_units, v0.19.0:vllm/v1/sample/ops/topk_topp_triton.py:1010).
DEVICE_SM_COUNTS: dict[str, int] = {
    "h100-80gb": 132, "h200": 132, "a100-80gb": 108, "a100-40gb": 108, "a10": 72, "l4": 58, "l40s": 142,
    "rtx3090": 82, "rtx4090": 128, "rtx5090": 170, "t4": 40, "v100-32gb": 80, "gb10": 48, "mi300x": 304,
}  # fmt: skip


def device_total(gpu: str) -> Device:
    """A GPU's total as vLLM reads it, with the name and capability vLLM keys its defaults on."""
    key = gpu.strip().lower().replace("nvidia ", "").replace(" ", "-")
    aliases = {"h100": "h100-80gb", "h100-80gb-hbm3": "h100-80gb", "h200-141gb": "h200", "a100": "a100-80gb",
               "a100-sxm4-80gb": "a100-80gb", "a100-sxm4-40gb": "a100-40gb", "geforce-rtx-3090": "rtx3090",
               "geforce-rtx-4090": "rtx4090", "geforce-rtx-5090": "rtx5090", "rtx-3090": "rtx3090",
               "rtx-4090": "rtx4090", "rtx-5090": "rtx5090", "tesla-t4": "t4", "spark": "gb10",
               "dgx-spark": "gb10", "tesla-v100-sxm2-32gb": "v100-32gb", "amd-instinct-mi300x": "mi300x",
               "instinct-mi300x": "mi300x"}  # fmt: skip
    wsl = key.endswith("-wsl") or key.endswith("-wsl2")
    key = key.removesuffix("-wsl2").removesuffix("-wsl")
    key = aliases.get(key, key)
    if key not in DEVICE_TOTALS:
        known = [*DEVICE_TOTALS, *(f"{k}-wsl" for k in WSL_TOTALS)]
        raise PlannerError(
            f"no recorded mem_get_info total for GPU {gpu!r}; known: {', '.join(known)}; "
            "or give the total as --total-gib"
        )
    gib_value, name, capability, source = DEVICE_TOTALS[key]
    if wsl:
        if key not in WSL_TOTALS:
            raise PlannerError(f"no recorded WSL2 total for GPU {key!r}; known: {', '.join(WSL_TOTALS)}")
        gib_value, source = WSL_TOTALS[key]
        key += "-wsl"
    base = key.removesuffix("-wsl")
    return Device(
        key,
        round(gib_value * GiB),
        name,
        capability,
        source,
        DEVICE_SM_COUNTS.get(base),
        platform="rocm" if base == "mi300x" else "cuda",
        nvml_memory_info=base != "gb10",
    )


def known_device(gpu: str | None) -> Device | None:
    """device_total's entry for a GPU name (as NVML or a log names it), or None where the table lacks it and
    the caller falls back to what it measured."""
    if not gpu:
        return None
    try:
        return device_total(gpu)
    except PlannerError:
        return None


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


# Non-torch memory as a sum of parts, where the logs allow it.
# 1. The local-memory reservation. A kernel that needs more per-thread local memory (stack) than the context
#    holds makes the driver grow the reservation to per-thread bytes x every thread the GPU can keep resident
#    (SMs x the per-SM limit), so what appears after vLLM's baseline as the first kernels of loading and of
#    the profile run load scales with the GPU's resident threads, not with the model. The bytes per thread are
#    EMPIRICAL: the least-squares slope through these one-GPU logs (growth eras, each cited where it is used
#    in tests/): a Colab T4 (40 SMs x 1024) logged 0.01 GiB, an A100 40GB (108 x 2048) 0.10 (vllm #12330),
#    an H100 (132 x 2048) 0.16 (vllm PR #12126). (resident threads, logged GiB, where)
LOCAL_MEMORY_LOGS: tuple[tuple[int, float, str], ...] = (
    (40 * 1024, 0.01, "Colab T4, Qwen2.5-1.5B, vLLM 0.7.2 (tests/planner/test_vllm.py 'Qwen2.5-1.5B T4')"),
    (108 * 2048, 0.10, "A100 40GB, vllm #12330"),
    (132 * 2048, 0.16, "H100 80GB, vllm PR #12126 (tests/data/vllm_logs/pr12126_*)"),
)


def _local_memory_bytes_per_thread() -> int:
    """The least-squares slope (through zero) of LOCAL_MEMORY_LOGS: bytes per resident thread."""
    xy = sum(threads * gib * GiB for threads, gib, _ in LOCAL_MEMORY_LOGS)
    xx = sum(threads * threads for threads, _, _ in LOCAL_MEMORY_LOGS)
    return round(xy / xx)


LOCAL_MEMORY_BYTES_PER_THREAD = _local_memory_bytes_per_thread()
# A GPU whose SM count or per-SM limit is not held (only --total-gib given, ROCm): the A100's logged 0.10 GiB.
LOCAL_MEMORY_UNKNOWN_GPU = round(0.10 * GiB)
# 2. The CUDA context itself, counted only by the eras without a baseline: EMPIRICAL, what an RTX 3090
#    (82 SMs x 1536) logged with the context inside, 0.35 GiB (vllm #10517, 0.6.4), less its local memory.
CONTEXT_LOG = (82 * 1536, 0.35, "RTX 3090, vllm #10517 (0.6.4)")
# 3. NCCL and the custom all-reduce under TP / PP (the communicators' buffers and the IPC-shared all-reduce
#    buffers): EMPIRICAL, what two distributed logs of the growth era logged beyond their GPUs' local memory:
#    TP=4 RTX 3090s 0.20 GiB per rank (vllm PR #14447), PP=2 RTX 5090s 0.33 (vllm #14452).
#    (threads, GiB, where)
COMM_LOGS: tuple[tuple[int, float, str], ...] = (
    (82 * 1536, 0.20, "TP=4 RTX 3090, vllm PR #14447"),
    (170 * 1536, 0.33, "PP=2 RTX 5090, vllm #14452"),
)


# 4. V1 0.9.1 - 0.10.x take the baseline before init_worker_distributed_environment (v0.10.0:vllm/v1/worker/
#    gpu_worker.py:163 MemorySnapshot, :181 the distributed init; v0.9.2:gpu_worker.py:140, :158; v0.10.2:
#    :175, :193; 0.11.0 swaps them, :169 init, :182 snapshot), so whatever the distributed init leaves on the
#    device counts as non-torch there: PyNccl's communicator (ncclCommInitRank and its warm-up all-reduce,
#    v0.10.0:vllm/distributed/device_communicators/pynccl.py), the custom all-reduce's IPC buffers, and the KV
#    connector (ensure_kv_transfer_initialized, gpu_worker.py:584). How much NCCL sets up is NCCL's (its
#    channels, protocols and, on NVSwitch Hopper nodes, NVLS buffers), not vLLM's: EMPIRICAL, one log of this
#    window on Hopper, vLLM's own reproduction of vllm #21348 in PR #21429 (Qwen3-235B-A22B-FP8, TP=4 H200,
#    non-torch 2.04 GiB per rank), less its GPU's local memory and part 3. The A100 logs of the same window
#    (dennislee22, 0.10.1.1, TP=2 in one node and TP=4 over Ray, tests/tui/test_explain.py) leave ~0.1 GiB
#    for it, so it is applied to Hopper (sm 9.x) only. (threads, logged GiB, where)
DISTRIBUTED_INIT_HOPPER_LOG = (132 * 2048, 2.04, "TP=4 H200, vllm PR #21429 (Qwen3-235B-A22B-FP8, 0.10 dev)")


def _distributed_init_hopper_bytes() -> int:
    threads, gib, _ = DISTRIBUTED_INIT_HOPPER_LOG
    return round(gib * GiB - threads * LOCAL_MEMORY_BYTES_PER_THREAD - COMM_BYTES)


def distributed_init_in_window(version: str, engine: str, tp: int, device: Device | None) -> bool:
    """Whether the distributed init's Hopper-sized NCCL memory (part 4) counts: V1 0.9.1 - 0.10.x, TP > 1,
    a CUDA GPU of compute capability 9.x."""
    ver = parse_version(version)
    return (
        engine == "V1"
        and (0, 9, 1) <= ver < (0, 11, 0)
        and tp > 1
        and device is not None
        and device.platform == "cuda"
        and device.capability[0] == 9
    )


# 5. From V1 0.11.0 the distributed init runs BEFORE the baseline snapshot (v0.11.0:vllm/v1/worker/
#    gpu_worker.py:169 init, :182 snapshot; v0.29.0:gpu_worker.py:416-439, "Initialize the distributed
#    environment BEFORE taking memory snapshot ... This ensures NCCL buffers are allocated before we measure
#    available memory"), and what is counted is the free memory lost after that snapshot (v0.29.0:vllm/utils/
#    mem_utils.py:317-318; the growth of (cuda used - torch reserved) after it before 0.27). PyNccl's
#    communicator, its warm-up all-reduce and the custom all-reduce's IPC buffers are all set up inside
#    init_worker_distributed_environment, so part 3 is outside the count there: not added.
COMM_BEFORE_BASELINE_FROM: Version = (0, 11, 0)


def comm_counted(version: str, engine: str, world_size: int) -> bool:
    """Whether NCCL's and the custom all-reduce's buffers (part 3) fall inside what vLLM counts as non-torch:
    several GPUs, and not V1 >= 0.11, whose baseline is taken after the distributed init (part 5)."""
    if world_size <= 1:
        return False
    return not (engine == "V1" and parse_version(version) >= COMM_BEFORE_BASELINE_FROM)


def local_memory_bytes(device: Device | None) -> tuple[int, str]:
    threads = device.resident_threads if device is not None else None
    if threads is None:
        return LOCAL_MEMORY_UNKNOWN_GPU, (
            "local memory 0.10 GiB (EMPIRICAL: the GPU's resident threads are not known here, so an A100's "
            "logged 0.10 GiB)"
        )
    size = threads * LOCAL_MEMORY_BYTES_PER_THREAD
    return size, (
        f"local memory {threads:,} resident threads x {LOCAL_MEMORY_BYTES_PER_THREAD} B = {size / GiB:.3f} "
        f"GiB "
        "(EMPIRICAL bytes per thread, the least-squares slope of T4 0.01, A100 0.10, H100 0.16 GiB)"
    )


def _comm_bytes() -> int:
    per_log = [gib * GiB - threads * LOCAL_MEMORY_BYTES_PER_THREAD for threads, gib, _ in COMM_LOGS]
    return round(sum(per_log) / len(per_log))


COMM_BYTES = _comm_bytes()
CONTEXT_BYTES = round(CONTEXT_LOG[1] * GiB - CONTEXT_LOG[0] * LOCAL_MEMORY_BYTES_PER_THREAD)
DISTRIBUTED_INIT_HOPPER_BYTES = _distributed_init_hopper_bytes()


def predicted_non_torch(
    version: str,
    engine: str,
    world_size: int,
    *,
    tp: int | None = None,
    enforce_eager: bool = False,
    device: Device | None = None,
) -> Term:
    """vLLM's non-torch memory for a version/engine, PREDICTED as a sum of parts (see above): the CUDA
    context (eras without a baseline), the local-memory reservation (by the GPU's resident threads), NCCL /
    custom all-reduce (TP or PP), and in 0.18 - 0.26 what the CUDA-graph estimate's captures leave inside the
    window. `tp` (default world_size) separates TP from pipeline stages where the era's sizes differ."""
    era = non_torch_era(version, engine, enforce_eager)
    tp = world_size if tp is None else tp
    if era == "graphs":
        # Only H100 logs of this era are held, so its totals are not split by GPU: the parts cannot be
        # separated from them (a PP=2 stage logged 0.07 GiB, less than an H100's local memory above).
        if tp > 1:
            size = NON_TORCH_GRAPHS_TP
        elif world_size > 1:
            size = NON_TORCH_GRAPHS_PP_ONLY
        else:
            size = NON_TORCH_GRAPHS_ONE_GPU
        return Term("non-torch", size, "PREDICTED", NON_TORCH_SOURCE_GRAPHS)
    local, local_why = local_memory_bytes(device)
    parts = [(local, local_why)]
    if comm_counted(version, engine, world_size):
        comm_why = (
            f"NCCL + custom all-reduce {COMM_BYTES / GiB:.3f} GiB (EMPIRICAL: TP=4 RTX 3090 0.20 GiB, "
            "PR #14447, and PP=2 RTX 5090 0.33, #14452, less their local memory)"
        )
        parts.append((COMM_BYTES, comm_why))
    elif world_size > 1:
        parts.append((0, (
            "no NCCL / custom all-reduce: V1 >= 0.11 sets them up before its baseline (v0.11.0:vllm/v1/"
            "worker/gpu_worker.py:169 init, :182 snapshot; v0.29.0:gpu_worker.py:416-439)"
        )))  # fmt: skip
    if distributed_init_in_window(version, engine, tp, device):
        init_why = (
            f"distributed init after the baseline, Hopper {DISTRIBUTED_INIT_HOPPER_BYTES / GiB:.3f} GiB "
            "(V1 0.9.1-0.10.x snapshot before init_worker_distributed_environment, v0.10.0:vllm/v1/worker/"
            "gpu_worker.py:163,181; EMPIRICAL: TP=4 H200 logged 2.04 GiB, vllm PR #21429, less local memory "
            "and NCCL above)"
        )
        parts.append((DISTRIBUTED_INIT_HOPPER_BYTES, init_why))
    if era == "context":
        context_why = (
            f"CUDA context {CONTEXT_BYTES / GiB:.3f} GiB (EMPIRICAL: an RTX 3090 logged 0.35 GiB with it "
            "inside, vllm #10517, less its local memory)"
        )
        parts.append((CONTEXT_BYTES, context_why))
        counted = NON_TORCH_SOURCE_CONTEXT
    elif era == "allocated":
        counted = NON_TORCH_SOURCE_GROWTH_ALLOCATED
    else:
        counted = NON_TORCH_SOURCE_GROWTH
    size = sum(b for b, _ in parts)
    return Term("non-torch", size, "PREDICTED", "; ".join((*(why for _, why in parts), counted)))


@dataclass(frozen=True, slots=True)
class GraphSetup:
    """What decides the CUDA-graph estimate, each with where it came from (a flag, the log, the default)."""

    mode: str = "default"  # CUDAGraphMode name (NONE, PIECEWISE, FULL, FULL_DECODE_ONLY, FULL_AND_PIECEWISE)
    capture_sizes: tuple[int, ...] | None = None  # the config line's cudagraph_capture_sizes
    graphs: tuple[int, int] | None = None  # (PIECEWISE, FULL) as "Profiling CUDA graph memory:" counts them
    estimate_env: bool | None = None  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, None: the version's default
    why: tuple[str, ...] = ()  # where each of the above was read


def graph_counts(
    setup: GraphSetup, version: str, max_num_seqs: int, max_num_batched_tokens: int
) -> tuple[int, int, str]:
    """(PIECEWISE graphs, FULL graphs, how they were counted): the log's own count where it printed one, else
    the capture sizes (the log's, else the version's default) split by mode as the dispatcher keys them
    (v0.29.0:vllm/v1/cudagraph_dispatcher.py:166-233: a PIECEWISE graph per capture size; with a separate
    decode routine a FULL graph per size up to max_num_seqs)."""
    if setup.graphs is not None:
        return *setup.graphs, "the counts the log printed ('Profiling CUDA graph memory')"
    if setup.capture_sizes is not None:
        sizes, where = setup.capture_sizes, "the log's cudagraph_capture_sizes"
    else:
        defaults = cudagraph_capture_sizes(version, max_num_seqs)
        sizes = tuple(s for s in defaults if s <= max_num_batched_tokens)
        where = "vLLM's default capture sizes for max_num_seqs"
    mode = setup.mode if setup.mode != "default" else "FULL_AND_PIECEWISE"
    decode = [s for s in sizes if s <= max_num_seqs]
    counts = {
        "PIECEWISE": (len(sizes), 0),
        "FULL": (0, len(sizes)),
        "FULL_DECODE_ONLY": (0, len(decode)),
        "FULL_AND_PIECEWISE": (len(sizes), len(decode)),
    }.get(mode, (0, 0))
    return *counts, f"{where} ({len(sizes)}), mode {mode}"


def predicted_cudagraphs(
    version: str,
    engine: str,
    max_num_seqs: int,
    *,
    enforce_eager: bool = False,
    estimate: bool | None = None,
    setup: GraphSetup | None = None,
    platform: str = "cuda",
    tp: int = 1,
    max_num_batched_tokens: int | None = None,
) -> Term:
    """The CUDA-graph estimate vLLM deducts before the pool (0 where it does not, and why). Read in the
    release sdists: the estimate runs only for V1 >= 0.18 and
    * 0.18 - 0.19: unless enforce_eager, and not on ROCm (v0.19.0:vllm/v1/worker/gpu_worker.py:380-381);
    * 0.20 - 0.21: not on ROCm, cudagraph_mode != NONE (v0.20.0:gpu_worker.py:380-385);
    * 0.22 - 0.25: on CUDA only (is_cuda), cudagraph_mode != NONE (v0.22.1:gpu_worker.py:405-411,
      v0.24.0:gpu_worker.py:449-451);
    * 0.26 on: CUDA or ROCm (is_cuda_alike), cudagraph_mode != NONE (v0.26.0:gpu_worker.py:502-506,
      v0.29.0:gpu_worker.py:565-570);
    and it is taken from the pool only with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, the default from 0.20
    (v0.19.0:vllm/envs.py:1654-1655 "0"; v0.20.0:envs.py:1724-1725 "1"). enforce_eager sets cudagraph_mode
    NONE (v0.29.0:vllm/config/vllm.py:1370-1376)."""
    setup = setup or GraphSetup()
    ver = parse_version(version)
    read = "; ".join(setup.why)
    if estimate is None:
        estimate = setup.estimate_env
    env_on = estimate if estimate is not None else ver >= (0, 20, 0)
    mode = "NONE" if enforce_eager else setup.mode
    reason = None
    if engine != "V1" or ver < (0, 18, 0):
        reason = f"vLLM {version} takes no CUDA-graph estimate before the pool (from V1 0.18)"
    elif mode == "NONE":
        reason = "cudagraph_mode NONE (enforce_eager, or the compilation config): no graphs to estimate"
    elif platform == "rocm" and ver < (0, 26, 0):
        reason = f"vLLM {version} estimates graphs on CUDA only (ROCm from 0.26)"
    elif platform not in ("cuda", "rocm"):
        reason = f"no CUDA-graph estimate on platform {platform}"
    elif not env_on:
        reason = (
            "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0"
            + (" (the default before 0.20)" if estimate is None else "")
            + ": the estimate is logged but not taken from the pool"
        )
    if reason is not None:
        return Term("CUDA graphs", 0, "PREDICTED", reason + (f" [{read}]" if read else ""))
    mnbt = max_num_batched_tokens or max(max_num_seqs, 8192)
    piecewise, full, counted = graph_counts(setup, version, max_num_seqs, mnbt)
    per_graph = CUDAGRAPH_BYTES_PER_GRAPH_TP if tp > 1 else CUDAGRAPH_BYTES_PER_GRAPH
    graphs = piecewise + full
    return Term(
        "CUDA graphs",
        graphs * per_graph,
        "PREDICTED",
        f"{piecewise} PIECEWISE + {full} FULL graphs ({counted}) x {per_graph / 2**20:.1f} MiB"
        f"{' (TP)' if tp > 1 else ''}; {CUDAGRAPH_SOURCE}" + (f" [{read}]" if read else ""),
    )
