"""Automatic tracking inside transformers programs (runs in the experiment process; standard library only).

`install(agent)` puts a post-import hook on `sys.meta_path`. memsight never imports transformers or torch
itself: when the *program* imports `transformers.modeling_utils` / `transformers.cache_utils`, the hook
patches, right after the module has run,

* `PreTrainedModel.post_init` (the last line of every transformers model's `__init__`, so
  `from_pretrained`, `from_config`, the `Auto*` classes and a direct `LlamaForCausalLM(config)` all pass
  through it): the model is tracked as weights (a weak reference: tracking never keeps it alive), and a
  forward pre-/post-hook pair goes on it for the prefill/decode phases. A model built inside another one
  (LlamaModel inside LlamaForCausalLM) is dropped from the top-level list when its parent finishes, so
  nothing is hooked twice; the agent counts each tensor once across everything tracked anyway.
* `__init__` of `Cache` and of every `Cache` subclass the installed `cache_utils` defines (DynamicCache,
  StaticCache, the sliding, hybrid, quantized, offloaded, encoder-decoder ones: whatever the version has):
  the cache is tracked as KV while it lives. A cache handed to a tracked model's forward as `past_key_values`
  is tracked too (covers a cache class defined outside transformers).

A program that never imports transformers pays one dictionary lookup per import. A hook that fails to install
(a transformers version with other internals) is disabled, and its status ("failed: ...") is published in the
agent's info file, shown on the Live screen and kept in the recording. Nothing here raises into the program:
each patched function runs the original first and swallows (and counts) its own errors.

Phases: a forward call whose input holds more than one new token per sequence is a *prefill*, one new token
a *decode* step. Around each call the pre-hook reads the process's peak counter and its current level, the
post-hook reads the peak counter again: a new high set inside the call belongs to that call, and its size
above the call's entry level is the call's activation peak. Counters: on CUDA the caching allocator's
`allocated_bytes.all.peak` (what max_memory_allocated reports), on the CPU the kernel's RSS high-water mark
(getrusage ru_maxrss, KiB on Linux) above the RSS at entry. Neither counter is ever reset here. A call that
stays under an earlier high leaves no trace in the counter: it is counted as "unresolved", and the phase's
figure is the largest spike among the calls that did set a new high (a lower bound of the phase's true peak).
"""

from __future__ import annotations

import importlib.abc
import os
import resource
import sys
import threading
import time
import weakref
from typing import Any

WATCHED = ("transformers.modeling_utils", "transformers.cache_utils")
HOOKS = ("models", "caches", "phases")
PHASES = ("prefill", "decode")


def enabled_by_env() -> bool:
    return os.environ.get("MEMSIGHT_AUTOTRACK", "1").strip().lower() not in ("0", "off", "false", "no")


class _PatchingLoader(importlib.abc.Loader):
    """Wraps a watched module's loader: runs it, then calls `after(module)`."""

    def __init__(self, loader: Any, after) -> None:
        self._loader = loader
        self._after = after

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        self._after(module)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """On sys.meta_path: for a watched name, finds the module with the other finders and wraps its loader."""

    def __init__(self, tracker: AutoTracker) -> None:
        self._tracker = tracker
        self._busy = threading.local()

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in WATCHED or getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        except Exception:
            return None
        finally:
            self._busy.on = False
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        tracker = self._tracker
        spec.loader = _PatchingLoader(spec.loader, lambda module: tracker.patch(fullname, module))
        return spec


class PhaseStats:
    """Per phase: calls, the largest spike above entry among calls that set a new peak, when, and how many
    calls stayed under an earlier high. Written by the program's thread (in the hooks), read by the agent's:
    each phase's figures are replaced as one tuple."""

    __slots__ = ("counter", "figures")

    def __init__(self) -> None:
        self.counter = ""
        # phase -> (calls, tokens of the last call, peak bytes or -1, peak time or nan, unresolved calls)
        self.figures: dict[str, tuple[int, int, int, float, int]] = {}

    def record(self, phase: str, tokens: int, spike: int | None, t: float) -> None:
        calls, _, peak, peak_t, unresolved = self.figures.get(phase, (0, 0, -1, float("nan"), 0))
        if spike is None:
            unresolved += 1
        elif spike > peak:
            peak, peak_t = spike, t
        self.figures[phase] = (calls + 1, tokens, peak, peak_t, unresolved)

    def as_json(self) -> dict[str, dict]:
        out = {}
        for phase, (calls, tokens, peak, peak_t, unresolved) in list(self.figures.items()):
            out[phase] = {
                "calls": calls,
                "last_tokens": tokens,
                "peak_bytes": peak if peak >= 0 else None,
                "peak_t": None if peak < 0 else peak_t,
                "unresolved_calls": unresolved,
            }
        return out


