"""`memsight plan --engine vllm`: vLLM's KV pool for the plan's model and arguments, before launch.

Non-torch memory, the CUDA-graph estimate and the weights vLLM holds beyond the checkpoint (padded MoE
experts) are what `memsight explain` predicts for the same version (explain.py), so both commands give one
pool; a figure the user gives (from a log) replaces a prediction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from planner.engines.vllm.moe import vllm_weight_extras
from planner.engines.vllm.overheads import Device, device_total, predicted_cudagraphs, predicted_non_torch
from planner.engines.vllm.pool import VLLMPool, vllm_pool
from planner.engines.vllm.runner_v2 import with_consumed
from planner.engines.vllm.version import DEFAULT_VLLM_VERSION, default_engine, parse_version
from planner.errors import PlannerError
from planner.units import GiB


@dataclass(frozen=True, slots=True)
class VLLMArguments:
    """vLLM's engine arguments, and the figures a user read from a log (bytes; None: predicted)."""

    version: str | None = None  # None: DEFAULT_VLLM_VERSION
    engine: str | None = None  # "V0" | "V1"; None: the version's default
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None  # None: the plan's context + output tokens
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    usage_context: str = "openai"
    gpu_name: str | None = None  # None: the machine preset's
    cuda_capability: tuple[int, int] | None = None  # None: the machine preset's
    enforce_eager: bool = False
    sampler_path: str | None = None
    enable_prefix_caching: bool | None = None
    mamba_ssm_cache_dtype: str = "auto"
    total_bytes: int | None = None  # the device total as torch reports it
    capacity_given: bool = False  # the user set the capacity: it stands for the device total
    weights_bytes: int | None = None
    activation_bytes: int | None = None
    non_torch_bytes: int | None = None
    cudagraph_bytes: int | None = None
    kv_pool_bytes: int | None = None


def _g(n: int) -> str:
    return f"{n / GiB:,.2f}"


def _weights_per_stage(spec: Any, arguments: VLLMArguments, plan: Any, notes: list[str]) -> Any:
    """The weights of each pipeline stage as vLLM holds them: the plan's busiest rank plus vLLM's extras."""
    if arguments.weights_bytes is not None:
        return arguments.weights_bytes
    inputs = plan.inputs
    capability = arguments.cuda_capability or plan.machine.cuda_capability
    per_stage = [next(r.weight_bytes for r in plan.ranks if r.pp_stage == s) for s in range(inputs.pp)]
    extras, extra_notes = vllm_weight_extras(
        spec, plan.weights.format, parse_version(arguments.version or DEFAULT_VLLM_VERSION), capability,
        inputs.tp, inputs.pp,
    )  # fmt: skip
    notes.extend(f"weights {n}" for n in extra_notes)
    return [w + e for w, e in zip(per_stage, extras, strict=True)]


def _recorded_device(arguments: VLLMArguments, plan: Any) -> Device | None:
    """The GPU's mem_get_info total and SM count, where memsight holds them."""
    name = arguments.gpu_name or plan.machine.device_name
    if not name:
        return None
    try:
        return device_total(name)
    except PlannerError:
        return None  # not held for this GPU: the capacity stands in, and the notes say so


def _device_total(
    arguments: VLLMArguments, plan: Any, recorded: Device | None, notes: list[str]
) -> int | None:
    total = arguments.total_bytes
    if total is None and arguments.kv_pool_bytes is None:
        if recorded is not None and not arguments.capacity_given:
            total = recorded.total_bytes
            notes.append(f"device total {_g(total)} GiB as vLLM reads it (mem_get_info): {recorded.source}")
        else:
            total = plan.capacity_bytes
            notes.append(
                f"device total taken as the machine's capacity ({_g(total)} GiB); vLLM uses torch's "
                "mem_get_info total, often a little less: --total-gib"
            )
    return total


def predict(spec: Any, arguments: VLLMArguments, plan: Any) -> VLLMPool:
    """vLLM's pool per rank for `plan` (planner.budget.Plan: its inputs, machine and per-rank weights)."""
    version = arguments.version or DEFAULT_VLLM_VERSION
    engine = (arguments.engine or default_engine(parse_version(version))).upper()
    notes: list[str] = []
    per_stage: Sequence[int] | int = _weights_per_stage(spec, arguments, plan, notes)
    recorded = _recorded_device(arguments, plan)
    non_torch = _predicted_non_torch(arguments, plan, version, engine, recorded)
    total = _device_total(arguments, plan, recorded, notes)
    sizing = _Sizing(spec, arguments, plan, version, engine, total, per_stage, recorded)
    if non_torch is not None:
        # What 0.27+ holds after the profile beyond the weights needs the pool's resolved scheduler limits.
        non_torch = with_consumed(
            non_torch, spec, version=version, engine=engine, pool=sizing.pool(non_torch.bytes, 0),
            fmt=plan.weights.format, capability=sizing.capability, tp=plan.inputs.tp,
        )  # fmt: skip
        notes.append(f"non-torch {_g(non_torch.bytes)} GiB PREDICTED: {non_torch.source}")
    non_torch_bytes = non_torch.bytes if non_torch is not None else arguments.non_torch_bytes or 0
    pool = _with_graphs(sizing, non_torch_bytes, notes)
    if arguments.kv_pool_bytes is None and arguments.weights_bytes is None:
        notes.append("weights per rank are the plan's (busiest rank of each pipeline stage)")
    if arguments.kv_pool_bytes is not None:
        return pool
    return replace(pool, notes=(*pool.notes, *notes))


