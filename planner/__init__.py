"""memsight's analytic side: exact memory arithmetic for Hugging Face decoders (standard library only).

Everything here is importable from its submodule too; those are the stable homes:
spec/catalog (what the model is), params/formats/kv/checkpoint (what it weighs), topology/activations/
budget/machines (where it goes on a box), engines (each serving engine's own memory: engines/vllm carves
vLLM's pool), work (compute and traffic).
"""

from __future__ import annotations

import importlib

# Exported name -> home module. Loaded on first use (PEP 562), so `from planner.errors import PlannerError`
# in the CLI does not pay for the whole planner.
_HOMES = {
    "AttentionSpec": "planner.spec",
    "CheckpointInfo": "planner.checkpoint",
    "GB": "planner.units",
    "GiB": "planner.units",
    "LayerSpec": "planner.spec",
    "Machine": "planner.machines",
    "ModelSpec": "planner.spec",
    "ParamCount": "planner.params",
    "Plan": "planner.budget",
    "PlanInputs": "planner.budget",
    "PlannerError": "planner.errors",
    "RankPlan": "planner.budget",
    "VLLMPool": "planner.engines.vllm.pool",
    "WeightBytes": "planner.formats",
    "attention_prefill_flops": "planner.work",
    "catalog_names": "planner.catalog",
    "count_params": "planner.params",
    "decode_traffic": "planner.work",
    "format_info": "planner.formats",
    "get_machine": "planner.machines",
    "kv_bytes_for_sequence": "planner.kv",
    "kv_bytes_per_token": "planner.kv",
    "kv_bytes_per_token_beyond_window": "planner.kv",
    "kv_dtype_bytes": "planner.kv",
    "kv_heads_per_rank": "planner.kv",
    "layer_kv_bytes": "planner.kv",
    "load_spec": "planner.spec",
    "machine_names": "planner.machines",
    "make_plan": "planner.budget",
    "plan_to_json": "planner.budget",
    "read_checkpoint": "planner.checkpoint",
    "roofline_gflops": "planner.work",
    "state_bytes_per_sequence": "planner.kv",
    "vllm_pool": "planner.engines.vllm.pool",
    "weight_bytes": "planner.formats",
    "weight_formats": "planner.formats",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    try:
        home = _HOMES[name]
    except KeyError:
        raise AttributeError(f"module 'planner' has no attribute {name!r}") from None
    return getattr(importlib.import_module(home), name)