class _Probe:
    """Reads (entry level, peak counter) for a model's device without resetting anything."""

    def __init__(self, tracker: AutoTracker, model: Any) -> None:
        self.device = -1
        self.cuda = None
        try:
            first = next(iter(model.parameters()), None)
            if first is not None and first.is_cuda:
                self.device = int(first.get_device())
        except Exception:
            self.device = -1
        agent = tracker.agent()
        if self.device >= 0 and agent is not None and agent.cuda.state() == "ok":
            self.cuda = agent.cuda
        self._statm = tracker.statm_fd
        self._page = tracker.page

    @property
    def counter(self) -> str:
        if self.cuda is not None:
            return "CUDA allocator peak (allocated_bytes.all.peak, never reset by memsight)"
        return "process RSS high-water mark (ru_maxrss, never reset by memsight) above the RSS at entry"

    def read(self) -> tuple[int, int]:
        if self.cuda is not None:
            stats = self.cuda.memory_stats(self.device)
            current = stats.get("allocated_bytes.all.current", 0)
            return int(current), int(stats.get("allocated_bytes.all.peak", 0))
        high = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        level = high
        if self._statm is not None:
            level = int(os.pread(self._statm, 128, 0).split()[1]) * self._page
        return level, high

    def peak(self) -> int:
        if self.cuda is not None:
            return int(self.cuda.memory_stats(self.device).get("allocated_bytes.all.peak", 0))
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _new_tokens(args: tuple, kwargs: dict) -> tuple[int, int] | None:
    """(batch, new tokens per sequence) of a forward call, from input_ids or inputs_embeds."""
    x = kwargs.get("input_ids")
    if x is None:
        x = kwargs.get("inputs_embeds")
    if x is None and args:
        x = args[0]
    shape = getattr(x, "shape", None)
    if shape is None or len(shape) < 2:
        return None
    return int(shape[0]), int(shape[1])


