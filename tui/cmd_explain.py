"""`memsight explain LOG|-`: an engine's startup log (the engine recognized from the log: planner/engines),
each logged memory figure next to the planner's prediction for the same model, GPU and engine arguments (the
prediction uses none of the log's measured figures), on the worksheet every engine shares."""

from __future__ import annotations

import argparse
import json
import os
import sys

from planner import limits
from planner.errors import PlannerError
from planner.units import GiB
from tui import explain_engines
from tui.widgets.fmt import size

GIVEN_FLAGS = (
    "max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "gpu_memory_utilization",
    "max_num_seqs", "max_num_batched_tokens", "quantization", "kv_cache_dtype", "enforce_eager", "block_size",
    "data_parallel_size", "enable_expert_parallel", "async_scheduling", "estimate_cudagraphs",
)  # fmt: skip
NUMERIC_FLAGS = (
    "max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "gpu_memory_utilization",
    "max_num_seqs", "max_num_batched_tokens", "block_size", "data_parallel_size",
)  # fmt: skip
KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc")


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument(
        "log", metavar="LOG", help="an engine's startup log (vLLM, SGLang, Ollama, llama.cpp), or - for stdin"
    )
    parser.add_argument(
        "--model",
        help="model config / catalog name / repo id (default: the log's); for a llama.cpp log, the GGUF file "
        "(its tensor table replaces the log's description of it)",
    )
    parser.add_argument("--vllm-version", help="when the log does not say which version wrote it")
    parser.add_argument("--gpu", help="GPU whose recorded mem_get_info total to use when the log has none")
    parser.add_argument(
        "--total-gib", type=float, help="the device total vLLM saw, GiB (when the log has none)"
    )
    given = parser.add_argument_group("engine settings the log does not show (they win over the log)")
    given.add_argument("--max-model-len", type=int)
    given.add_argument("--tensor-parallel-size", "-tp", type=int)
    given.add_argument("--pipeline-parallel-size", "-pp", type=int)
    given.add_argument("--gpu-memory-utilization", type=float)
    given.add_argument("--max-num-seqs", type=int)
    given.add_argument("--max-num-batched-tokens", type=int)
    given.add_argument(
        "--quantization", "-q", help="vLLM's --quantization (awq, gptq, fp8, bitsandbytes, ...)"
    )
    given.add_argument(
        "--kv-cache-dtype",
        choices=KV_CACHE_DTYPES,
        help="vLLM's --kv-cache-dtype (fp8 halves the bytes per token)",
    )
    given.add_argument(
        "--enforce-eager", action=argparse.BooleanOptionalAction, default=None,
        help="vLLM's --enforce-eager: no CUDA graphs (and no graph estimate)",
    )  # fmt: skip
    given.add_argument("--block-size", type=int, help="vLLM's --block-size (tokens per KV block)")
    given.add_argument("--data-parallel-size", "-dp", type=int, help="vLLM's --data-parallel-size")
    given.add_argument(
        "--enable-expert-parallel", action=argparse.BooleanOptionalAction, default=None,
        help="vLLM's --enable-expert-parallel (MoE experts split by count over DP x TP ranks)",
    )  # fmt: skip
    given.add_argument(
        "--async-scheduling", action=argparse.BooleanOptionalAction, default=None,
        help="vLLM's --async-scheduling (on by default in V1; from 0.26 it widens a sliding window's blocks)",
    )  # fmt: skip
    given.add_argument(
        "--estimate-cudagraphs", action=argparse.BooleanOptionalAction, default=None,
        help="VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1/0: whether the CUDA-graph estimate is taken from "
             "the pool",
    )  # fmt: skip
    explain_engines.add_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the same as one JSON object (stable keys)")


