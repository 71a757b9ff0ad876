"""vLLM's scheduler limits (max_num_batched_tokens, max_num_seqs) as each version defaults them: they set the
size of the profile run and so the activation peak subtracted before the pool."""

from __future__ import annotations

from planner.engines.vllm.version import parse_version
from planner.errors import PlannerError
from planner.spec import ModelSpec
from planner.units import GiB

USAGE_CONTEXTS = ("openai", "llm")  # `vllm serve` (UsageContext.OPENAI_API_SERVER) | offline LLM(...) class


def default_scheduler_limits(
    version: str,
    engine: str,
    *,
    max_model_len: int,
    usage_context: str = "openai",
    total_bytes: int | None = None,
    device_name: str | None = None,
    cuda_capability: tuple[int, int] | None = None,
    spec: ModelSpec | None = None,
) -> tuple[int, int, tuple[str, ...]]:
    """(max_num_batched_tokens, max_num_seqs, why) as vLLM `version` defaults them; why ends with one note
    for max_num_batched_tokens and one for max_num_seqs."""
    ver = parse_version(version)
    if usage_context not in USAGE_CONTEXTS:
        raise PlannerError(f"usage context must be one of {', '.join(USAGE_CONTEXTS)}, got {usage_context!r}")
    if engine == "V0":
        return _v0_limits(ver, max_model_len, spec)
    if ver < (0, 8, 5):
        return _v1_limits_by_device_name(ver, usage_context, device_name)
    return _v1_limits_by_device_memory(ver, usage_context, total_bytes, device_name, cuda_capability)


def _v0_limits(ver, max_model_len: int, spec: ModelSpec | None) -> tuple[int, int, tuple[str, ...]]:
    # v0.6.6:vllm/engine/arg_utils.py create_engine_config / v0.8.5.post1 _set_default_args_v0: chunked
    # prefill is switched on for max_model_len > 32768 on CUDA unless the model has a sliding window (or
    # LoRA / spec decode, not modelled); from 0.8.5 also off for MLA models. max_num_seqs defaults to 256.
    sliding = spec is not None and any(
        layer.attention is not None and layer.attention.kind == "sliding" for layer in spec.layers
    )
    mla = spec is not None and spec.shapes is not None and spec.shapes.mla is not None
    chunked = max_model_len > 32768 and not sliding and not (mla and ver >= (0, 8, 5))
    # v0.6.6:vllm/config.py SchedulerConfig.__post_init__: 2048 with chunked prefill, else max(mml, 2048).
    tokens = 2048 if chunked else max(max_model_len, 2048)
    why = (
        f"max_num_batched_tokens {tokens} (V0 default: "
        + ("chunked prefill, on for max_model_len > 32768" if chunked else "max(max_model_len, 2048)")
        + "; v0.6.6:config.py SchedulerConfig)",
        "max_num_seqs 256 (V0 default; v0.6.6:engine/arg_utils.py)",
    )
    return tokens, 256, why


def _v1_limits_by_device_name(
    ver, usage_context: str, device_name: str | None
) -> tuple[int, int, tuple[str, ...]]:
    # V1 0.7.0 - 0.8.4: EngineArgs._override_v1_engine_args keys max_num_batched_tokens on the device NAME
    # ("h100" or "h200" in current_platform.get_device_name().lower(): 16384 LLM / 8192 `vllm serve`,
    # else 8192 / 2048) and max_num_seqs is 1024 whatever the device (v0.7.1:vllm/engine/arg_utils.py:214
    # and 1280-1312; v0.7.3:arg_utils.py:224,1368-1378; v0.8.0:arg_utils.py:1693-1717).
    why: list[str] = []
    name = (device_name or "").lower()
    big = "h100" in name or "h200" in name
    tokens = ({"llm": 16384, "openai": 8192} if big else {"llm": 8192, "openai": 2048})[usage_context]
    if device_name is None:
        why.append("device name not given: not an H100/H200 assumed (V1 < 0.8.5 keys its defaults on it)")
    where = (
        f"V1 {'.'.join(map(str, ver))} default for "
        f"{'`vllm serve`' if usage_context == 'openai' else 'the LLM class'} on "
        f"{'an H100/H200' if big else 'a GPU not named H100/H200'}; v0.7.1:engine/arg_utils.py:1280-1312"
    )
    why.append(f"max_num_batched_tokens {tokens} ({where})")
    why.append("max_num_seqs 1024 (V1 < 0.8.5 default for every device; v0.7.1:engine/arg_utils.py:214)")
    return tokens, 1024, tuple(why)


