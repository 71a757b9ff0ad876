"""`memsight plan MODEL [...]`: the analytic memory plan, as a table or one JSON object.

Imports only the standard library and planner/ at module level: no textual, psutil, pynvml, torch. NVML is
probed lazily, and only for `--machine this`.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
from typing import Any, NoReturn

from planner.budget import Plan, PlanInputs, make_plan, plan_to_json
from planner.errors import PlannerError
from planner.machines import CUSTOM_MACHINE, THIS_MACHINE, Machine, get_machine, machine_names, this_machine
from planner.units import GiB


def _number(kind: type, what: str, minimum: float = 0, strict: bool = False):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a {kind.__name__}, got {text!r}") from None
        if value != value or (value <= minimum if strict else value < minimum):  # NaN or out of range
            bound = f"greater than {minimum}" if strict else f"at least {minimum}"
            raise argparse.ArgumentTypeError(f"{what} must be {bound}, got {text}")
        return value

    return parse


def _layer_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--pp-layers wants comma-separated integers, got {text!r}"
        ) from None
    return values


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    # argparse's own errors become one line, like every other memsight error.
    def error(message: str) -> NoReturn:
        print(f"memsight {name}: {message}", file=sys.stderr)
        raise SystemExit(2)

    parser.error = error  # type: ignore[method-assign]
    gib = _number(float, "a size in GiB")
    count = _number(int, "a count")
    positive = _number(int, "a count", minimum=1)
    parser.add_argument(
        "model", metavar="MODEL", help="catalog name, config.json, checkpoint folder or HF repo id"
    )
    parser.add_argument(
        "--format", dest="fmt", help="weight format (bf16 fp16 fp32 fp8 int8 q8_0 q4_k_m awq ...)"
    )
    parser.add_argument(
        "--kv-dtype", default="auto", help="KV cache dtype: auto (= weights' dtype), fp8, bf16 ..."
    )
    parser.add_argument("--ctx", type=positive, default=8192, help="prompt tokens per user (default 8192)")
    parser.add_argument("--output-tokens", type=count, default=0, help="generated tokens per user (retained)")
    parser.add_argument("--users", type=count, default=1, help="concurrent users (default 1)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--machine", default=None, help=f"preset: {', '.join(machine_names()[:-1])} (default spark)"
    )
    where.add_argument(
        "--capacity-gib", type=_number(float, "capacity", strict=True), help="memory per device"
    )
    parser.add_argument("--os-reserve-gib", type=gib, help="kept for the OS and other processes")
    parser.add_argument(
        "--overhead-gib", type=gib, default=1.5, help="runtime overhead per rank (default 1.5)"
    )
    parser.add_argument(
        "--prefill-chunk", type=positive, default=8192, help="prefill chunk tokens (default 8192)"
    )
    parser.add_argument(
        "--logits", choices=("last", "all"), default="last", help="logits kept for the prompt"
    )
    parser.add_argument("--attention", choices=("fused", "eager"), default="fused", help="attention kernel")
    parser.add_argument("--tp", type=positive, default=1, help="tensor parallel size")
    parser.add_argument("--pp", type=positive, default=1, help="pipeline stages")
    parser.add_argument("--pp-layers", type=_layer_list, help="explicit layers per stage, e.g. 10,11,11")
    parser.add_argument("--shared-prefix", type=count, default=0, help="prompt tokens every user shares")
    parser.add_argument(
        "--block-size", type=positive, default=16, help="KV block size in tokens (default 16)"
    )
    vllm = parser.add_argument_group("vLLM pool (--engine vllm)")
    vllm.add_argument("--engine", choices=("vllm",), help="also compute the serving engine's KV pool")
    vllm.add_argument(
        "--gpu-memory-utilization", type=_number(float, "utilization", strict=True), default=0.9
    )
    vllm.add_argument("--max-model-len", type=positive, help="default: ctx + output tokens")
    vllm.add_argument(
        "--total-gib",
        type=_number(float, "total memory", strict=True),
        help="device total as torch reports it (default: the machine's capacity)",
    )
    vllm.add_argument("--weights-gib", type=gib, help="'model weights take' from a log (default: computed)")
    vllm.add_argument(
        "--activation-gib", type=gib, help="'PyTorch activation peak memory' (default: predicted)"
    )
    vllm.add_argument("--non-torch-gib", type=gib, help="'non_torch_memory' (default: --overhead-gib)")
    vllm.add_argument("--cudagraph-gib", type=gib, default=0.0, help="CUDA-graph estimate (vLLM >= 0.20)")
    vllm.add_argument("--kv-pool-gib", type=gib, help="the pool given directly (--kv-cache-memory-bytes)")
    vllm.add_argument("--vllm-version", default=None, help="formulas of this vLLM version (default 0.33.0)")
    vllm.add_argument("--vllm-engine", choices=("v0", "v1"), help="V0 or V1 engine (default by version)")
    vllm.add_argument("--max-num-batched-tokens", type=positive, help="scheduler token budget")
    vllm.add_argument(
        "--max-num-seqs", type=positive, help="sequences per step (default: vLLM's for the version and GPU)"
    )
    vllm.add_argument(
        "--usage-context",
        choices=("openai", "llm"),
        default="openai",
        help="`vllm serve` (openai, default) or the LLM class (llm): their scheduler defaults differ",
    )
    vllm.add_argument("--gpu-name", help="torch.cuda.get_device_name() (default: the machine preset's)")
    vllm.add_argument(
        "--cuda-capability", type=_capability, help="e.g. 9.0 (default: the machine preset's)"
    )
    vllm.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="vLLM's prefix caching (default: the version's; decides state blocks per request on hybrids)",
    )
    vllm.add_argument(
        "--mamba-ssm-cache-dtype",
        default="auto",
        help="vLLM's --mamba-ssm-cache-dtype for Mamba / linear-attention state (default auto)",
    )
    vllm.add_argument(
        "--sampler-path",
        choices=("torch-sort", "triton", "flashinfer"),
        help="the sampler the profile run uses (default: the version's)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object (bytes as integers)")


def _capability(text: str) -> tuple[int, int]:
    major, dot, minor = text.partition(".")
    if not (major.isdigit() and (not dot or minor.isdigit())):
        raise argparse.ArgumentTypeError(f"compute capability must look like 9.0, got {text!r}")
    return int(major), int(minor or 0)


def _gib(value: float | None) -> int | None:
    return None if value is None else round(value * GiB)


def probe_this_machine() -> Machine:
    """'this' machine: NVML device 0 if there is one (imported here, lazily), else /proc/meminfo."""
    try:
        import pynvml  # noqa: PLC0415 - lazy on purpose: `memsight plan` must not pay for it otherwise
    except ImportError:
        return this_machine(probe_note="NVML library not installed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return this_machine(probe_note=f"NVML unavailable: {exc}")
    try:
        if pynvml.nvmlDeviceGetCount() < 1:
            return this_machine(probe_note="NVML reports no GPU")
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else str(name)
        try:
            total = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
        except pynvml.NVMLError_NotSupported:
            # GB10 and other unified-memory parts: the GPU has no memory of its own to report
            return this_machine(gpu_name=name, unified=True)
        return this_machine(gpu_total_bytes=total, gpu_name=name)
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _checkpoint_weights(model: str, spec: Any, fmt: str | None) -> tuple[Any, tuple[str, ...]]:
    """Real bytes from a checkpoint folder's safetensors/GGUF headers, when MODEL is such a folder."""
    path = pathlib.Path(model).expanduser()
    if not path.is_dir():
        from planner.spec import find_in_hf_cache  # noqa: PLC0415

        # a repo id found in the local HF cache: its snapshot folder may hold the weights too
        cached = find_in_hf_cache(model) if model.count("/") == 1 and not path.exists() else None
        if cached is None:
            return None, ()
        path = cached.parent
    has_tensors = any(path.glob("*.safetensors")) or any(path.glob("*.gguf"))
    if not has_tensors:
        return None, ()
    if fmt is not None:
        return None, (f"--format {fmt} given: the real bytes of the checkpoint in {path} are not used",)
    from planner.budget import weights_from_checkpoint  # noqa: PLC0415
    from planner.checkpoint import read_checkpoint  # noqa: PLC0415

    return weights_from_checkpoint(spec, read_checkpoint(path))


