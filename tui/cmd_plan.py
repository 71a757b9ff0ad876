"""`memsight plan MODEL [...]`: the analytic memory plan, as a table or one JSON object.

Imports at module level only what the options need (argparse, tui/options.py, planner's presets, units and
errors: no dataclasses, typing, textual, psutil, pynvml or torch). NVML is probed lazily, and only for
`--machine this`. The planner itself and the config file's reader are imported by the functions that plan:
`memsight plan --help` pays only for its options (issue 20; tests/tui/test_cli_imports.py).
"""

from __future__ import annotations

import argparse
import os
import sys

from planner.errors import PlannerError
from planner.presets import CUSTOM_MACHINE, THIS_MACHINE, machine_names
from planner.units import GiB
from tui import cmd_plan_llamacpp, plan_engines
from tui.options import (
    DEFAULT_MODEL,
    InputError,
    add_plan_input_arguments,
    argparse_type,
    parse_choice,
    parse_count,
    parse_number,
    parse_size,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: `--help` does not pay for it
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from planner.budget import Plan, PlanInputs
    from planner.machines import Machine
    from tui.config import PlanDefaults


def _layer_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(parse_count(part, "--pp-layers", minimum=1) for part in text.split(","))
    except InputError:
        raise argparse.ArgumentTypeError(
            f"--pp-layers wants comma-separated whole numbers, got {text!r}"
        ) from None
    return values


def _choice(*choices: str, what: str) -> dict[str, Any]:
    """argparse keywords for a case-insensitive choice (the help still lists the choices)."""
    return {"choices": choices, "type": argparse_type(parse_choice, choices, what)}


def _size(flag: str, **kwargs: Any) -> Callable[[str], Any]:
    return argparse_type(parse_size, flag, **kwargs)


def _count(flag: str, minimum: int = 0) -> Callable[[str], Any]:
    return argparse_type(parse_count, flag, minimum=minimum)


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    _add_model_arguments(parser)
    _add_workload_arguments(parser)
    _add_machine_arguments(parser)
    _add_runtime_arguments(parser)
    _add_vllm_arguments(parser)
    plan_engines.add_arguments(parser)
    cmd_plan_llamacpp.add_arguments(parser)
    _add_output_arguments(parser)


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model",
        metavar="MODEL",
        nargs="?",
        help="catalog name, config.json, checkpoint folder or HF repo id "
        f"(default: the config file's, else {DEFAULT_MODEL})",
    )
    parser.add_argument(
        "--list",
        nargs="?",
        const="",
        metavar="PATTERN",
        help="list the built-in catalog (names containing PATTERN, case-insensitive; * and ? as wildcards)",
    )
    parser.add_argument(
        "--download",
        action="store_true",
        help="fetch only config.json of a Hub repo id that is not in the local HF cache (from $HF_ENDPOINT, "
        "default https://huggingface.co)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="config file for the defaults (default ~/.config/memsight/config.toml)",
    )


def _add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    add_plan_input_arguments(parser)
    parser.add_argument(
        "--output-tokens",
        type=_count("--output-tokens"),
        default=0,
        help="generated tokens per user (retained)",
    )


def _add_machine_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--machine",
        default=None,
        **_choice(*machine_names()[:-1], what="--machine"),
        help=f"preset: {', '.join(machine_names()[:-1])} (default spark; any case)",
    )
    where.add_argument(
        "--capacity-gib",
        metavar="SIZE",
        type=_size("--capacity-gib", strict=True),
        help="memory per device: GiB, or with a unit (80GB, 1.5TiB)",
    )
    parser.add_argument(
        "--os-reserve-gib",
        metavar="SIZE",
        type=_size("--os-reserve-gib"),
        help="kept for the OS and other processes",
    )
    parser.add_argument(
        "--overhead-gib",
        metavar="SIZE",
        type=_size("--overhead-gib"),
        default=round(1.5 * GiB),
        help="runtime overhead per rank (default 1.5 GiB)",
    )


