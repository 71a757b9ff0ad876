"""Which vLLM: the versions the formulas were read from, the default one, and version arithmetic."""

from __future__ import annotations

from planner.errors import PlannerError

# The versions whose sdists the reference file was read from (section "Sources").
READ_VERSIONS: tuple[str, ...] = (
    "0.6.4", "0.6.6", "0.7.0", "0.7.1", "0.7.3", "0.8.0", "0.8.5", "0.9.0", "0.9.1", "0.9.2",
    "0.10.0", "0.10.1", "0.10.2", "0.11.0", "0.12.0", "0.13.0", "0.14.0", "0.16.0", "0.17.0", "0.18.0",
    "0.19.0", "0.20.0", "0.21.0", "0.22.0", "0.23.0", "0.24.0", "0.25.0", "0.26.0", "0.27.0", "0.28.0",
    "0.29.0", "0.33.0",
)  # fmt: skip
DEFAULT_VLLM_VERSION = "0.33.0"  # newest read; `--vllm-version` picks another

Version = tuple[int, int, int]


def parse_version(text: str) -> Version:
    """'0.10.1.1' -> (0, 10, 1); 'v0.6.4.post1' -> (0, 6, 4)."""
    parts = str(text).strip().lstrip("vV").split(".")
    numbers: list[int] = []
    for part in parts[:3]:
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits or len(digits) > 6:  # no release is numbered past 999999 (nor 5,000 digits long)
            break
        numbers.append(int(digits))
    if len(numbers) < 2:
        raise PlannerError(f"cannot read vLLM version {text!r}; write it like 0.33.0")
    while len(numbers) < 3:
        numbers.append(0)
    return numbers[0], numbers[1], numbers[2]


def default_gpu_memory_utilization(version: Version) -> float:
    """CacheConfig.gpu_memory_utilization when none is given: 0.9 up to 0.19
    (v0.19.0:vllm/config/cache.py:41), 0.92 from 0.20.0 (v0.20.0:vllm/config/cache.py:66, the same in
    0.21 - 0.33; EngineArgs takes the CacheConfig default, v0.20.0:vllm/engine/arg_utils.py:502)."""
    return 0.92 if version >= (0, 20, 0) else 0.9


def default_engine(version: Version) -> str:
    """The engine a vLLM version runs when none is named: V1 is the default from 0.8.0 (VLLM_USE_V1)."""
    return "V0" if version < (0, 8, 0) else "V1"


# Model runner V2 by default (VllmConfig.use_v2_model_runner with VLLM_USE_V2_MODEL_RUNNER unset), by the HF
# model_type of the architectures vLLM lists: 0.21.0 has no default; 0.22.1 Qwen3ForCausalLM unless MoE or
# quantized (v0.22.1:vllm/config/vllm.py:69, 493-532); 0.24.0 six architectures (v0.24.0:vllm/config/vllm.py:
# 68-77, 522-561); 0.26.0 - 0.28.0 the listed MoE ones, else every model that is neither MoE nor hybrid
# (v0.26.0:vllm/config/vllm.py:68-77, 605-622; v0.28.0:vllm/config/vllm.py:69-93, 691-712); 0.29.0 every model
# (v0.29.0:vllm/config/vllm.py:645-676, unless a feature it lacks is on). 0.23 and 0.25 were not read: taken
# as the version before them.
_V2_LISTED: tuple[tuple[Version, frozenset[str]], ...] = (
    ((0, 22, 0), frozenset({"qwen3"})),
    ((0, 24, 0), frozenset({"qwen3", "deepseek_v2", "qwen2_moe", "granitemoe", "llama", "mistral"})),
    ((0, 26, 0), frozenset({"deepseek_v2", "qwen2_moe", "granitemoe"})),
    ((0, 28, 0), frozenset({"deepseek_v2", "deepseek_v4", "qwen2_moe", "granitemoe"})),
)


def model_runner_v2(ver: Version, model_type: str, *, moe: bool, hybrid: bool, quantized: bool) -> bool:
    """Whether V1 vLLM `ver` runs this model on model runner V2 by default (see _V2_LISTED)."""
    if ver >= (0, 29, 0):
        return True
    listed = next((types for since, types in reversed(_V2_LISTED) if ver >= since), None)
    if listed is None:
        return False
    if ver < (0, 24, 0):
        return model_type in listed and not moe and not quantized
    if ver < (0, 26, 0):
        return model_type in listed
    return model_type in listed or (not moe and not hybrid)
