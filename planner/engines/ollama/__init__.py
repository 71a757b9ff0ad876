"""Ollama behind the engine interface. Where each part of Ollama's memory is computed:

- defaults.py   num_ctx, num_parallel, the KV cache type and flash attention, release by release
- cache.py      Ollama's own engine: the KV cache per layer (padding, sliding windows) and where the weights
                and the cache go per device
- log.py        the server log reader (the scheduler's estimate, the runner's settings, what it allocated)
- explain.py    a log beside the prediction (the shared worksheet)
- live.py       the buckets for the Live screen

llama.cpp's own lines inside an Ollama log (the llama runner) are llama.cpp's: planner.engines.llamacpp.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.engines.base import Engine


class Ollama(Engine):
    name = "ollama"
    title = "Ollama"

    def recognizes(self, text: str) -> bool:
        from planner.engines.ollama.log import looks_like_ollama  # noqa: PLC0415

        return looks_like_ollama(text)

    def read_log(self, text: str) -> Any:
        from planner.engines.ollama.log import parse_log  # noqa: PLC0415

        return parse_log(text)

    def new_reader(self) -> Any:
        from planner.engines.ollama.log import LogReader  # noqa: PLC0415

        return LogReader()

    def log_problem(self, log: Any) -> str | None:
        from planner.engines.ollama.explain import stage_problem  # noqa: PLC0415

        return stage_problem(log)

    def explain(self, log: Any, options: Mapping[str, Any]) -> Any:
        from planner.engines.ollama.explain import explain  # noqa: PLC0415

        return explain(log, options)

    def live_buckets(self, log: Any) -> Any:
        from planner.engines.ollama.live import live_buckets  # noqa: PLC0415

        return live_buckets(log)

    def predict(self, spec: Any, arguments: Any, plan: Any = None) -> Any:
        from planner.engines.ollama.plan import predict  # noqa: PLC0415

        return predict(spec, arguments)


ENGINE = Ollama()