def _add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prefill-chunk",
        type=_count("--prefill-chunk", 1),
        default=8192,
        metavar="TOKENS",
        help="prefill chunk tokens (default 8192)",
    )
    parser.add_argument(
        "--logits",
        default="last",
        **_choice("last", "all", what="--logits"),
        help="logits kept for the prompt",
    )
    parser.add_argument(
        "--attention",
        default="fused",
        **_choice("fused", "eager", what="--attention"),
        help="attention kernel",
    )
    parser.add_argument("--pp", type=_count("--pp", 1), default=1, metavar="N", help="pipeline stages")
    parser.add_argument("--pp-layers", type=_layer_list, help="explicit layers per stage, e.g. 10,11,11")
    parser.add_argument(
        "--shared-prefix",
        type=_count("--shared-prefix"),
        default=0,
        metavar="TOKENS",
        help="prompt tokens every user shares",
    )
    parser.add_argument(
        "--block-size",
        type=_count("--block-size", 1),
        default=16,
        metavar="TOKENS",
        help="KV block size in tokens (default 16)",
    )


def _add_vllm_arguments(parser: argparse.ArgumentParser) -> None:
    vllm = parser.add_argument_group("vLLM pool (--engine vllm)")
    vllm.add_argument(
        "--engine",
        **_choice("vllm", *plan_engines.ENGINES, "llamacpp", what="--engine"),
        help="also compute the serving engine's own figures (vLLM's KV pool, SGLang's, Ollama's; llama.cpp's "
        "buffers for a GGUF)",
    )
    _add_vllm_budget_arguments(vllm)
    _add_vllm_measured_arguments(vllm)
    _add_vllm_runtime_arguments(vllm)


def _add_vllm_budget_arguments(vllm: Any) -> None:
    vllm.add_argument(
        "--gpu-memory-utilization",
        type=argparse_type(parse_number, "--gpu-memory-utilization", strict=True),
        default=None,  # the version's default is set by _check_vllm_flags, so a given value can be told apart
        help="vLLM's share of the GPU (default: the version's, 0.92 from vLLM 0.20, 0.9 before)",
    )
    vllm.add_argument(
        "--max-model-len",
        type=_count("--max-model-len", 1),
        metavar="TOKENS",
        help="default: context + output tokens",
    )
    vllm.add_argument(
        "--total-gib",
        metavar="SIZE",
        type=_size("--total-gib", strict=True),
        help="device total as torch reports it (default: the machine's capacity)",
    )


def _add_vllm_measured_arguments(vllm: Any) -> None:
    vllm.add_argument(
        "--weights-gib",
        metavar="SIZE",
        type=_size("--weights-gib"),
        help="'model weights take' from a log (default: computed)",
    )
    vllm.add_argument(
        "--activation-gib",
        metavar="SIZE",
        type=_size("--activation-gib"),
        help="'PyTorch activation peak memory' (default: predicted)",
    )
    vllm.add_argument(
        "--non-torch-gib",
        metavar="SIZE",
        type=_size("--non-torch-gib"),
        help="'non_torch_memory' (default: PREDICTED for the version, as `memsight explain` does)",
    )
    vllm.add_argument(
        "--cudagraph-gib",
        metavar="SIZE",
        type=_size("--cudagraph-gib"),
        help="CUDA-graph estimate (default: PREDICTED; vLLM V1 >= 0.20 deducts it, earlier ones 0)",
    )
    vllm.add_argument(
        "--enforce-eager",
        action="store_true",
        help="vLLM's --enforce-eager: no CUDA graphs (changes what the version counts as non-torch)",
    )
    vllm.add_argument(
        "--kv-pool-gib",
        metavar="SIZE",
        type=_size("--kv-pool-gib"),
        help="the pool given directly (--kv-cache-memory-bytes)",
    )


