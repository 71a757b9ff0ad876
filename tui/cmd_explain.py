"""`memsight explain LOG|-`: a vLLM startup log, each logged memory figure next to the planner's prediction
for the same model, GPU and engine arguments (the prediction uses none of the log's measured figures)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from planner import limits
from planner.errors import PlannerError
from planner.units import GiB

GIVEN_FLAGS = (
    "max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "gpu_memory_utilization",
    "max_num_seqs", "max_num_batched_tokens", "quantization",
)  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("log", metavar="LOG", help="a vLLM startup log file, or - for stdin")
    parser.add_argument("--model", help="model config / catalog name / repo id (default: the one in the log)")
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


def _fmt(key: str, value: float | None) -> str:
    if value is None:
        return "-"
    if key in ("num_blocks", "kv_tokens"):
        return f"{value:,.0f}"
    return f"{value:,.2f}"


def render(ex, log) -> str:  # noqa: ANN001  (planner.vllm_explain types, imported lazily)
    from planner.vllm_explain import ROW_LABELS  # noqa: PLC0415

    lines = [ex.worksheet, ""]
    lines.append(f"memsight explain: {ex.model}, vLLM {ex.version} ({ex.engine})")
    for name, value, where in ex.inputs:
        lines.append(f"  {name:<26}{value:<32} from {where}")
    lines.append("")
    lines.append(f"  {'':<24}{'logged':>12}{'predicted':>12}{'diff':>10}  cause")
    for r in ex.rows:
        where = f"  (line {r.logged_line})" if r.logged_line else ""
        diff = r.difference
        rel = r.relative
        diff_text = (
            "-"
            if diff is None
            else (f"{rel:+.1%}" if rel is not None and r.key != "max_concurrency" else f"{diff:+.2f}")
        )
        lines.append(
            f"  {ROW_LABELS[r.key]:<24}{_fmt(r.key, r.logged):>12}"
            f"{_fmt(r.key, r.predicted):>12}{diff_text:>10}  {r.cause}{where}"
        )
    lines.append("")
    lines.append("  how each predicted term is known:")
    for t in ex.terms:
        lines.append(f"    {t.name:<16}{t.bytes / GiB:>9.2f} GiB  {t.how:<9} {t.source}")
    for note in ex.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def main(args: argparse.Namespace, name: str) -> int:
    from planner.vllm_explain import explain, explanation_json, stage_problem  # noqa: PLC0415
    from planner.vllm_log import parse_log  # noqa: PLC0415

    text = _read(args.log)
    log = parse_log(text)
    problem = stage_problem(log)
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
        if key == "quantization":
            continue
        if value <= 0 or (key == "gpu_memory_utilization" and value > 1):
            raise PlannerError(f"--{key.replace('_', '-')} out of range: {value}")
    ex = explain(
        log,
        given=given,
        model=args.model,
        version=args.vllm_version,
        gpu=args.gpu,
        total_bytes=None if args.total_gib is None else round(args.total_gib * GiB),
    )
    out = json.dumps(explanation_json(ex, log), indent=1) if args.json else render(ex, log)
    try:
        print(out)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
