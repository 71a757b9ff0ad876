"""Ollama's defaults by release (envconfig/config.go, server/sched.go, server/routes.go at each tag), on top
of llama.cpp's arithmetic: the context one request gets, how many requests share a runner, the KV cache type
and flash attention.

- num_ctx: 2048 up to v0.6.6; 4096 (OLLAMA_CONTEXT_LENGTH's default) v0.6.7 - v0.15.4; from v0.15.5 by the
  GPUs' total VRAM: >= 47 GiB 262,144, >= 23 GiB 32,768, else 4,096 (v0.20.0 server/routes.go:1843-1851,
  logged as "vram-based default context"); never past the model's trained context (HEAD llm/server.go:115).
- num_parallel: OLLAMA_NUM_PARALLEL 0 = automatic up to v0.9.6 (4 where it fits, else 1; 2 on the CPU:
  v0.9.0 server/sched.go:62,135-212), 1 from v0.10.0. The runner's context is num_ctx x num_parallel
  (v0.9.0 server/sched.go:212; "--ctx-size" / the load request's KvSize).
- OLLAMA_KV_CACHE_TYPE: f16 unless set (q8_0, q4_0 need flash attention: v0.9.0 llm/server.go:214-222).
- OLLAMA_FLASH_ATTENTION: off unless set up to v0.12.5; from v0.12.6 on by default where the model and GPU
  support it (envconfig BoolWithDefault).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import PlannerError

DEFAULT_VERSION = "0.20.0"
# what `ollama pull MODEL` fetches without a tag suffix: the library's default quantization
LIBRARY_FORMAT = "q4_k_m"
GiB = 2**30


def parse_version(text: str) -> tuple[int, int, int]:
    parts = str(text).strip().lstrip("v").split("-")[0].split(".")
    try:
        numbers = [int(p) for p in parts[:3]]
    except ValueError:
        raise PlannerError(f"not an Ollama version: {text!r} (e.g. 0.9.0, 0.12.6)") from None
    while len(numbers) < 3:
        numbers.append(0)
    return numbers[0], numbers[1], numbers[2]


@dataclass(frozen=True, slots=True)
class OllamaDefaults:
    num_ctx: int
    num_parallel: int
    kv_cache_type: str
    flash_attention: bool
    source: str


def default_num_ctx(version: str, total_vram_bytes: int | None) -> tuple[int, str]:
    ver = parse_version(version)
    if ver < (0, 6, 7):
        return 2048, "num_ctx 2048 (api/types.go default up to v0.6.6)"
    if ver < (0, 15, 5):
        return 4096, "num_ctx 4096 (OLLAMA_CONTEXT_LENGTH default, v0.6.7 - v0.15.4)"
    if total_vram_bytes is None:
        return 4096, "num_ctx 4096 (VRAM-based default from v0.15.5; no GPU memory given)"
    if total_vram_bytes >= 47 * GiB:
        return 262144, "num_ctx 262,144 (VRAM-based default from v0.15.5: >= 47 GiB)"
    if total_vram_bytes >= 23 * GiB:
        return 32768, "num_ctx 32,768 (VRAM-based default from v0.15.5: >= 23 GiB)"
    return 4096, "num_ctx 4096 (VRAM-based default from v0.15.5: < 23 GiB)"


def defaults_for(version: str, total_vram_bytes: int | None, train_ctx: int | None = None) -> OllamaDefaults:
    ver = parse_version(version)
    ctx, ctx_source = default_num_ctx(version, total_vram_bytes)
    if train_ctx and ver >= (0, 15, 5):
        ctx = min(ctx, train_ctx)
    if ver < (0, 10, 0):
        parallel = 4 if total_vram_bytes else 2
        parallel_source = "num_parallel automatic up to v0.9.6: 4 where it fits (2 on the CPU)"
    else:
        parallel, parallel_source = 1, "num_parallel 1 (OLLAMA_NUM_PARALLEL default from v0.10.0)"
    flash = ver >= (0, 12, 6)
    flash_source = "flash attention on by default from v0.12.6" if flash else "flash attention off by default"
    return OllamaDefaults(ctx, parallel, "f16", flash, f"{ctx_source}; {parallel_source}; {flash_source}")