def build_inputs(args: argparse.Namespace) -> PlanInputs:
    machine = args.machine or (CUSTOM_MACHINE if args.capacity_gib is not None else "spark")
    return PlanInputs(
        model=args.model,
        format=args.fmt,
        kv_dtype=args.kv_dtype,
        context=args.ctx,
        output_tokens=args.output_tokens,
        users=args.users,
        machine=machine,
        capacity_bytes=_gib(args.capacity_gib),
        os_reserve_bytes=_gib(args.os_reserve_gib),
        overhead_bytes=round(args.overhead_gib * GiB),
        prefill_chunk=args.prefill_chunk,
        tp=args.tp,
        pp=args.pp,
        pp_layers=args.pp_layers,
        shared_prefix=args.shared_prefix,
        block_size=args.block_size,
        logits=args.logits,
        attention=args.attention,
    )


def _check_vllm_flags(args: argparse.Namespace) -> None:
    if args.engine == "vllm":
        measured = (args.weights_gib, args.activation_gib, args.non_torch_gib)
        if args.kv_pool_gib is not None and any(v is not None for v in measured):
            raise PlannerError(
                "--kv-pool-gib gives the pool directly; it cannot be combined with "
                "--weights-gib/--activation-gib/--non-torch-gib"
            )
        if not 0 < args.gpu_memory_utilization <= 1:
            raise PlannerError(
                f"--gpu-memory-utilization must be in (0, 1], got {args.gpu_memory_utilization}"
            )
        return
    given = [
        flag
        for flag, value in (
            ("--weights-gib", args.weights_gib),
            ("--activation-gib", args.activation_gib),
            ("--non-torch-gib", args.non_torch_gib),
            ("--kv-pool-gib", args.kv_pool_gib),
            ("--vllm-version", args.vllm_version),
            ("--max-model-len", args.max_model_len),
            ("--total-gib", args.total_gib),
        )
        if value is not None
    ]
    if given:
        raise PlannerError(f"{', '.join(given)} only make sense with --engine vllm")