def _read(path: str) -> str:
    if path == "-":
        data = sys.stdin.buffer.read(limits.MAX_LOG_BYTES + 1)
        where = "stdin"
        if len(data) > limits.MAX_LOG_BYTES:
            raise PlannerError(f"stdin: over {limits.bound('MAX_LOG_BYTES')}: not a plausible startup log")
    else:  # a regular file only, opened without blocking: a FIFO or device is refused, never waited on
        data = limits.read_regular(path, "MAX_LOG_BYTES", PlannerError, "startup log")
        where = path
    if b"\x00" in data[:65536]:
        raise PlannerError(f"{where}: binary data, not a text log")
    return data.decode("utf-8", errors="replace")


def _fmt(value: float | None, whole: bool) -> str:
    if value is None:
        return "-"
    if whole:
        return f"{value:,.0f}"
    return f"{value:,.2f}"


def render(sheet) -> str:  # noqa: ANN001  (planner.engines.worksheet.Worksheet, imported lazily)
    lines = [sheet.line, ""]
    lines.append(f"memsight explain: {sheet.model}, {sheet.title}")
    for name, value, where in sheet.inputs:
        lines.append(f"  {name:<26}{value:<32} from {where}")
    lines.append("")
    lines.append(f"  {'':<24}{'logged':>12}{'predicted':>12}{'diff':>10}  cause")
    for r in sheet.rows:
        where = f"  (line {r.logged_line})" if r.logged_line else ""
        diff = r.difference
        rel = r.relative
        diff_text = (
            "-"
            if diff is None
            else (f"{rel:+.1%}" if rel is not None and r.key not in sheet.absolute else f"{diff:+.2f}")
        )
        whole = r.key in sheet.counts
        lines.append(
            f"  {sheet.labels[r.key]:<24}{_fmt(r.logged, whole):>12}"
            f"{_fmt(r.predicted, whole):>12}{diff_text:>10}  {r.cause}{where}"
        )
    lines.append("")
    lines.append("  how each predicted term is known:")
    name_width = max((len(t.name) for t in sheet.terms), default=0)
    for t in sheet.terms:  # each figure in its own unit: a tiny model's 2.53 MiB is not 0.00 GiB
        lines.append(f"    {t.name:<{name_width}}{size(t.bytes):>10}  {t.how:<9} {t.source}")
    for note in sheet.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def main(args: argparse.Namespace, name: str) -> int:
    from dataclasses import replace  # noqa: PLC0415

    from planner.engines import also_recognized, recognize  # noqa: PLC0415
    from planner.engines.worksheet import worksheet_json  # noqa: PLC0415

    text = _read(args.log)
    engine = recognize(text)
    log = engine.read_log(text)
    problem = engine.log_problem(log)
    if problem is not None:
        raise PlannerError(problem)
    if args.total_gib is not None and not 0 < args.total_gib < 1e6:
        raise PlannerError(f"--total-gib must be a positive number of GiB, got {args.total_gib}")
    given = {
        key: getattr(args, key)
        for key in GIVEN_FLAGS
        if getattr(args, key) is not None
    }  # fmt: skip
    for key, value in given.items():
        if key not in NUMERIC_FLAGS:
            continue
        if value <= 0 or (key == "gpu_memory_utilization" and value > 1):
            raise PlannerError(f"--{key.replace('_', '-')} out of range: {value}")
    given = explain_engines.given(args, engine.name, given)
    if engine.name == "llamacpp" and (args.gpu is not None or args.total_gib is not None):
        raise PlannerError("--gpu and --total-gib are for vLLM and SGLang logs; this is llama.cpp's log")
    options = {
        "given": given,
        "model": args.model,
        "version": explain_engines.version(args, engine.name),
        "gpu": args.gpu,
        "total_bytes": None if args.total_gib is None else round(args.total_gib * GiB),
    }
    sheet = engine.explain(log, options)
    others = also_recognized(text, engine)
    if others:
        names = " and ".join(f"{other.title}'s" for other in others)
        note = (
            f"this file also holds {names} start-up lines (two runs in one file?): only {engine.title}'s "
            "start is explained here; give each run's log on its own to explain the other"
        )
        sheet = replace(sheet, notes=(*sheet.notes, note))
    out = json.dumps(worksheet_json(sheet), indent=1) if args.json else render(sheet)
    try:
        print(out)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
