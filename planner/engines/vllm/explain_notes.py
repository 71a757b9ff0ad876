"""The notes under explain()'s rows: what the run has that the prediction does not model (each a known
cause of a miss), and the pool the logged token count implies where the log gives no pool."""

from __future__ import annotations

from planner.engines.vllm.explain_settings import _Run
from planner.engines.vllm.log import VLLMLog
from planner.engines.vllm.pool import VLLMPool, blocks_for_logged_tokens
from planner.engines.vllm.runner_v2 import runs_model_runner_v2
from planner.engines.vllm.version import parse_version
from planner.units import GiB

_MODEL_RUNNER_V2 = (
    "vLLM {version} runs {model_type} on model runner V2 by default (planner/engines/vllm/version.py "
    "model_runner_v2, from vLLM's config/vllm.py). Derived from its source (planner/engines/vllm/"
    "runner_v2.py, read in 0.29.0): its persistent buffers (the penalties' output_bin_counts, {seqs} x "
    "{vocab:,} int32 = {counts:.2f} GiB, and the sampler's tables) and, from 0.27, the kept fused-MoE "
    "workspace (MXFP4 experts on Marlin; other expert kernels' workspaces are not derived), in non-torch "
    "(consumed memory after the baseline); its greedy dummy sampler run in the activation. Not derived: its "
    "CUDA-graph estimate, deducted from the pool (v0.29.0:vllm/v1/worker/gpu_worker.py:570-609), which it "
    "measures on the device: every PIECEWISE graph captured, the FULL graphs extrapolated from the two "
    "largest as first + (n - 1) x max(second, 1 MiB) (v0.29.0:vllm/v1/worker/gpu/cudagraph_utils.py:712-714, "
    "718-801, 823-831), so whatever the second FULL capture happens to allocate (a new segment of the graph "
    "pool, the driver's graph memory) counts once per FULL graph; the bytes per graph are the driver's and "
    "the caching allocator's, EMPIRICAL here (H100 logs of the V1 runner, 0.19)"
)


def _pool_the_tokens_imply(log: VLLMLog, pool: VLLMPool) -> str | None:
    """Where the log gives its token count but neither the pool nor the block count: the pool those tokens
    imply by the version's own capacity rule (pool.blocks_for_logged_tokens), against the prediction, so a
    miss on tokens reads as the memory it is."""
    tokens = log.smallest("kv_tokens")
    if tokens is None or log.smallest("kv_pool") is not None or log.smallest("num_blocks") is not None:
        return None
    blocks = blocks_for_logged_tokens(pool, int(tokens.value))
    if blocks is None:
        return None
    lowest, highest = blocks
    implied = lowest * pool.bytes_per_block
    off = implied - pool.pool_bytes
    count = f"{lowest:,}" if lowest == highest else f"{lowest:,}-{highest:,}"
    side = "less" if off < 0 else "more"
    who = "vLLM deducted more" if off < 0 else "the predicted terms deduct more"
    return (
        f"the logged {int(tokens.value):,} tokens imply {count} KV blocks x {pool.bytes_per_block:,} B = a "
        f"pool of {implied / GiB:.2f} GiB ({pool.num_groups} group(s), {pool.blocks_per_request:,} blocks "
        f"per request of {pool.max_model_len:,} tokens), {abs(off) / GiB:.2f} GiB {side} than predicted: the "
        f"token count follows the pool, so the difference is in the memory deducted before it ({who})"
    )


def _device_not_modelled(run: _Run, log: VLLMLog, pool: VLLMPool) -> list[str]:
    """The device's part of _not_modelled: no NVML memory total, unified memory."""
    notes: list[str] = []
    device = run.device
    if device is not None and not device.nvml_memory_info and run.engine == "V1":
        notes.append(
            f"{device.name}: NVML reports no memory total on this device, so vLLM's scheduler defaults take "
            f"0 and the small tier (max_num_batched_tokens {pool.max_num_batched_tokens}, max_num_seqs "
            f"{pool.max_num_seqs}; v0.13.0:vllm/engine/arg_utils.py:1786-1791)"
        )
    if device is not None and device.key == "gb10":
        compiled = log.facts.get("compile_seconds")
        notes.append(
            "unified memory (GB10): vLLM's free memory there is the host's MemAvailable "
            "(v0.13.0:vllm/utils/mem_utils.py:85-111; cudaMemGetInfo before 0.11.1), a machine-wide figure, "
            "so host memory taken anywhere on the machine between the baseline and the end of the profile "
            "run counts as non-torch growth"
            + (
                f" (torch.compile and its workers ran inside it: {compiled[0]} s, line {compiled[1]})"
                if compiled
                else ""
            )
            + "; not modelled"
        )
    return notes


def _not_modelled(run: _Run, log: VLLMLog, pool: VLLMPool) -> list[str]:
    """What the run has that the prediction does not model, in words (each a known cause of a miss)."""
    ver = parse_version(run.version)
    notes = _device_not_modelled(run, log, pool)
    if run.engine == "V1" and runs_model_runner_v2(run.spec, ver):
        notes.append(_MODEL_RUNNER_V2.format(
            version=run.version, model_type=run.spec.model_type,
            counts=pool.max_num_seqs * run.spec.vocab_size * 4 / GiB, seqs=pool.max_num_seqs,
            vocab=run.spec.vocab_size,
        ))  # fmt: skip
    if "dev" in run.version or "rc" in run.version:
        notes.append(f"{run.version} is a development build: what it counts may differ from the release's")
    elif log.fact("profile_table"):
        notes.append(
            f"a development build wrote this log: its \"Memory profiling results:\" table (line "
            f"{log.facts['profile_table'][1]}) is no release's wording (a 0.6.5 development build's, vllm PR "
            "#10511), so what it counts may differ from the release's"
        )
    if log.setting("kv_transfer_config") or log.setting("kv_connector"):
        notes.append("a KV connector is configured (kv_transfer_config): its device buffers are not modelled")
    if run.weight_format == "nvfp4" or (run.spec.default_format or "") == "nvfp4":
        notes.append(
            "an NVFP4 checkpoint: which layers its recipe keeps in bf16 / fp8 is in the checkpoint, not the "
            "config; the config's shapes are priced as NVFP4"
        )
    if run.engine == "V1" and ver < (0, 9, 1) and (run.device is None or run.device.key != "rtx3090"):
        notes.append(
            "V1 before 0.9.1 counts the CUDA context, whose size is EMPIRICAL (from an RTX 3090) and differs "
            "by GPU and driver"
        )
    if log.fact("wsl"):
        notes.append(
            f"WSL2 (line {log.facts['wsl'][1]}): the device total is the card's frame buffer there, and "
            "vLLM's memory reads go through the Windows driver"
        )
    requested = pool.requested_bytes or 0
    if requested and 0 < pool.pool_bytes < 0.1 * requested:
        notes.append(
            f"the pool is {pool.pool_bytes / requested:.0%} of the budget: a small absolute difference in "
            f"any "
            "term is a large relative one"
        )
    return notes
