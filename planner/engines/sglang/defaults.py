"""SGLang's defaults by release: mem_fraction_static, chunked_prefill_size, cuda_graph_max_bs, the CUDA-graph
batch sizes, and the request-pool size rule. Each rule names the release wheel it was read from
(sglang/srt/server_args.py and model_executor/cuda_graph_runner.py); a release between two read ones follows
the nearest earlier one read, and says so.

`gpu_mem` is SGLang's `get_device_memory_capacity()` in MiB (nvidia-smi's memory.total). memsight knows a
GPU's total as torch's mem_get_info reads it (planner.vllm.DEVICE_TOTALS); the two differ by a few hundred
MiB (H100 80GB: 81,559 vs 81,121 MiB), which moves a default fraction by under 0.005.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from planner.errors import PlannerError

DEFAULT_VERSION = "0.5.6"  # the newest release whose defaults are modelled below

# Releases read (the wheels' server_args.py / cuda_graph_runner.py / model_runner.py)
READ = (
    "0.3.6",
    "0.4.0",
    "0.4.2",
    "0.4.3.post4",
    "0.4.6.post5",
    "0.4.7",
    "0.4.8",
    "0.4.9.post6",
    "0.5.3",
    "0.5.6",
)


def parse_version(text: str) -> tuple[int, int, int]:
    m = re.match(r"v?(\d{1,6})\.(\d{1,6})(?:\.(\d{1,6}))?(?!\d)", str(text).strip())
    if not m:
        raise PlannerError(f"not an SGLang version: {text!r} (e.g. 0.4.6, 0.5.3)")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


@dataclass(frozen=True, slots=True)
class Era:
    """What differs between the releases read, for one version (or a range the log's wording dates)."""

    label: str  # the version, or the range the wording dates ("0.4.3-0.4.5")
    rule: str  # which release's defaults are followed
    req_pool_plus_one: (
        bool  # ReqToTokenPool(size=max_num_reqs + 1): up to 0.4.6 (0.4.6.post5 :904; 0.4.7 :926)
    )


def era_of(version: str | None, wording: str | None = None) -> Era:
    """The era of a version (given), else of the range a log's wording dates it to, else the default."""
    if version:
        ver = parse_version(version)
        rule = _nearest_read(ver)
        return Era(version, rule, ver < (0, 4, 7))
    if wording:
        plus_one = wording in ("<=0.4.2", "0.4.3-0.4.5")
        rule = {"<=0.4.2": "0.4.2", "0.4.3-0.4.5": "0.4.3.post4", ">=0.4.7": "0.4.7", ">=0.5": "0.5.6"}[
            wording
        ]
        return Era(wording, rule, plus_one)
    return Era(DEFAULT_VERSION, DEFAULT_VERSION, False)


def _nearest_read(ver: tuple[int, int, int]) -> str:
    best = READ[0]
    for release in READ:
        if parse_version(release) <= ver:
            best = release
    return best


@dataclass(frozen=True, slots=True)
class Defaults:
    mem_fraction_static: float
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    capture_bs: tuple[int, ...]
    source: str


def defaults_for(
    version: str,
    gpu_mem_mib: float | None,
    tp: int = 1,
    pp: int = 1,
    chunked_prefill_size: int | None = None,
    cuda_graph_max_bs: int | None = None,
    max_prefill_tokens: int = 16384,
) -> Defaults:
    """SGLang's defaults for a release on a GPU of `gpu_mem_mib` MiB; arguments given win as in SGLang."""
    rule = _nearest_read(parse_version(version))
    ver = parse_version(rule)
    chunk, max_bs, src_sizes = _sizes(rule, gpu_mem_mib, tp)
    chunk = chunked_prefill_size if chunked_prefill_size is not None else chunk
    max_bs = cuda_graph_max_bs if cuda_graph_max_bs is not None else max_bs
    if ver < (0, 4, 6):
        fraction, src_fraction = _fraction_tp_table(rule, tp), f"sglang {rule} server_args.py: by tp_size"
    elif ver < (0, 4, 8):
        fraction, src_fraction = _fraction_0_4_6(rule, gpu_mem_mib, tp * pp)
    elif ver < (0, 5, 3):
        fraction, src_fraction = _fraction_by_class(gpu_mem_mib, tp * pp)
    else:
        fraction, src_fraction = _fraction_reserved(gpu_mem_mib, chunk, max_prefill_tokens, max_bs, tp * pp)
    bs = capture_batch_sizes(rule, gpu_mem_mib, max_bs)
    note = "" if rule == version else f" (follows {rule}, the nearest earlier release read)"
    return Defaults(fraction, chunk, max_bs, bs, f"{src_fraction}; {src_sizes}{note}")


def _fraction_tp_table(rule: str, tp: int) -> float:
    # 0.3.6 server_args.py:156-166 (tp >= 8: 0.82), 0.4.0 :158-168, 0.4.2 :189-199,
    # 0.4.3.post4 :204-214 (tp >= 8: 0.81)
    if tp >= 16:
        return 0.79
    if tp >= 8:
        return 0.82 if rule == "0.3.6" else 0.81
    if tp >= 4:
        return 0.85
    if tp >= 2:
        return 0.87
    return 0.88


def _fraction_0_4_6(rule: str, gpu_mem: float | None, parallel: int) -> tuple[float, str]:
    # 0.4.6.post5 server_args.py:247-268, 0.4.7 :253-280: the tp x pp table on GPUs up to 80 GiB, else 0.88;
    # then more for GPUs above 96 GiB (0.4.7: 0.79 above 180 GB)
    fraction = _fraction_tp_table("0.4.6", parallel) if gpu_mem is not None and gpu_mem <= 81920 else 0.88
    if rule == "0.4.7" and gpu_mem is not None and gpu_mem > 180 * 1000:
        fraction = 0.79
    elif gpu_mem is not None and gpu_mem > 96 * 1024:
        fraction = min(fraction + 48 * 1024 * (1 - fraction) / gpu_mem, (gpu_mem - 1024 * 18) / gpu_mem)
    return fraction, f"sglang {rule} server_args.py: tp x pp table, adjusted above 96 GiB"


def _fraction_by_class(gpu_mem: float | None, parallel: int) -> tuple[float, str]:
    # 0.4.8 server_args.py:274-330, 0.4.9.post6 :294-335: reserved memory by GPU class
    if gpu_mem is None:
        return 0.88, "sglang 0.4.9.post6 server_args.py: no GPU memory known, 0.88"
    if gpu_mem < 35 * 1024:
        reserved = (2.8 + parallel / 10) * 1024
    elif gpu_mem < 90 * 1024:
        reserved = (9.5 + parallel / 2) * 1024
    elif gpu_mem < 160 * 1024:
        reserved = (12 + parallel / 2) * 1024
    else:
        reserved = 32 * 1024
    return round((gpu_mem - reserved) / gpu_mem, 3), (
        f"sglang 0.4.9.post6 server_args.py:294-333: reserved {reserved:.0f} MiB by GPU class"
    )


def _fraction_reserved(
    gpu_mem: float | None, chunk: int, max_prefill: int, max_bs: int, parallel: int
) -> tuple[float, str]:
    # 0.5.3 server_args.py:637-672, 0.5.6 :821-860 (no DP attention, no speculative decoding, no piecewise)
    if gpu_mem is None:
        return 0.88, "sglang 0.5.6 server_args.py:858: no GPU memory known, 0.88"
    reserved = 512 + max(chunk if chunk > 0 else max_prefill, 2048) * 1.5 + max_bs * 2 + parallel / 8 * 1024
    if gpu_mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mem - reserved) / gpu_mem, 3), (
        f"sglang 0.5.6 server_args.py:821-860: reserved 512 + chunk x 1.5 + max_bs x 2 + tp x pp / 8 GiB "
        f"= {reserved:.0f} MiB"
    )


