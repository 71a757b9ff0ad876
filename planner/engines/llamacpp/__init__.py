"""llama.cpp behind the engine interface. Where each part of llama.cpp's memory is computed:

- kv.py        the KV cache: cells from n_ctx / -np / --kv-unified, K/V types, sliding-window caches
- model.py     the model buffers per device: what -ngl puts on the GPU, what stays in host memory
- compute.py   the GPU compute buffer (APPROXIMATE: the reserve graph's largest tensors)
- predict.py   the three together for one model and its arguments
- plan.py      `memsight plan FILE.gguf --engine llamacpp` (the GGUF's header)
- log.py       the start-up log reader (llama-server, llama-cli; every build's wording)
- explain.py   a log beside the prediction (the shared worksheet)

Read in ggml-org/llama.cpp@0c1e57098, the llama.cpp llama-cpp-python 0.3.36 vendors. This module stays light.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.engines.base import Engine


class LlamaCpp(Engine):
    name = "llamacpp"
    title = "llama.cpp"

    def recognizes(self, text: str) -> bool:
        return self.read_log(text).is_llamacpp

    def read_log(self, text: str) -> Any:
        from planner.engines.llamacpp.log import parse_log  # noqa: PLC0415

        return parse_log(text)

    def new_reader(self) -> Any:
        from planner.engines.llamacpp.log import LogReader  # noqa: PLC0415

        return LogReader()

    def live_buckets(self, log: Any) -> Any:
        from planner.engines.llamacpp.live import live_buckets  # noqa: PLC0415

        return live_buckets(log)

    def planned_buckets(self, sheet: Any) -> Any:
        from planner.engines.llamacpp.live import planned_buckets  # noqa: PLC0415

        return planned_buckets(sheet)

    def log_problem(self, log: Any) -> str | None:
        from planner.engines.llamacpp.explain import stage_problem  # noqa: PLC0415

        return stage_problem(log)

    def explain(self, log: Any, options: Mapping[str, Any]) -> Any:
        """options: model (a GGUF file whose tensor table replaces the log's description of it)."""
        from planner.engines.llamacpp.explain import explain, to_worksheet  # noqa: PLC0415

        return to_worksheet(explain(log, model=options.get("model")))

    def predict(self, spec: Any, arguments: Any, plan: Any = None) -> Any:
        """spec: the GGUF file's path; arguments: planner.engines.llamacpp.predict.LlamaCppArgs."""
        from planner.engines.llamacpp.plan import predict  # noqa: PLC0415

        return predict(spec, arguments)


ENGINE = LlamaCpp()
