"""`memsight plan MODEL --engine sglang|ollama`: the engine's own figures before launch, beside the plan.

The flags of each engine (its own names where the engine has one), the engine's arguments built from them and
the plan's inputs (TP/PP, KV dtype, weight format, the machine's capacity as the device total), and its lines
and --json object (planner/engines/sglang/plan.py, planner/engines/ollama/plan.py).
"""

from __future__ import annotations

import argparse

from planner.errors import PlannerError
from tui.options import argparse_type, parse_count, parse_number, parse_size

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: `plan --help` does not pay for it
if TYPE_CHECKING:
    from typing import Any

ENGINES = ("sglang", "ollama")
GGUF_FORMATS = ("q4_k_m", "q8_0")
_FLAGS = {
    "sglang": (
        "sglang_version", "mem_fraction_static", "free_gib", "page_size", "max_total_tokens",
        "max_running_requests", "chunked_prefill_size", "cuda_graph_max_bs",
    ),
    "ollama": (
        "ollama_version", "num_ctx", "num_parallel", "kv_cache_type", "flash_attention", "gpu_layers",
        "ollama_runner",
    ),
}  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    def count(flag: str, minimum: int = 0) -> Any:
        return argparse_type(parse_count, flag, minimum=minimum)

    sglang = parser.add_argument_group("SGLang pool (--engine sglang; --total-gib and --max-model-len too)")
    sglang.add_argument("--sglang-version", help="SGLang release whose rules apply (default 0.5.6)")
    sglang.add_argument(
        "--mem-fraction-static",
        type=argparse_type(parse_number, "--mem-fraction-static", strict=True),
        help="SGLang's --mem-fraction-static (default: the release's rule for the GPU and TP)",
    )
    sglang.add_argument(
        "--free-gib",
        metavar="SIZE",
        type=argparse_type(parse_size, "--free-gib", strict=True),
        help="free memory before loading ('Load weight begin. avail mem' of an earlier run)",
    )
    sglang.add_argument("--page-size", type=count("--page-size", 1), help="SGLang's --page-size (default 1)")
    sglang.add_argument("--max-total-tokens", type=count("--max-total-tokens", 1))
    sglang.add_argument("--max-running-requests", type=count("--max-running-requests", 1))
    sglang.add_argument("--chunked-prefill-size", type=count("--chunked-prefill-size", 1))
    sglang.add_argument("--cuda-graph-max-bs", type=count("--cuda-graph-max-bs", 1))
    ollama = parser.add_argument_group("Ollama (--engine ollama; --format q4_k_m|q8_0, default q4_k_m)")
    ollama.add_argument("--ollama-version", help="defaults of this Ollama release (default 0.20.0)")
    ollama.add_argument("--num-ctx", type=count("--num-ctx", 1), help="num_ctx (default: the release's)")
    ollama.add_argument("--num-parallel", type=count("--num-parallel", 1), help="OLLAMA_NUM_PARALLEL")
    ollama.add_argument("--kv-cache-type", choices=("f16", "q8_0", "q4_0"), help="OLLAMA_KV_CACHE_TYPE")
    ollama.add_argument(
        "--flash-attention",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="OLLAMA_FLASH_ATTENTION (default: the release's)",
    )
    ollama.add_argument("--gpu-layers", type=count("--gpu-layers", 0), help="num_gpu: layers on the GPU")
    ollama.add_argument(
        "--ollama-runner",
        choices=("ollama", "llama"),
        help="Ollama's own engine (default) or its llama.cpp runner (llama.cpp's arithmetic)",
    )


def check_flags(args: argparse.Namespace) -> None:
    """An engine's flag without that engine is a mistake, said in one line."""
    for engine, names in _FLAGS.items():
        if args.engine == engine:
            continue
        given = [f"--{n.replace('_', '-')}" for n in names if getattr(args, n, None) is not None]
        if given:
            raise PlannerError(f"{', '.join(given)} only make sense with --engine {engine}")


def engine_plan(args: argparse.Namespace, spec: Any, plan: Any) -> Any:
    """The engine's own plan for the plan's model and inputs."""
    from planner.engines import get_engine  # noqa: PLC0415

    i = plan.inputs
    total = args.total_gib if args.total_gib is not None else _device_total(plan, args)
    if args.engine == "sglang":
        from planner.engines.sglang.plan import SGLangArguments  # noqa: PLC0415

        arguments: Any = SGLangArguments(
            total_bytes=total,
            free_bytes=args.free_gib,
            tp=i.tp,
            pp=i.pp,
            page_size=args.page_size or 1,
            context_len=args.max_model_len,
            max_total_tokens=args.max_total_tokens,
            max_running_requests=args.max_running_requests,
            kv_dtype=i.kv_dtype,
            weight_format=plan.weights.format,
            chunked_prefill_size=args.chunked_prefill_size,
            cuda_graph_max_bs=args.cuda_graph_max_bs,
            mem_fraction_static=args.mem_fraction_static,
            **({"version": args.sglang_version} if args.sglang_version else {}),
        )
    else:
        from planner.engines.ollama.plan import OllamaArguments  # noqa: PLC0415

        fmt = getattr(args, "format", None)
        if fmt is not None and fmt not in GGUF_FORMATS:
            raise PlannerError(f"Ollama serves GGUF files: --format {' or '.join(GGUF_FORMATS)}, not {fmt}")
        arguments = OllamaArguments(
            total_vram_bytes=total,
            num_ctx=args.num_ctx,
            num_parallel=args.num_parallel,
            kv_cache_type=args.kv_cache_type,
            flash_attention=args.flash_attention,
            gpu_layers=args.gpu_layers,
            weight_format=fmt,
            runner=args.ollama_runner or "ollama",
            **({"version": args.ollama_version} if args.ollama_version else {}),
        )
    return get_engine(args.engine).predict(spec, arguments, plan)


def _device_total(plan: Any, args: argparse.Namespace) -> int:
    """The GPU's total as torch's mem_get_info reads it where memsight holds it (planner's GPU table), else
    the machine's capacity."""
    from planner.engines.vllm.overheads import known_device  # noqa: PLC0415  (the table vLLM's plan reads)

    recorded = known_device(plan.machine.device_name) if args.capacity_gib is None else None
    return recorded.total_bytes if recorded is not None else plan.capacity_bytes  # not in the table: capacity


def render(engine: str, engine_plan_: Any, plan: Any) -> list[str]:
    """The engine's lines, and how its figure of users relates to the plan's "max users"."""
    module = _module(engine)
    tokens_per_user = plan.inputs.context + plan.inputs.output_tokens
    answers = module.answers(engine_plan_, tokens_per_user, plan.max_users)
    return ["", *module.render(engine_plan_), f"    {answers}"]


def to_json(engine: str, engine_plan_: Any) -> dict[str, Any]:
    return _module(engine).plan_json(engine_plan_)


def _module(engine: str) -> Any:
    import importlib  # noqa: PLC0415

    return importlib.import_module(f"planner.engines.{engine}.plan")