def _add_vllm_runtime_arguments(vllm: Any) -> None:
    vllm.add_argument("--vllm-version", default=None, help="formulas of this vLLM version (default 0.33.0)")
    vllm.add_argument(
        "--meminfo",
        metavar="FILE",
        help="with --engine vllm: check vLLM's start-up rule against this saved /proc/meminfo of a "
        "unified-memory machine (a Spark) instead of this machine's; --machine this checks this machine now "
        "(a discrete GPU's free memory comes from NVML, never from a file)",
    )
    vllm.add_argument(
        "--vllm-engine",
        **_choice("v0", "v1", what="--vllm-engine"),
        help="V0 or V1 engine (default by version)",
    )
    vllm.add_argument(
        "--max-num-batched-tokens", type=_count("--max-num-batched-tokens", 1), help="scheduler token budget"
    )
    vllm.add_argument(
        "--max-num-seqs",
        type=_count("--max-num-seqs", 1),
        help="sequences per step (default: vLLM's for the version and GPU)",
    )
    vllm.add_argument(
        "--usage-context",
        **_choice("openai", "llm", what="--usage-context"),
        default="openai",
        help="`vllm serve` (openai, default) or the LLM class (llm): their scheduler defaults differ",
    )
    vllm.add_argument("--gpu-name", help="torch.cuda.get_device_name() (default: the machine preset's)")
    vllm.add_argument("--cuda-capability", type=_capability, help="e.g. 9.0 (default: the machine preset's)")
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
        **_choice("torch-sort", "triton", "flashinfer", what="--sampler-path"),
        help="the sampler the profile run uses (default: the version's)",
    )


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object (bytes as integers)")


def _capability(text: str) -> tuple[int, int]:
    major, dot, minor = text.partition(".")
    if not (major.isdigit() and (not dot or minor.isdigit())):
        raise argparse.ArgumentTypeError(f"compute capability must look like 9.0, got {text!r}")
    return int(major), int(minor or 0)


def probe_gpu() -> tuple[dict[str, Any] | None, str]:
    """NVML device 0 (imported here, lazily): ({"name", "total", "free", "unified"}, "") or (None, why not).
    On GB10 and other unified parts the device memory answers Not Supported: total and free are None."""
    try:
        import pynvml  # noqa: PLC0415 - lazy on purpose: `memsight plan` must not pay for it otherwise
    except ImportError:
        return None, "NVML library not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"NVML unavailable: {exc}"
    try:
        if pynvml.nvmlDeviceGetCount() < 1:
            return None, "NVML reports no GPU"
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else str(name)
        try:
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        except pynvml.NVMLError_NotSupported:
            # GB10 and other unified-memory parts: the GPU has no memory of its own to report
            return {"name": name, "total": None, "free": None, "unified": True}, ""
        return {"name": name, "total": int(memory.total), "free": int(memory.free), "unified": False}, ""
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def probe_this_machine() -> Machine:
    """'this' machine: NVML device 0 if there is one, else /proc/meminfo."""
    from planner.machines import this_machine  # noqa: PLC0415

    gpu, why = probe_gpu()
    if gpu is None:
        return this_machine(probe_note=why)
    if gpu["unified"]:
        return this_machine(gpu_name=gpu["name"], unified=True)
    return this_machine(gpu_total_bytes=gpu["total"], gpu_name=gpu["name"])


def _checkpoint_weights(model: str, spec: Any, fmt: str | None) -> tuple[Any, tuple[str, ...]]:
    """Real bytes from a checkpoint folder's safetensors/GGUF headers, when MODEL is such a folder."""
    import pathlib  # noqa: PLC0415

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


def build_inputs(args: argparse.Namespace, defaults: PlanDefaults | None = None) -> PlanInputs:
    """The plan's inputs: the options given, then the config file's [plan] values, then the shared defaults
    (tui/options.py), exactly as `memsight watch` and the Plan screen resolve them."""
    from planner.budget import PlanInputs  # noqa: PLC0415
    from tui.config import PlanDefaults, merge_plan_args  # noqa: PLC0415

    p = merge_plan_args(defaults or PlanDefaults(), args)
    machine = args.machine or (CUSTOM_MACHINE if args.capacity_gib is not None else "spark")
    return PlanInputs(
        model=p.model,
        format=p.format,
        kv_dtype=p.kv_dtype,
        context=p.context,
        output_tokens=args.output_tokens,
        users=p.users,
        machine=machine,
        capacity_bytes=args.capacity_gib,
        os_reserve_bytes=args.os_reserve_gib
        if args.os_reserve_gib is not None or machine != THIS_MACHINE
        else p.unified_os_reserve_bytes,  # the config file's reserve of this machine, as the screens use
        overhead_bytes=args.overhead_gib,
        prefill_chunk=args.prefill_chunk,
        tp=p.tp,
        pp=args.pp,
        pp_layers=args.pp_layers,
        shared_prefix=args.shared_prefix,
        block_size=args.block_size,
        logits=args.logits,
        attention=args.attention,
    )


