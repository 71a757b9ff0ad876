"""SGLang behind the engine interface. Where each part of SGLang's memory is computed:

- defaults.py   mem_fraction_static, chunked_prefill_size, cuda_graph_max_bs and the CUDA-graph batch sizes,
                release by release (the wheels' server_args.py / cuda_graph_runner.py)
- pool.py       the token pool: the budget mem_fraction_static leaves after the weights, the per-token cell
                (MHA and MLA), page alignment, K/V buffers, the request pool, max_running_requests
- log.py        the server log reader (every release's wording)
- explain.py    a log beside the prediction (the shared worksheet)
- plan.py       `memsight plan --engine sglang`

This module stays light: the parts are imported when a method needs them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.engines.base import Engine


class SGLang(Engine):
    name = "sglang"
    title = "SGLang"

    def recognizes(self, text: str) -> bool:
        from planner.engines.sglang.log import looks_like_sglang  # noqa: PLC0415

        return looks_like_sglang(text)

    def read_log(self, text: str) -> Any:
        from planner.engines.sglang.log import parse_log  # noqa: PLC0415

        return parse_log(text)

    def log_problem(self, log: Any) -> str | None:
        from planner.engines.sglang.explain import stage_problem  # noqa: PLC0415

        return stage_problem(log)

    def explain(self, log: Any, options: Mapping[str, Any]) -> Any:
        """options: model, version (an SGLang release), total_bytes (the GPU's memory, for the default
        mem_fraction_static), given (server arguments as flags: GIVEN_KEYS)."""
        from planner.engines.sglang.explain import explain  # noqa: PLC0415

        return explain(log, options)

    def new_reader(self) -> Any:
        from planner.engines.sglang.log import LogReader  # noqa: PLC0415

        return LogReader()

    def live_buckets(self, log: Any) -> Any:
        from planner.engines.sglang.live import live_buckets  # noqa: PLC0415

        return live_buckets(log)

    def predict(self, spec: Any, arguments: Any, plan: Any = None) -> Any:
        from planner.engines.sglang.plan import predict  # noqa: PLC0415

        return predict(spec, arguments)


ENGINE = SGLang()
