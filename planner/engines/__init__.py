"""Serving engines behind one interface (planner/engines/base.py), and their registry.

Each engine is a package here: planner/engines/vllm/, planner/engines/llamacpp/, ... Its package's ENGINE is
the Engine object; this registry imports an engine only when it is asked for, so reading the list is free.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from planner.errors import PlannerError

if TYPE_CHECKING:
    from planner.engines.base import Engine

# name -> the package whose ENGINE implements it, in the order logs are recognized: an engine whose log
# embeds another's lines comes before that one (Ollama's server log carries llama.cpp's), and vLLM comes last
# because it also claims a log whose only line is a start-up error (to say where it died).
_PACKAGES: dict[str, str] = {
    "sglang": "planner.engines.sglang",  # SGLang's log carries vLLM's import lines (its custom ops)
    "ollama": "planner.engines.ollama",  # Ollama's server log carries llama.cpp's lines
    "llamacpp": "planner.engines.llamacpp",
    "vllm": "planner.engines.vllm",
}


# engines whose own logs carry another's lines: those lines are part of the one start, not a second log
_EMBEDS: dict[str, tuple[str, ...]] = {"sglang": ("vllm",), "ollama": ("llamacpp",)}


def engine_names() -> tuple[str, ...]:
    return tuple(_PACKAGES)


def get_engine(name: str) -> Engine:
    try:
        package = _PACKAGES[name]
    except KeyError:
        raise PlannerError(f"unknown engine {name!r}; known: {', '.join(_PACKAGES)}") from None
    return importlib.import_module(package).ENGINE


def recognize(text: str) -> Engine:
    """The engine whose start-up log `text` is; PlannerError (one line) when it is no engine's."""
    for name in _PACKAGES:
        engine = get_engine(name)
        if engine.recognizes(text):
            return engine
    titles = ", ".join(get_engine(name).title for name in _PACKAGES)
    raise PlannerError(
        f"not a startup log memsight reads ({titles}): no line of theirs with a memory figure, engine "
        "configuration or version"
    )


def also_recognized(text: str, engine: Engine) -> tuple[Engine, ...]:
    """The other engines whose start-up lines `text` also holds (two runs' logs in one file): explain reads
    the first engine's and says so, rather than leave the other run out unsaid."""
    embedded = _EMBEDS.get(engine.name, ())
    others = (get_engine(name) for name in _PACKAGES if name != engine.name and name not in embedded)
    return tuple(other for other in others if other.recognizes(text))