def compute(args: argparse.Namespace) -> tuple[Plan, Any]:
    _check_vllm_flags(args)
    inputs = build_inputs(args)
    from planner.spec import load_spec  # noqa: PLC0415

    spec = load_spec(args.model)
    weights, weight_notes = _checkpoint_weights(args.model, spec, args.fmt)
    machine = None
    if inputs.machine == THIS_MACHINE:
        machine = get_machine(
            THIS_MACHINE,
            capacity_bytes=inputs.capacity_bytes,
            os_reserve_bytes=inputs.os_reserve_bytes,
            this=probe_this_machine(),
        )
    plan = make_plan(inputs, spec=spec, machine=machine, weights=weights)
    if weight_notes:
        plan = _with_assumption(plan, *weight_notes)
    pool = None
    if args.engine == "vllm":
        from planner.vllm import DEFAULT_VLLM_VERSION, vllm_pool  # noqa: PLC0415

        per_stage: Any = (
            _gib(args.weights_gib)
            if args.weights_gib is not None
            else [next(r.weight_bytes for r in plan.ranks if r.pp_stage == s) for s in range(inputs.pp)]
        )
        pool = vllm_pool(
            spec,
            max_model_len=args.max_model_len or inputs.context + inputs.output_tokens,
            version=args.vllm_version or DEFAULT_VLLM_VERSION,
            engine=args.vllm_engine,
            total_bytes=_gib(args.total_gib) if args.total_gib is not None else plan.capacity_bytes,
            gpu_memory_utilization=args.gpu_memory_utilization,
            weights_bytes=per_stage,
            activation_bytes=_gib(args.activation_gib),
            non_torch_bytes=_gib(args.non_torch_gib)
            if args.non_torch_gib is not None
            else inputs.overhead_bytes,
            cudagraph_bytes=_gib(args.cudagraph_gib) or 0,
            kv_pool_bytes=_gib(args.kv_pool_gib),
            block_size=inputs.block_size,
            kv_dtype=inputs.kv_dtype,
            tp=inputs.tp,
            pp=inputs.pp,
            pp_layers=inputs.pp_layers,
            max_num_batched_tokens=args.max_num_batched_tokens,
            max_num_seqs=args.max_num_seqs,
            usage_context=args.usage_context,
            device_name=args.gpu_name or plan.machine.device_name,
            cuda_capability=args.cuda_capability or plan.machine.cuda_capability,
            sampler_path=args.sampler_path,
            enable_prefix_caching=args.enable_prefix_caching,
            mamba_ssm_cache_dtype=args.mamba_ssm_cache_dtype,
        )
        defaults = []
        if args.kv_pool_gib is None and args.total_gib is None:
            defaults.append(
                f"device total taken as the machine's capacity ({_g(plan.capacity_bytes)} GiB); vLLM uses "
                "torch's mem_get_info total, often a little less (GB10: about 119.6-121.7 GiB): --total-gib"
            )
        if args.kv_pool_gib is None and args.non_torch_gib is None:
            defaults.append(f"non-torch memory = the plan's overhead ({_g(inputs.overhead_bytes)} GiB)")
        if args.kv_pool_gib is None and args.weights_gib is None:
            defaults.append("weights per rank are the plan's (busiest rank of each pipeline stage)")
        if defaults:
            from dataclasses import replace  # noqa: PLC0415

            pool = replace(pool, notes=(*pool.notes, *defaults))
    return plan, pool


