"""`memsight explain` flags for SGLang's and Ollama's logs: the settings a log does not show, given on the
command line (they win over the log), under each engine's own names. vLLM's are in tui/cmd_explain.py."""

from __future__ import annotations

import argparse
from typing import Any

from planner.errors import PlannerError
from tui.options import argparse_type, parse_count, parse_number, parse_size

# flag dest -> (engine, the key its explain() reads in options["given"])
_GIVEN = {
    "mem_fraction_static": ("sglang", "mem_fraction_static"),
    "free_gib": ("sglang", "free_gib"),
    "context_length": ("sglang", "context_length"),
    "page_size": ("sglang", "page_size"),
    "max_total_tokens": ("sglang", "max_total_tokens"),
    "max_running_requests": ("sglang", "max_running_requests"),
    "format": ("ollama", "format"),
    "ctx_size": ("ollama", "ctx_size"),
    "parallel": ("ollama", "parallel"),
    "kv_cache_type": ("ollama", "kv_cache_type"),
    "flash_attention": ("ollama", "flash_attention"),
    "gpu_layers": ("ollama", "gpu_layers"),
}
_VERSION = {"vllm": "vllm_version", "sglang": "sglang_version"}
_SHARED = {
    "tensor_parallel_size": "tp_size",
    "pipeline_parallel_size": "pp_size",
    "quantization": "quantization",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    def count(flag: str, minimum: int = 1) -> Any:
        return argparse_type(parse_count, flag, minimum=minimum)

    sglang = parser.add_argument_group("SGLang settings the log does not show (-tp/-pp apply too)")
    sglang.add_argument("--sglang-version", help="when the log's wording does not date it")
    sglang.add_argument(
        "--mem-fraction-static", type=argparse_type(parse_number, "--mem-fraction-static", strict=True)
    )
    sglang.add_argument(
        "--free-gib",
        type=argparse_type(parse_size, "--free-gib", strict=True),
        metavar="SIZE",
        help="free memory before loading ('Load weight begin. avail mem'), when the log is cut before it",
    )
    sglang.add_argument("--context-length", type=count("--context-length"))
    sglang.add_argument("--page-size", type=count("--page-size"))
    sglang.add_argument("--max-total-tokens", type=count("--max-total-tokens"))
    sglang.add_argument("--max-running-requests", type=count("--max-running-requests"))
    ollama = parser.add_argument_group("Ollama settings the log does not show")
    ollama.add_argument("--format", choices=("q4_k_m", "q8_0"), help="the GGUF's file type")
    ollama.add_argument(
        "--ctx-size", type=count("--ctx-size"), help="the runner's context: num_ctx x parallel"
    )
    ollama.add_argument("--parallel", type=count("--parallel"))
    ollama.add_argument("--kv-cache-type", choices=("f16", "q8_0", "q4_0"))
    ollama.add_argument("--flash-attention", action=argparse.BooleanOptionalAction, default=None)
    ollama.add_argument(
        "--gpu-layers", type=count("--gpu-layers", 0), help="layers the GPU got (with output)"
    )


def given(args: argparse.Namespace, engine: str, vllm_given: dict[str, Any]) -> dict[str, Any]:
    """The flags for `engine`'s explain() (`vllm_given`: vLLM's, read by tui/cmd_explain.py); a flag of
    another engine is refused in one line."""
    shared = _SHARED if engine == "sglang" else {}
    for key in vllm_given:
        if engine != "vllm" and key not in shared:
            raise PlannerError(
                f"--{key.replace('_', '-')} is a vLLM setting; this is {_TITLES[engine]}'s log"
            )
    out: dict[str, Any] = dict(vllm_given) if engine == "vllm" else {}
    for dest, (owner, key) in _GIVEN.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        if owner != engine:
            flag = "--" + dest.replace("_", "-")
            raise PlannerError(f"{flag} is an {_TITLES[owner]} setting; this is {_TITLES[engine]}'s log")
        out[key] = value / 2**30 if dest == "free_gib" else value
    out.update({key: vllm_given[dest] for dest, key in shared.items() if dest in vllm_given})
    return out


def version(args: argparse.Namespace, engine: str) -> str | None:
    for owner, dest in _VERSION.items():
        if owner != engine and getattr(args, dest, None):
            raise PlannerError(
                f"--{dest.replace('_', '-')} is for a {_TITLES[owner]} log; this is {_TITLES[engine]}'s"
            )
    dest = _VERSION.get(engine)
    return getattr(args, dest, None) if dest else None


_TITLES = {"vllm": "vLLM", "sglang": "SGLang", "ollama": "Ollama", "llamacpp": "llama.cpp"}
