"""vLLM behind the engine interface. Where each part of vLLM's memory is computed:

- version.py      the versions read, the default one, V0/V1 by version
- scheduler.py    max_num_batched_tokens / max_num_seqs as each version defaults them
- activation.py   the profile run's PyTorch activation peak (forward, logits, sampler, cuBLAS workspace)
- hybrid.py       Mamba / linear-attention state pages unified with attention pages
- pool.py         the KV pool, blocks, KV tokens and max concurrency per rank (vllm_pool)
- overheads.py    start-up overheads: non-torch memory by era, the CUDA-graph estimate, device totals
- moe.py          MoE expert layouts (MXFP4 padding), fused-MoE buffers, the rotary cos/sin cache
- encoder.py      a vision-language checkpoint's tower and the encoder's profile run
- log.py          the start-up log reader (every version's wording)
- explain.py      a log beside the prediction (the shared worksheet)
- plan.py         `memsight plan --engine vllm`
- startup.py      the start-up admission rule: will the requested utilization pass the free-memory check

This module stays light: the parts are imported when a method needs them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.engines.base import Engine


class VLLM(Engine):
    name = "vllm"
    title = "vLLM"

    def recognizes(self, text: str) -> bool:
        # A line of vLLM's own, or an error a vLLM process wrote: both are for vLLM's log_problem to name.
        log = self.read_log(text)
        return log.is_vllm or log.error is not None

    def read_log(self, text: str) -> Any:
        from planner.engines.vllm.log import parse_log  # noqa: PLC0415

        return parse_log(text)

    def new_reader(self) -> Any:
        from planner.engines.vllm.log import LogReader  # noqa: PLC0415

        return LogReader()

    def log_problem(self, log: Any) -> str | None:
        from planner.engines.vllm.explain import stage_problem  # noqa: PLC0415

        return stage_problem(log)

    def explain(self, log: Any, options: Mapping[str, Any]) -> Any:
        """options: model, version, gpu, total_bytes, given (explain.explain's keywords)."""
        from planner.engines.vllm.explain import explain, to_worksheet  # noqa: PLC0415

        return to_worksheet(explain(log, **options))

    def predict(self, spec: Any, arguments: Any, plan: Any = None) -> Any:
        from planner.engines.vllm.plan import predict  # noqa: PLC0415

        if plan is None:
            raise ValueError("vLLM's pool is predicted for a plan (its machine and per-rank weights)")
        return predict(spec, arguments, plan)


ENGINE = VLLM()