class AutoTracker:
    """The hooks of one agent. Holds the agent weakly; every entry point swallows its own errors."""

    def __init__(self, agent: Any) -> None:
        self.agent = weakref.ref(agent)
        self.status: dict[str, str] = dict.fromkeys(HOOKS, "waiting: transformers not imported")
        self.versions: dict[str, str] = {}
        self.phases = PhaseStats()
        self.errors = 0
        self.last_error = ""
        self._finder: _PostImportFinder | None = None
        self._models: weakref.WeakSet = weakref.WeakSet()  # top-level tracked models (hooked)
        self._caches_seen: weakref.WeakSet = weakref.WeakSet()
        self._handles: dict[int, tuple] = {}
        self._probes: dict[int, _Probe] = {}
        self._entry = threading.local()
        self._cache_classes: list[str] = []
        self.page = os.sysconf("SC_PAGE_SIZE")
        try:
            self.statm_fd: int | None = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self.statm_fd = None

    # ---- install
    def install(self) -> None:
        if self._finder is not None:
            return
        self._finder = _PostImportFinder(self)
        sys.meta_path.insert(0, self._finder)
        for name in WATCHED:  # imported before the agent started (a notebook calling agent.start() late)
            module = sys.modules.get(name)
            if module is not None:
                self.patch(name, module)

    def uninstall(self) -> None:
        finder, self._finder = self._finder, None
        if finder is not None:
            try:
                sys.meta_path.remove(finder)
            except ValueError:
                pass

    def _fail(self, hook: str, exc: BaseException) -> None:
        self.status[hook] = f"failed: {type(exc).__name__}: {exc}"[:200]

    def _error(self, exc: BaseException) -> None:
        self.errors += 1
        self.last_error = f"{type(exc).__name__}: {exc}"[:200]

    def patch(self, name: str, module: Any) -> None:
        version = getattr(sys.modules.get("transformers"), "__version__", None)
        if version:
            self.versions["transformers"] = str(version)
        if name == "transformers.modeling_utils":
            try:
                self._patch_models(module)
                self.status["models"] = "ok"
                self.status["phases"] = "ok"
            except Exception as exc:
                self._fail("models", exc)
                self._fail("phases", exc)
        elif name == "transformers.cache_utils":
            try:
                self._patch_caches(module)
                self.status["caches"] = "ok"
            except Exception as exc:
                self._fail("caches", exc)

    def _patch_models(self, module: Any) -> None:
        cls = getattr(module, "PreTrainedModel", None)
        if cls is None:
            raise AttributeError("transformers.modeling_utils has no PreTrainedModel")
        original = cls.__dict__.get("post_init")
        if original is None or not callable(original):
            raise AttributeError("PreTrainedModel has no post_init")
        if getattr(original, "__memsight__", False):
            return
        tracker = self

        def post_init(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            if not _built_inside_another(self, cls):  # its parent's post_init tracks it, whole
                tracker.on_model(self)
            return result

        post_init.__memsight__ = True
        post_init.__wrapped__ = original
        post_init.__name__ = original.__name__
        post_init.__doc__ = original.__doc__
        cls.post_init = post_init

    def _patch_caches(self, module: Any) -> None:
        base = getattr(module, "Cache", None)
        if not isinstance(base, type):
            raise AttributeError("transformers.cache_utils has no Cache class")
        classes = [c for c in vars(module).values() if isinstance(c, type) and issubclass(c, base)]
        patched = []
        for cls in classes:
            original = cls.__dict__.get("__init__")
            if original is None or getattr(original, "__memsight__", False):
                continue
            cls.__init__ = self._wrap_cache_init(original)
            patched.append(cls.__name__)
        self._cache_classes = sorted(c.__name__ for c in classes)

    def _wrap_cache_init(self, original):
        tracker = self

        def __init__(self, *args, **kwargs):  # noqa: N807
            original(self, *args, **kwargs)
            tracker.on_cache(self)

        __init__.__memsight__ = True
        __init__.__wrapped__ = original
        __init__.__doc__ = original.__doc__
        return __init__

    @property
    def cache_classes(self) -> list[str]:
        return list(self._cache_classes)

    # ---- events (the program's thread)
    def on_model(self, model: Any) -> None:
        try:
            agent = self.agent()
            if agent is None:
                return
            for child in list(self._models):  # built inside this one: not top level any more
                if child is not model and _contains(model, child):
                    self._unhook(child)
            if model in self._models:
                return
            agent.track_model(model, auto=True)
            self._models.add(model)
            self._hook(model)
        except Exception as exc:
            self._error(exc)

    def on_cache(self, cache: Any) -> None:
        try:
            if cache in self._caches_seen:
                return
            agent = self.agent()
            if agent is None:
                return
            self._caches_seen.add(cache)
            agent.track_kv(cache, auto=True)
        except Exception as exc:
            self._error(exc)

    def _hook(self, model: Any) -> None:
        if self.status.get("phases") not in ("ok", None) and not self.status["phases"].startswith("waiting"):
            return
        try:
            pre = model.register_forward_pre_hook(self._pre_forward, with_kwargs=True)
            post = model.register_forward_hook(self._post_forward, with_kwargs=True, always_call=True)
        except Exception as exc:
            self._fail("phases", exc)
            return
        self._handles[id(model)] = (weakref.ref(model), pre, post)

    def _unhook(self, model: Any) -> None:
        self._models.discard(model)
        entry = self._handles.pop(id(model), None)
        self._probes.pop(id(model), None)
        if entry is not None:
            for handle in entry[1:]:
                try:
                    handle.remove()
                except Exception:
                    pass
        agent = self.agent()
        if agent is not None:
            agent.mark_nested(model)

    def top_models(self) -> list[Any]:
        return list(self._models)

    def _probe(self, model: Any) -> _Probe:
        probe = self._probes.get(id(model))
        if probe is None:
            probe = self._probes[id(model)] = _Probe(self, model)
            self.phases.counter = probe.counter
        return probe

    def _pre_forward(self, module, args, kwargs):
        try:
            cache = kwargs.get("past_key_values")
            if cache is not None and not isinstance(cache, (tuple, list)) and cache not in self._caches_seen:
                self.on_cache(cache)
            shape = _new_tokens(args, kwargs)
            probe = self._probe(module)
            level, high = probe.read()
            stack = getattr(self._entry, "stack", None)
            if stack is None:
                stack = self._entry.stack = []
            stack.append((shape, level, high, probe))
        except Exception as exc:
            self._error(exc)
        return None

    def _post_forward(self, module, args, kwargs, output):
        try:
            stack = getattr(self._entry, "stack", None)
            if not stack:
                return None
            shape, level, high, probe = stack.pop()
            if shape is None:
                return None
            after = probe.peak()
            phase = "prefill" if shape[1] > 1 else "decode"
            spike = max(0, after - level) if after > high else None
            self.phases.record(phase, shape[0] * shape[1], spike, time.time())
        except Exception as exc:
            self._error(exc)
        return None

    def rebind(self, agent: Any) -> None:
        """After fork: report to the child's agent, read the child's own /proc/self/statm."""
        self.agent = weakref.ref(agent)
        self._probes.clear()
        self._entry = threading.local()
        try:
            self.statm_fd = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self.statm_fd = None

    def close(self) -> None:
        self.uninstall()
        fd, self.statm_fd = self.statm_fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


def _built_inside_another(model: Any, base: type) -> bool:
    """True while `model` is being built inside another model's __init__ (LlamaModel inside
    LlamaForCausalLM): tracked now, a tick could count the parent's half-built weights."""
    try:
        frame = sys._getframe(2)
        depth = 0
        while frame is not None and depth < 200:
            if frame.f_code.co_name == "__init__":
                owner = frame.f_locals.get("self")
                if owner is not model and isinstance(owner, base):
                    return True
            frame = frame.f_back
            depth += 1
    except Exception:
        return False
    return False


def _contains(parent: Any, child: Any) -> bool:
    modules = getattr(parent, "modules", None)
    if modules is None:
        return False
    return any(m is child for m in modules())