def _check_vllm_flags(args: argparse.Namespace) -> None:
    if args.engine == "vllm":
        if args.gpu_memory_utilization is None:
            from planner.engines.vllm import version  # noqa: PLC0415

            ver = version.parse_version(args.vllm_version or version.DEFAULT_VLLM_VERSION)
            args.gpu_memory_utilization = version.default_gpu_memory_utilization(ver)
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
            ("--cudagraph-gib", args.cudagraph_gib),
            ("--kv-pool-gib", args.kv_pool_gib),
            ("--vllm-version", args.vllm_version),
            ("--max-model-len", None if args.engine == "sglang" else args.max_model_len),
            ("--total-gib", None if args.engine in plan_engines.ENGINES else args.total_gib),
            ("--meminfo", args.meminfo),
        )
        if value is not None
    ]
    if given:
        raise PlannerError(f"{', '.join(given)} only make sense with --engine vllm")
    plan_engines.check_flags(args)


def compute(args: argparse.Namespace, defaults: PlanDefaults | None = None) -> tuple[Plan, Any]:
    from planner.budget import make_plan  # noqa: PLC0415

    _check_vllm_flags(args)
    if args.engine == "ollama" and args.format is None:
        from planner.engines.ollama.defaults import LIBRARY_FORMAT  # noqa: PLC0415

        # the four buckets price the weights Ollama will load, not the Hugging Face checkpoint's bf16
        args = argparse.Namespace(**{**vars(args), "format": LIBRARY_FORMAT})
    inputs = build_inputs(args, defaults)
    from planner.spec import load_spec  # noqa: PLC0415

    spec = load_spec(inputs.model, allow_download=args.download)
    weights, weight_notes = _checkpoint_weights(inputs.model, spec, inputs.format)
    machine = None
    if inputs.machine == THIS_MACHINE:
        from planner.machines import get_machine  # noqa: PLC0415

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
        pool = _vllm_pool(args, spec, plan)
    elif args.engine in plan_engines.ENGINES:
        pool = plan_engines.engine_plan(args, spec, plan)
    return plan, pool


def _vllm_pool(args: argparse.Namespace, spec: Any, plan: Plan) -> Any:
    """vLLM's KV pool for the plan's model and arguments (planner/engines/vllm/plan.py)."""
    from planner.engines import get_engine  # noqa: PLC0415
    from planner.engines.vllm.plan import VLLMArguments  # noqa: PLC0415

    arguments = VLLMArguments(
        version=args.vllm_version,
        engine=args.vllm_engine,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=args.max_model_len,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        usage_context=args.usage_context,
        gpu_name=args.gpu_name,
        cuda_capability=args.cuda_capability,
        enforce_eager=args.enforce_eager,
        sampler_path=args.sampler_path,
        enable_prefix_caching=args.enable_prefix_caching,
        mamba_ssm_cache_dtype=args.mamba_ssm_cache_dtype,
        total_bytes=args.total_gib,
        capacity_given=args.capacity_gib is not None,
        weights_bytes=args.weights_gib,
        activation_bytes=args.activation_gib,
        non_torch_bytes=args.non_torch_gib,
        cudagraph_bytes=args.cudagraph_gib,
        kv_pool_bytes=args.kv_pool_gib,
    )
    return get_engine("vllm").predict(spec, arguments, plan)


def _with_assumption(plan: Plan, *notes: str) -> Plan:
    from dataclasses import replace  # noqa: PLC0415

    return replace(plan, assumptions=(*plan.assumptions, *notes))


def _g(n: int) -> str:
    return f"{n / GiB:,.2f}"