def _with_assumption(plan: Plan, *notes: str) -> Plan:
    from dataclasses import replace  # noqa: PLC0415

    return replace(plan, assumptions=(*plan.assumptions, *notes))


def _g(n: int) -> str:
    return f"{n / GiB:,.2f}"


def render(plan: Plan, pool: Any) -> str:
    i = plan.inputs
    lines = [
        f"memsight plan: {plan.spec.name}",
        f"  {plan.params.total:,} parameters ({plan.params.active_per_token:,} active per token), "
        f"{plan.weights.format} weights, KV {i.kv_dtype}, {i.context:,} + {i.output_tokens:,} tokens "
        "per user, "
        f"{i.users} user(s), tp={i.tp} pp={i.pp}",
        f"  machine: {plan.machine.label}",
        "",
        f"  {'bucket':<14}{'GiB':>10}",
        f"  {'weights':<14}{_g(plan.weight_bytes):>10}",
        f"  {'KV cache':<14}{_g(plan.kv_bytes):>10}   ({plan.kv_bytes_per_token:,} B per token per rank)",
        f"  {'activations':<14}{_g(plan.activation_bytes):>10}",
        f"  {'overhead':<14}{_g(plan.overhead_bytes):>10}",
    ]
    if plan.os_reserve_bytes:
        lines.append(f"  {'OS reserve':<14}{_g(plan.os_reserve_bytes):>10}")
    lines.append(f"  {'total':<14}{_g(plan.total_bytes):>10}   of {_g(plan.capacity_bytes)} GiB capacity")
    lines.append("")
    verdict = "FITS" if plan.fits else "DOES NOT FIT"
    short = plan.total_bytes - plan.capacity_bytes
    if not plan.fits:
        verdict += f" (short by {_g(short)} GiB)"
    lines.append(
        f"  {verdict}; max users at {i.context + i.output_tokens:,} tokens: {plan.max_users}; "
        f"longest context at {max(i.users, 1)} user(s): {plan.max_context:,} tokens"
    )
    lines.append("")
    lines.append(
        f"  {'rank':>4} {'tp':>3} {'pp':>3} {'weights':>9} {'KV':>9} {'activ.':>9} {'overhead':>9}"
        f" {'total':>9}  GiB"
    )
    for r in plan.ranks:
        mark = "  <- busiest" if r.busiest else ""
        lines.append(
            f"  {r.rank:>4} {r.tp_rank:>3} {r.pp_stage:>3} {_g(r.weight_bytes):>9} {_g(r.kv_bytes):>9} "
            f"{_g(r.activation_bytes):>9} {_g(r.overhead_bytes):>9} {_g(r.total_bytes):>9}{mark}"
        )
    if pool is not None:
        lines.append("")
        lines.append(f"  vLLM {pool.version} ({pool.engine}) KV pool per rank:")
        if pool.requested_bytes is not None:
            lines.append(
                f"    requested {_g(pool.requested_bytes)} GiB = {_g(pool.total_bytes)} GiB x "
                f"{pool.gpu_memory_utilization}; weights {_g(pool.weights_bytes)}, activation peak "
                f"{_g(pool.activation_bytes)}{' (predicted)' if pool.activation_predicted else ''}, "
                f"non-torch {_g(pool.non_torch_bytes)}, CUDA graphs {_g(pool.cudagraph_bytes)} GiB"
            )
        lines.append(
            f"    pool {_g(pool.pool_bytes)} GiB / {pool.bytes_per_block:,} B per block = "
            f"{pool.num_blocks:,} blocks "
            f"of {pool.block_size} tokens; {pool.blocks_per_request} blocks per request"
        )
        lines.append("    what vLLM logs:")
        lines.extend(f"      {line}" for line in pool.log_lines)
        lines.extend(f"    note: {note}" for note in pool.notes)
    lines.append("")
    lines.append("  assumptions:")
    lines.extend(f"    - {a}" for a in plan.assumptions)
    return "\n".join(lines)


def main(args: argparse.Namespace, name: str) -> int:
    plan, pool = compute(args)
    text = json.dumps(plan_to_json(plan, pool), indent=1) if args.json else render(plan, pool)
    print(text)  # a reader gone (`| head`) is handled once for every command, in tui/cli.py
    return 0


if __name__ == "__main__":  # pragma: no cover - `python -m tui.cmd_plan` is not the entry point
    print("use: memsight plan MODEL (or python -m tui.cli plan MODEL)", file=sys.stderr)
    sys.exit(os.EX_USAGE)