def _sizes(rule: str, gpu_mem: float | None, tp: int) -> tuple[int, int | None, str]:
    """(chunked_prefill_size, cuda_graph_max_bs or None when SGLang leaves it uncapped, source)."""
    ver = parse_version(rule)
    small = gpu_mem is not None and gpu_mem < 25_000
    if ver < (0, 4, 0):
        # 0.3.6 server_args.py:63,132 (fields 8192 / 160), :173-175 (small GPUs: 2048 / 4)
        return (
            (2048, 4, "sglang 0.3.6 server_args.py:168-176") if small else (8192, 160, "sglang 0.3.6 fields")
        )
    if ver < (0, 4, 2):
        # 0.4.0 server_args.py:171-182: small GPUs 2048 / 8, else 8192 / 160
        return (2048, 8, "sglang 0.4.0 server_args.py:171-182") if small else (8192, 160, "sglang 0.4.0")
    if ver < (0, 4, 8):
        # 0.4.2 server_args.py:201-217, 0.4.3.post4 :216-232, 0.4.6.post5 :270-277, 0.4.7 :286-321:
        # under 25,000 MiB 2048 and
        # 8 (tp < 4) / 80; 0.4.7 16384 above 180,000 MiB; cuda_graph_max_bs 160 only in 0.4.3 (else uncapped)
        source = f"sglang {rule} server_args.py: chunked_prefill_size / cuda_graph_max_bs defaults"
        if small:
            return 2048, (8 if tp < 4 else 80), source
        chunk = 16384 if rule == "0.4.7" and gpu_mem is not None and gpu_mem > 180_000 else 8192
        return chunk, (160 if ver < (0, 4, 6) else None), source
    if ver < (0, 5, 3):
        # 0.4.8 server_args.py:318-335, 0.4.9.post6 :346-364: by class, graphs capped only under 35 GiB
        source = f"sglang {rule} server_args.py: chunked_prefill_size by GPU class"
        if gpu_mem is None:
            return 4096, None, source
        if gpu_mem < 35 * 1024:
            return 2048, (8 if tp < 4 else 80), source
        return (8192 if gpu_mem < 160 * 1024 else 16384), None, source
    # 0.5.3 server_args.py:565-630, 0.5.6 :728-808 (CUDA GPUs)
    source = f"sglang {rule} server_args.py _handle_gpu_memory_settings: by GPU memory class"
    if gpu_mem is None:
        return 4096, 160, source
    if gpu_mem < 20 * 1024:
        return 2048, 8, source
    if gpu_mem < 35 * 1024:
        return 2048, ((16 if rule == "0.5.3" else 24) if tp < 4 else 80), source
    if gpu_mem < 60 * 1024:
        return 4096, (32 if tp < 4 else 160), source
    if gpu_mem < 160 * 1024:
        return 8192, (256 if tp < 4 else 512), source
    return 16384, 512, source