def render(plan: Plan, pool: Any) -> str:
    """The plan as a table: its inputs, buckets, verdict and ranks, vLLM's KV pool (`pool`, None without
    --engine vllm), its assumptions."""
    from planner.engines.worksheet import max_users_meaning  # noqa: PLC0415

    lines = [*_summary_lines(plan), *_verdict_lines(plan), *_rank_lines(plan)]
    if pool is not None:
        i = plan.inputs
        meaning = max_users_meaning(plan.max_users, i.context + i.output_tokens)
        lines.extend(_vllm_pool_lines(pool, meaning))
    lines.append("")
    lines.append("  assumptions:")
    lines.extend(f"    - {a}" for a in plan.assumptions)
    return "\n".join(lines)


def _summary_lines(plan: Plan) -> list[str]:
    """The model, its inputs, the machine and the four buckets with their total against the capacity."""
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
    return lines


def _verdict_lines(plan: Plan) -> list[str]:
    """Fits or not (short by how much), the most users and the longest context, the plan's warnings."""
    i = plan.inputs
    verdict = "FITS" if plan.fits else "DOES NOT FIT"
    short = plan.total_bytes - plan.capacity_bytes
    if not plan.fits:
        verdict += f" (short by {_g(short)} GiB)"
    lines = [
        f"  {verdict}; max users at {i.context + i.output_tokens:,} tokens: {plan.max_users}; "
        f"longest context at {max(i.users, 1)} user(s): {plan.max_context:,} tokens"
    ]
    lines.extend(f"  WARNING: {w}" for w in plan.warnings)
    lines.append("")
    return lines


def _rank_lines(plan: Plan) -> list[str]:
    """The per-rank table, the busiest rank marked."""
    lines = [
        f"  {'rank':>4} {'tp':>3} {'pp':>3} {'weights':>9} {'KV':>9} {'activ.':>9} {'overhead':>9}"
        f" {'total':>9}  GiB"
    ]
    for r in plan.ranks:
        mark = "  <- busiest" if r.busiest else ""
        lines.append(
            f"  {r.rank:>4} {r.tp_rank:>3} {r.pp_stage:>3} {_g(r.weight_bytes):>9} {_g(r.kv_bytes):>9} "
            f"{_g(r.activation_bytes):>9} {_g(r.overhead_bytes):>9} {_g(r.total_bytes):>9}{mark}"
        )
    return lines


def _vllm_pool_lines(pool: Any, users_meaning: str) -> list[str]:
    """vLLM's KV pool per rank: how it is carved, what vLLM logs, and what its "maximum concurrency" answers
    beside memsight's max users (`users_meaning`)."""
    lines = ["", f"  vLLM {pool.version} ({pool.engine}) KV pool per rank:"]
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
    lines.append(
        f'    which answers what: vLLM\'s "maximum concurrency" ({pool.max_concurrency_text}) is its KV '
        f"pool in tokens / the tokens one {pool.max_model_len:,}-token request needs (after vLLM's own "
        f"weights, profiled activations and non-torch memory within {pool.gpu_memory_utilization} of the "
        f"device); {users_meaning}"
    )
    lines.extend(f"    note: {note}" for note in pool.notes)
    return lines


def list_catalog(pattern: str) -> list[str]:
    """Catalog lines (name, Hub repo) whose name or repo contains `pattern` (case-insensitive; * and ? are
    wildcards); every entry for an empty pattern."""
    import fnmatch  # noqa: PLC0415

    from planner.catalog import catalog_entry, catalog_names  # noqa: PLC0415

    wanted = pattern.strip().lower()
    glob = wanted if any(c in wanted for c in "*?[") else f"*{wanted}*"
    lines = []
    for name in catalog_names():
        entry = catalog_entry(name)
        repo = entry.hf_repo if entry is not None else ""
        if fnmatch.fnmatchcase(name, glob) or fnmatch.fnmatchcase(repo.lower(), glob):
            lines.append(f"{name:<34} {repo}")
    return lines