def _v1_limits_by_device_memory(
    ver,
    usage_context: str,
    total_bytes: int | None,
    device_name: str | None,
    cuda_capability: tuple[int, int] | None,
) -> tuple[int, int, tuple[str, ...]]:
    # V1: EngineArgs._set_default_args (v0.8.5.post1:engine/arg_utils.py:1591-1621, v0.11.0:1585-1680,
    # v0.33.0:get_batch_defaults): by usage context and the device's total memory.
    # The total is NVML's (current_platform.get_device_total_memory(): nvmlDeviceGetMemoryInfo().total,
    # v0.13.0:vllm/platforms/cuda.py:523-526, v0.29.0:cuda.py:784-787); where NVML raises, vLLM takes 0 and
    # the small defaults (v0.13.0:vllm/engine/arg_utils.py:1786-1791 `except Exception: device_memory = 0`,
    # the same in 0.10.0 - 0.29.0): a GB10's NVML answers NVML_ERROR_NOT_SUPPORTED (shared/fixtures
    # nvml_gb10_ctypes_memoryinfo_nvitop-208.txt), so a DGX Spark runs the small defaults in every version.
    why: list[str] = []
    tier = "small"
    if total_bytes is None:
        why.append("device total not given: vLLM's small-GPU defaults assumed")
    elif total_bytes == 0:
        why.append(
            "NVML reports no memory total on this device (GB10: NVML_ERROR_NOT_SUPPORTED), so vLLM takes 0 "
            "and "
            "the small defaults (v0.13.0:engine/arg_utils.py:1786-1791)"
        )
    elif ver >= (0, 28, 0) and total_bytes >= 160 * GiB:
        tier = "huge"  # v0.28.0:engine/arg_utils.py:2582-2591, B200/B300 class
    elif total_bytes >= 70 * GiB:
        tier = "large"
        name = (device_name or "").lower()
        if ver >= (0, 9, 0) and "a100" in name:  # PR #17885: v0.9.0:arg_utils.py:1495 (absent in v0.8.5)
            tier = "small"
        if ver > (0, 29, 0) and cuda_capability == (12, 1):  # v0.33.0: GB10 (DGX Spark) stays small
            tier = "small"
        if ver >= (0, 9, 0) and device_name is None:
            why.append("device name not given: not an A100 assumed (an A100-80GB gets the small defaults)")
    table = {
        "huge": ({"llm": 16384, "openai": 16384}, 1024),
        "large": ({"llm": 16384, "openai": 8192}, 1024),
        "small": ({"llm": 8192, "openai": 2048}, 256),
    }
    by_context, seqs = table[tier]
    tokens = by_context[usage_context]
    if ver >= (0, 11, 0):
        seqs = min(seqs, tokens)  # v0.11.0:arg_utils.py:1678 min(default, max_num_batched_tokens)
    where = (
        f"V1 default for {'`vllm serve`' if usage_context == 'openai' else 'the LLM class'} on a "
        f"{'>= 160 GiB' if tier == 'huge' else '>= 70 GiB' if tier == 'large' else 'smaller'} GPU"
    )
    why.append(f"max_num_batched_tokens {tokens} ({where})")
    why.append(f"max_num_seqs {seqs} ({where})")
    return tokens, seqs, tuple(why)