def capture_batch_sizes(rule: str, gpu_mem: float | None, max_bs: int | None) -> tuple[int, ...]:
    """The decode CUDA-graph batch sizes captured (before the request pool caps them; no speculative
    decoding, cuda graph padding on)."""
    ver = parse_version(rule)
    if ver < (0, 4, 6):
        # 0.4.3.post4 cuda_graph_runner.py:109-143 (0.3.6 the same list)
        sizes = [1, 2, 4] + [i * 8 for i in range(1, 21)]
    elif ver < (0, 5, 3):
        # 0.4.6.post5 cuda_graph_runner.py:127-162, 0.4.9.post6 :138-188
        sizes = [1, 2, 4, 8, *range(16, 161, 8)]
        if gpu_mem is not None and gpu_mem > (90 * 1024 if ver >= (0, 4, 9) else 96 * 1024):
            sizes += list(range(160, 257, 8))
        if ver >= (0, 4, 9) and gpu_mem is not None and gpu_mem > 160 * 1000:
            sizes += list(range(256, 513, 16))
        if max_bs:
            sizes = [bs for bs in sizes if bs <= max_bs]
            if max(sizes) < max_bs:
                sizes += list(range(max(sizes), max_bs + 1, 16))
    else:
        # 0.5.6 server_args.py:871-899 _generate_cuda_graph_batch_sizes (no speculative decoding)
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, (max_bs or 0) + 1, 32)]
    if max_bs:
        sizes = [bs for bs in sizes if bs <= max_bs]
    return tuple(sorted(set(sizes)))