def main(args: argparse.Namespace, name: str) -> int:
    import json  # noqa: PLC0415

    from planner.budget import plan_to_json  # noqa: PLC0415
    from tui.config import ConfigError, load_config  # noqa: PLC0415

    if args.list is not None:
        lines = list_catalog(args.list)
        if not lines:
            raise PlannerError(
                f"no catalog model matches {args.list!r} (memsight plan --list shows them all)"
            )
        return _print("\n".join(lines))
    try:
        defaults = load_config(args.config, required=args.config is not None).plan
    except ConfigError as exc:
        print(f"memsight: {exc}", file=sys.stderr)
        return 2
    if args.engine == "llamacpp":
        return _llamacpp(args, defaults)
    llama_flags = cmd_plan_llamacpp.given_flags(args)
    if llama_flags:
        raise PlannerError(f"{', '.join(llama_flags)} only make sense with --engine llamacpp")
    plan, pool = compute(args, defaults)
    if args.engine in plan_engines.ENGINES:
        if args.json:
            out = {**plan_to_json(plan), args.engine: plan_engines.to_json(args.engine, pool)}
            return _print(json.dumps(out, indent=1))
        return _print("\n".join([render(plan, None), *plan_engines.render(args.engine, pool, plan)]))
    from tui.startup_check import startup_check, startup_lines, startup_to_json  # noqa: PLC0415

    startup = startup_check(args, plan, pool)  # vLLM's start-up check (None without --engine vllm)
    if args.json:
        doc = plan_to_json(plan, pool)
        if startup is not None:
            doc["vllm_startup"] = startup_to_json(startup)
        return _print(json.dumps(doc, indent=1))
    return _print("\n".join([render(plan, pool), *startup_lines(startup, pool, args.meminfo)]))


def _llamacpp(args: argparse.Namespace, defaults: PlanDefaults | None) -> int:
    """llama.cpp's buffers for a GGUF (tui/cmd_plan_llamacpp.py); the four-bucket plan is vLLM's and
    transformers' view and needs a config.json, so it is not printed here."""
    _check_vllm_flags(args)
    plan_engines.check_flags(args)
    _check_llamacpp_flags(args)
    context = build_inputs(args, defaults).context
    p = cmd_plan_llamacpp.predict(args, context)
    fit = None
    if args.machine is not None or args.capacity_gib is not None:  # only when asked: no preset is assumed
        from planner.machines import get_machine  # noqa: PLC0415

        name = args.machine or CUSTOM_MACHINE
        this = probe_this_machine() if name == THIS_MACHINE else None
        machine = get_machine(
            name, capacity_bytes=args.capacity_gib, os_reserve_bytes=args.os_reserve_gib, this=this
        )
        fit = cmd_plan_llamacpp.fit(p, machine)
    if args.json:
        import json  # noqa: PLC0415

        return _print(json.dumps(cmd_plan_llamacpp.to_json(args.model, p, fit), indent=1))
    return _print(cmd_plan_llamacpp.render(args.model, p, fit))


# the four-bucket plan's flags that llama.cpp's plan does not read, with llama.cpp's own flag where it has
# one; a flag left unread would leave the plan unchanged with no word said
_NOT_LLAMACPP = (
    ("users", "--users is -np (--parallel) for llama.cpp"),
    ("tp", "--tp is --gpus / -ts (--tensor-split) for llama.cpp"),
    ("kv_dtype", "--kv-dtype is -ctk / -ctv (--cache-type-k / --cache-type-v) for llama.cpp"),
    ("format", "--format: llama.cpp runs the GGUF's own tensor types; plan another GGUF file instead"),
    ("gpu_memory_utilization",
     "--gpu-memory-utilization is vLLM's; llama.cpp allocates what its buffers need"),
)  # fmt: skip


def _check_llamacpp_flags(args: argparse.Namespace) -> None:
    for name, message in _NOT_LLAMACPP:
        if getattr(args, name, None) is not None:
            raise PlannerError(message)


def _print(text: str) -> int:
    print(text)  # a reader gone (`| head`) is handled once for every command, in tui/cli.py
    return 0


if __name__ == "__main__":  # pragma: no cover - `python -m tui.cmd_plan` is not the entry point
    print("use: memsight plan MODEL (or python -m tui.cli plan MODEL)", file=sys.stderr)
    sys.exit(os.EX_USAGE)