def _predicted_non_torch(
    arguments: VLLMArguments, plan: Any, version: str, engine: str, recorded: Device | None
) -> Any:
    """The non-torch memory the version's rules predict; None when the user gave it, or gave the pool
    itself, so no prediction stands beside a figure read from a log."""
    if arguments.non_torch_bytes is not None or arguments.kv_pool_bytes is not None:
        return None
    inputs = plan.inputs
    return predicted_non_torch(
        version,
        engine,
        inputs.tp * inputs.pp,
        tp=inputs.tp,
        enforce_eager=arguments.enforce_eager,
        device=recorded,
    )


@dataclass(frozen=True, slots=True)
class _Sizing:
    """What every sizing of the pool shares: it is sized up to three times, since what 0.27+ consumes beyond
    the weights and the graph estimate both need the scheduler limits an earlier sizing resolves."""

    spec: Any
    arguments: VLLMArguments
    plan: Any
    version: str
    engine: str
    total: int | None
    per_stage: Sequence[int] | int
    recorded: Device | None

    @property
    def capability(self) -> tuple[int, int] | None:
        return self.arguments.cuda_capability or self.plan.machine.cuda_capability

    def pool(self, non_torch_bytes: int, cudagraph_bytes: int) -> VLLMPool:
        arguments, inputs, recorded = self.arguments, self.plan.inputs, self.recorded
        return vllm_pool(
            self.spec,
            max_model_len=arguments.max_model_len or inputs.context + inputs.output_tokens,
            version=self.version,
            engine=self.engine,
            total_bytes=self.total if self.total is not None else self.plan.capacity_bytes,
            gpu_memory_utilization=arguments.gpu_memory_utilization,
            weights_bytes=self.per_stage,
            activation_bytes=arguments.activation_bytes,
            non_torch_bytes=non_torch_bytes,
            cudagraph_bytes=cudagraph_bytes,
            kv_pool_bytes=arguments.kv_pool_bytes,
            block_size=inputs.block_size,
            kv_dtype=inputs.kv_dtype,
            tp=inputs.tp,
            pp=inputs.pp,
            pp_layers=inputs.pp_layers,
            max_num_batched_tokens=arguments.max_num_batched_tokens,
            max_num_seqs=arguments.max_num_seqs,
            usage_context=arguments.usage_context,
            device_name=arguments.gpu_name or self.plan.machine.device_name,
            cuda_capability=self.capability,
            sm_count=recorded.sm_count if recorded is not None else None,
            scheduler_total_bytes=recorded.scheduler_total_bytes if recorded is not None else None,
            sampler_path=arguments.sampler_path,
            enable_prefix_caching=arguments.enable_prefix_caching,
            mamba_ssm_cache_dtype=arguments.mamba_ssm_cache_dtype,
        )


def _with_graphs(sizing: _Sizing, non_torch_bytes: int, notes: list[str]) -> VLLMPool:
    """The pool with the CUDA graphs deducted: the given figure, or the estimate, which counts the capture
    sizes that follow the max_num_seqs the pool resolves, so the pool is sized once without graphs first."""
    arguments = sizing.arguments
    if arguments.cudagraph_bytes is not None or arguments.kv_pool_bytes is not None:
        return sizing.pool(non_torch_bytes, arguments.cudagraph_bytes or 0)
    pool = sizing.pool(non_torch_bytes, 0)
    recorded = sizing.recorded
    graphs = predicted_cudagraphs(
        sizing.version,
        sizing.engine,
        pool.max_num_seqs,
        enforce_eager=arguments.enforce_eager,
        platform=recorded.platform if recorded is not None else "cuda",
        tp=sizing.plan.inputs.tp,
        max_num_batched_tokens=pool.max_num_batched_tokens,
    )
    if graphs.bytes:
        pool = sizing.pool(non_torch_bytes, graphs.bytes)
    notes.append(f"CUDA graphs {_g(graphs.bytes)} GiB PREDICTED: {graphs.source}")
    return pool
