"""memsight bootstrap: `memsight run` puts this directory first on PYTHONPATH.

Python imports `sitecustomize` at start-up; this one starts the in-process agent (collectors.agent) when
MEMSIGHT_AGENT=1, then runs whatever sitecustomize the environment had (the next one on sys.path), so
nothing the user relied on is lost. Child processes inherit PYTHONPATH and the variable, so vLLM's engine
core and multiprocessing workers get an agent of their own. Nothing here may raise into the program.
"""

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))

try:
    import collectors.agent as _memsight_agent

    _memsight_agent.start_from_env()
except Exception as _exc:  # never stop the user's program from starting
    print(f"memsight: agent not started: {type(_exc).__name__}: {_exc}", file=sys.stderr)


def _chain() -> None:
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    ours = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        print(
            f"memsight: the environment's sitecustomize failed: {type(exc).__name__}: {exc}", file=sys.stderr
        )
        if ours is not None:
            sys.modules["sitecustomize"] = ours


try:
    _chain()
except Exception as _exc:
    print(f"memsight: could not chain sitecustomize: {_exc}", file=sys.stderr)
