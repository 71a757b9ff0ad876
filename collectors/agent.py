"""The in-process agent: a daemon thread inside the experiment process (standard library only).

Start it with `memsight run -- CMD` (a bootstrap on PYTHONPATH calls `start_from_env()`), or in a
notebook / script:

    import collectors.agent as agent
    agent.start()                       # 10 Hz by default
    agent.track_model(model)            # parameters + buffers -> the weights bucket
    agent.track_kv(cache)               # DynamicCache / StaticCache / any object holding tensors -> KV
    agent.mark_step("prefill")          # step boundaries; reset_peak=True also resets torch's peak counter
    agent.snap("after load")            # one line: alloc, reserved, peak, cuda_free, cuda_total, ... (GiB)

Every tick it records, per CUDA device this process uses: the allocator's stats, read once (through
memory_stats_as_nested_dict(), without memory_stats()' Python flattening; allocated, reserved, peak,
inactive split, alloc retries, OOMs, segments, pools are derived from them), mem_get_info at most once
a second (it synchronizes), plus the process's RSS and the bytes of tracked objects. It only looks at
torch if the process imported it (`sys.modules`) and only at torch.cuda once the process initialized CUDA
itself: it never imports torch, never creates a CUDA context, never resets peak counters on its own.

Records go to a shared-memory ring file (collectors/agent_format.py) that any later monitor can read.
The agent never blocks the host program (no locks shared with it), never raises into it (failures are
counted and reported once on stderr), and removes its file at exit.
"""

from __future__ import annotations

import atexit
import json
import math
import mmap
import os
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

from collectors import agent_format as fmt
from collectors.torch_stats import CudaSource, TorchCuda, derive

GiB = 2**30
_NAN = float("nan")
_FIELD_INDEX = {name: i for i, name in enumerate(fmt.RECORD_FIELDS)}


# ------------------------------------------------------------------------------------ tensor bytes
def _tensor_type() -> type | None:
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None) if torch is not None else None


def _device_index(tensor: Any) -> int:
    # get_device() is -1 for CPU tensors and the CUDA index otherwise; much cheaper than building .device
    return int(tensor.get_device()) if tensor.is_cuda else -1


def tensor_nbytes(tensor: Any) -> int:
    return int(tensor.nbytes)


def model_bytes_split(model: Any, seen: set[int] | None = None) -> tuple[dict[int, int], dict[int, int]]:
    """(parameters, buffers) of a torch.nn.Module, bytes per device (-1 = not on a CUDA device). Each tensor
    once (tied weights once; with a shared `seen`, once across several models). Tensors still on the meta
    device (a model being loaded) hold no memory and are skipped."""
    seen = set() if seen is None else seen
    parts: list[dict[int, int]] = []
    for tensors in (model.parameters(), model.buffers()):
        out: dict[int, int] = {}
        for t in tensors:
            if id(t) in seen or getattr(t, "is_meta", False):
                continue
            seen.add(id(t))
            d = _device_index(t)
            out[d] = out.get(d, 0) + tensor_nbytes(t)
        parts.append(out)
    return parts[0], parts[1]


def model_bytes_by_device(model: Any, seen: set[int] | None = None) -> dict[int, int]:
    """Parameters + buffers of a torch.nn.Module (each tensor once, tied weights once), bytes per device
    (-1 = not on a CUDA device)."""
    params, buffers = model_bytes_split(model, seen)
    return _add(params, buffers)


def _add(*parts: dict[int, int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for part in parts:
        for device, size in part.items():
            out[device] = out.get(device, 0) + size
    return out


def kv_tensors(cache: Any, tensor_type: type, depth: int = 0) -> Iterator[Any]:
    """Tensors held by a KV cache: transformers 5.x `cache.layers[i].keys/.values`, 4.x
    `key_cache`/`value_cache` lists, legacy tuples of (k, v), or any object whose attributes are tensors
    or lists of them (two levels deep). Layers not yet initialized (None) are skipped."""
    if cache is None or depth > 4:
        return
    if isinstance(cache, tensor_type):
        yield cache
        return
    if isinstance(cache, (list, tuple)):
        for item in cache:
            yield from kv_tensors(item, tensor_type, depth + 1)
        return
    if isinstance(cache, dict):
        for item in cache.values():
            yield from kv_tensors(item, tensor_type, depth + 1)
        return
    layers = getattr(cache, "layers", None)
    if isinstance(layers, (list, tuple)):  # transformers >= 4.56 / 5.x Cache
        for layer in layers:
            yield from kv_tensors(getattr(layer, "keys", None), tensor_type, depth + 1)
            yield from kv_tensors(getattr(layer, "values", None), tensor_type, depth + 1)
        return
    if hasattr(cache, "key_cache") and hasattr(cache, "value_cache"):  # transformers 4.x
        yield from kv_tensors(cache.key_cache, tensor_type, depth + 1)
        yield from kv_tensors(cache.value_cache, tensor_type, depth + 1)
        return
    attributes = getattr(cache, "__dict__", None)
    if attributes is not None and depth < 2:
        for value in list(attributes.values()):
            if isinstance(value, (tensor_type, list, tuple, dict)) or hasattr(value, "__dict__"):
                yield from kv_tensors(value, tensor_type, depth + 1)


def kv_bytes_by_device(cache: Any, seen: set[int] | None = None) -> dict[int, int]:
    return cache_summary(cache, seen)["bytes"]


def cache_summary(cache: Any, seen: set[int] | None = None) -> dict[str, Any]:
    """A cache's bytes per device, and what it holds: batch, token slots per layer (the length of each layer's
    key tensor: for a static cache its allocated length), read from the same tensor objects the bytes come
    from, so bytes and tokens describe one moment per layer. "structure": "layers" (transformers >= 4.56),
    "key_cache" (4.x lists), "tensors" (anything else: its tensors found by walking attributes)."""
    out: dict[str, Any] = {"bytes": {}, "batch": None, "layer_tokens": [], "seq_tokens": [], "layers": 0}
    out["structure"] = "tensors"
    tensor_type = _tensor_type()
    if tensor_type is None:
        return out
    seen = set() if seen is None else seen
    sizes: dict[int, int] = out["bytes"]

    def add(t: Any) -> None:
        if id(t) in seen:
            return
        seen.add(id(t))
        d = _device_index(t)
        sizes[d] = sizes.get(d, 0) + tensor_nbytes(t)

    layers = getattr(cache, "layers", None)
    seen_tokens: list[int | None] = []
    if isinstance(layers, (list, tuple)):
        out["structure"] = "layers"
        pairs = [(getattr(layer, "keys", None), getattr(layer, "values", None)) for layer in layers]
        seen_tokens = [_tokens_seen(layer) for layer in layers]
    elif hasattr(cache, "key_cache") and hasattr(cache, "value_cache"):
        out["structure"] = "key_cache"
        pairs = list(zip(list(cache.key_cache), list(cache.value_cache), strict=False))
    else:
        for t in kv_tensors(cache, tensor_type):
            add(t)
        return out
    out["layers"] = len(pairs)
    for i, (keys, values) in enumerate(pairs):
        if isinstance(keys, tensor_type) and keys.dim() >= 3 and keys.numel() > 0:
            # a layer read between its key and its value update is left out (the cache is not "settled")
            if not isinstance(values, tensor_type) or values.shape[-2:-1] == keys.shape[-2:-1]:
                out["layer_tokens"].append(int(keys.shape[-2]))
                length = seen_tokens[i] if i < len(seen_tokens) else None
                out["seq_tokens"].append(int(keys.shape[-2]) if length is None else length)
            if out["batch"] is None:
                out["batch"] = int(keys.shape[0])
        for part in (keys, values):
            for t in kv_tensors(part, tensor_type):
                add(t)
    # anything else the cache holds (quantized residuals, offload buffers...), each tensor once
    for t in kv_tensors(cache, tensor_type):
        add(t)
    return out


def _tokens_seen(layer: Any) -> int | None:
    """The tokens a sliding-window layer has seen (transformers 5's cumulative_length, an int on the
    dynamic layer, cumulative_length_int on the static one), where it holds only its window; None for any
    other layer (its key tensor's length is what it has seen), and never a tensor (reading a CUDA tensor's
    value would wait for the device)."""
    for name in ("cumulative_length_int", "cumulative_length"):
        value = getattr(layer, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


# ------------------------------------------------------------------------------------ /proc helpers
class _SelfRss:
    """This process's RSS from /proc/self/statm through a kept-open fd (a few microseconds).

    Read at most every `min_interval_s`: the read is a syscall that releases the GIL, and every release
    inside a tick costs the host thread a GIL hand-off (up to a switch interval of waiting for the agent to
    get it back). RSS moves slowly next to the allocator counters, so at 100 Hz it is reused between reads."""

    def __init__(self, min_interval_s: float = 0.1) -> None:
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._min_interval_s = min_interval_s
        self._last: int | None = None
        self._last_t = -math.inf
        try:
            self._fd: int | None = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self._fd = None

    def read(self) -> int | None:
        if self._fd is None:
            return None
        now = time.monotonic()
        if now - self._last_t < self._min_interval_s:
            return self._last
        try:
            self._last = int(os.pread(self._fd, 128, 0).split()[1]) * self._page
        except (OSError, ValueError, IndexError):
            self._last = None
        self._last_t = now
        return self._last

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _os_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _cmdline() -> str:
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return " ".join(sys.argv)


def sweep_dead_files(directory: str) -> int:
    """Remove ring files of processes that are gone (killed before their atexit ran); returns how many."""
    removed = 0
    if fmt.unsafe_dir_reason(directory) is not None:
        return 0  # another user's directory (or one others can write): never touched
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        key = fmt.parse_ring_file_name(name)
        if key is None or fmt.process_start_ticks(key[0]) == key[1]:
            continue
        path = os.path.join(directory, name)
        try:
            if os.lstat(path).st_uid != os.getuid():
                continue  # another user's file: never removed
            os.unlink(path)
            removed += 1
        except OSError:
            pass
        try:
            os.unlink(fmt.info_file_path(path))
        except OSError:
            pass
    return removed


# ------------------------------------------------------------------------------------ the agent
# Share of one core the agent's thread may use over time (ticks + wake-ups); see Agent.cpu_budget.
DEFAULT_CPU_BUDGET = 0.005
MAX_PROBLEMS = 10  # statuses kept in the info file (each a line on the Live screen)


class CpuCredit:
    """The agent thread's CPU budget as a credit: earned at `budget` CPU seconds per wall second, spent by
    each loop (tick + wake-up), capped at `cap_s` seconds' worth so cheap ticks cannot save up for a long
    burst. In debt, the next tick waits until the debt is paid back, so over time the thread's CPU share is
    the budget whatever a tick costs on this machine; never longer than `slowest_wait_s` (the heartbeat)."""

    def __init__(self, budget: float, slowest_wait_s: float, cap_s: float = 1.0) -> None:
        self.budget = budget
        self.slowest_wait_s = slowest_wait_s
        self.cap = budget * cap_s
        self.balance = 0.0  # CPU seconds

    def settle(self, cpu_spent_s: float, wall_elapsed_s: float) -> float:
        """Book one loop; the seconds to wait from now before the next tick (0: on schedule)."""
        self.balance = min(self.balance + self.budget * wall_elapsed_s - cpu_spent_s, self.cap)
        if self.balance >= 0:
            return 0.0
        return min(-self.balance / self.budget, self.slowest_wait_s)


class Agent:
    """One agent per process (use the module functions); tests may build their own with a CudaSource."""

    def __init__(
        self,
        hz: float = 10.0,
        directory: str | None = None,
        cuda: CudaSource | None = None,
        clock=time.time,
        fine_capacity: int = fmt.FINE_CAPACITY,
        coarse_capacity: int = fmt.COARSE_CAPACITY,
        coarse_step_s: float = fmt.COARSE_STEP_S,
        weights_refresh_s: float = 5.0,
        mem_info_interval_s: float = 1.0,
        kv_refresh_s: float = 0.1,
        cpu_budget: float = DEFAULT_CPU_BUDGET,
    ) -> None:
        if not hz > 0:
            raise ValueError(f"agent hz must be > 0, got {hz}")
        if not 0 <= cpu_budget < 1:
            raise ValueError(f"agent cpu_budget must be in [0, 1), got {cpu_budget}")
        self.hz = hz
        # The agent must never slow the experiment, and every wake-up does: it takes the GIL from the
        # experiment's thread, which then waits for it about as long as the agent's loop costs in CPU (on
        # a 2-vCPU VM a thread that only wakes at 100 Hz slowed a torch loop by 1.1%: bench/). So the
        # thread's own CPU (ticks + wake-ups) is held to this share of a core, a credit earned per wall
        # second and spent per loop: a rate the machine cannot afford degrades to the fastest one it can
        # (monitors show both rates). 0 turns the limit off.
        self.cpu_budget = cpu_budget
        self.effective_hz = hz
        self.directory = directory
        self.cuda: CudaSource = cuda if cuda is not None else TorchCuda()
        self._clock = clock
        self.fine_capacity = fine_capacity
        self.coarse_capacity = coarse_capacity
        self.coarse_step_s = coarse_step_s
        self.weights_refresh_s = weights_refresh_s
        self.mem_info_interval_s = mem_info_interval_s
        # walking a cache costs ~1 us per tensor: at most every kv_refresh_s (KV grows a token at a time)
        self.kv_refresh_s = kv_refresh_s
        self._init_sampler_state()
        self._init_tracking_state()
        self._init_status_state()

    def _init_sampler_state(self) -> None:
        """The sampler's state: the KV walk's last result, the ring file, the thread (nothing open yet)."""
        self._kv: dict[int, int] | None = None
        self._kv_t = -math.inf
        self.pid = os.getpid()
        self.path: str | None = None
        self._mm: mmap.mmap | None = None
        self._fine_count = 0
        self._coarse_count = 0
        self._window_start = _NAN
        self._window_best: dict[int, tuple[float, bytes]] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._rss = _SelfRss()

    def _init_tracking_state(self) -> None:
        """The models and caches tracked (by the script or automatically) and what was read of them."""
        self._models: list[weakref.ref] = []
        self._caches: list[Any] = []  # weakrefs where possible, else the object (lists of tensors)
        # ids of objects tracked automatically (collectors/autotrack.py), and models found nested in another
        self._auto: set[int] = set()
        self._nested: set[int] = set()
        self.autotrack: Any = None  # collectors.autotrack.AutoTracker once enable_autotrack() ran
        self.autotrack_note = "off"
        self._model_info: dict[int, dict] = {}  # per tracked model: its config etc. (read once)
        self._model_sizes: list[tuple[Any, dict[int, int], dict[int, int]]] = []
        self._cache_info: list[dict] = []
        self._largest: dict | None = None  # the cache summary holding the most bytes seen so far
        self._largest_bytes = 0
        self._untracked: list[str] = []

    def _init_status_state(self) -> None:
        """The info file's state, the slow readings' last values, the marked step and the problems seen."""
        self.info_path: str | None = None
        self.info_interval_s = 0.2
        self._info_t = -math.inf
        self._info_text = ""
        self._weights: dict[int, int] | None = None
        self._weights_t = -math.inf
        self._mem_info: dict[int, tuple[int, int]] = {}
        self._mem_info_t = -math.inf
        self._step = (0, "", _NAN)  # replaced as a whole, so the sampler thread reads a consistent tuple
        self._last_tick_cost = _NAN
        self.errors = 0
        self._error_reported = False
        # what went wrong that a reader would otherwise take for "no data" (a model's unreadable config, a
        # failed restart after fork, a failed last sample): published in the info file, shown on screen
        self.problems: list[str] = []
        self._last_records: dict[int, dict[str, float]] = {}
        self._recorded_step = 0  # the step index of the last tick's records (wait_recorded)

    # ---- lifecycle
    def open(self) -> str:
        """Create the ring file (0600, in a 0700 per-user directory)."""
        directory = fmt.ensure_private_dir(self.directory or fmt.default_agent_dir())
        start_ticks = fmt.process_start_ticks(self.pid) or 0
        sweep_dead_files(directory)
        path = os.path.join(directory, fmt.ring_file_name(self.pid, start_ticks))
        size = fmt.file_size(self.fine_capacity, self.coarse_capacity)
        try:
            os.unlink(path)  # a file left by a crashed process with our pid and start time cannot exist
        except FileNotFoundError:
            pass
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        mm[0 : fmt.HEADER_SIZE] = fmt.pack_header(
            self.pid,
            start_ticks,
            self._clock(),
            self.hz,
            _cmdline(),
            self.fine_capacity,
            self.coarse_capacity,
            self.coarse_step_s,
        )
        self._mm = mm
        self.path = path
        self.info_path = fmt.info_file_path(path)
        return path

    def enable_autotrack(self, note: str = "on") -> None:
        """Hook transformers when (if) the program imports it (collectors/autotrack.py)."""
        from collectors.autotrack import AutoTracker  # noqa: PLC0415

        if self.autotrack is None:
            self.autotrack = AutoTracker(self)
            self.autotrack.install()
        self.autotrack_note = note

    def start(self) -> Agent:
        if self._thread is not None:
            return self
        if self._mm is None:
            self.open()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="memsight-agent", daemon=True)
        self._thread.start()
        return self

    def stop(self, remove: bool = True) -> None:
        """Stop the thread, write a final record, mark the file closed and (by default) remove it."""
        thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)
        mm, path = self._mm, self.path
        if mm is None or os.getpid() != self.pid:
            return
        problem = ""
        try:
            self.tick()
        except Exception as exc:
            problem = f"the last sample at stop failed: {type(exc).__name__}: {exc}"
        try:
            self._flush_coarse()
            fmt.write_u64(mm, fmt.OFF_CLOSED, 1)
        except Exception as exc:
            problem = problem or f"closing the ring file failed: {type(exc).__name__}: {exc}"
        if problem:  # the file may go with the process: said on stderr, and in the info file when kept
            self.errors += 1
            self.note_problem(problem)
            try:
                self._publish(self._clock(), force=True)
            except Exception:
                pass  # the line below says it
            _say(f"memsight agent (pid {self.pid}): {problem}")
        self._mm = None
        try:
            mm.close()
        except (BufferError, ValueError):
            pass
        if remove and path:
            for name in (path, self.info_path):
                try:
                    if name:
                        os.unlink(name)
                except OSError:
                    pass
        if self.autotrack is not None:
            self.autotrack.close()
        self._rss.close()

    def _run(self) -> None:
        nominal = 1.0 / self.hz
        # never slower than 1 Hz (or the asked rate): the heartbeat tells a monitor we are alive, and one
        # heavy tick (a first walk of a large model) must not silence the agent for long
        credit = CpuCredit(self.cpu_budget, slowest_wait_s=max(nominal, 1.0)) if self.cpu_budget > 0 else None
        next_t = wall_before = time.monotonic()
        cpu_before = time.thread_time()
        loops = 0
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as exc:  # never let the thread die, never raise into the host
                self._report(exc)
            cpu_now, wall_now = time.thread_time(), time.monotonic()
            loops += 1
            next_t += nominal
            # the first tick creates the file and walks the tracked objects: start-up, not steady cost
            if credit is not None and loops > 1:
                wait = credit.settle(cpu_now - cpu_before, wall_now - wall_before)
                next_t = max(next_t, wall_now + wait)
                self.effective_hz = 1.0 / max(nominal, wait)
            cpu_before, wall_before = cpu_now, wall_now
            delay = next_t - time.monotonic()
            if delay < 0:  # we fell behind (host busy): skip missed ticks instead of bursting
                next_t = time.monotonic()
                delay = 0.0
            if self._stop.wait(delay):
                break

    def note_problem(self, text: str) -> None:
        """A status the monitor shows with this agent (collectors/agent_info.py `problems`); kept once."""
        text = text[:300]
        if text not in self.problems and len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)

    def _report(self, exc: BaseException) -> None:
        self.errors += 1
        if not self._error_reported:
            self._error_reported = True
            _say(f"memsight agent (pid {self.pid}): {type(exc).__name__}: {exc} (further errors counted)")

    # ---- tracking
    # The same object tracked twice (automatically and by an explicit call, or twice by hand) is held once;
    # tensors shared between tracked objects (a model inside another, a cache inside another) are counted
    # once per refresh (one `seen` set across all of them).
    def track_model(self, model: Any, auto: bool = False) -> None:
        if any(r() is model for r in list(self._models)):
            if not auto:
                self._auto.discard(id(model))
                self._nested.discard(id(model))
            return
        self._models.append(_ref(model))
        if auto:
            self._auto.add(id(model))
        self._weights_t = -math.inf

    def track_kv(self, cache: Any, auto: bool = False) -> None:
        if any(r() is cache for r in list(self._caches)):
            return
        self._caches.append(_ref(cache))
        if auto:
            self._auto.add(id(cache))
        self._kv_t = -math.inf

    def mark_nested(self, model: Any) -> None:
        """An automatically tracked model turned out to be part of another tracked one: not listed on its own
        (its tensors are the parent's)."""
        if id(model) in self._auto:
            self._nested.add(id(model))
            self._weights_t = -math.inf

    def untrack(self, obj: Any) -> None:
        self._models = [r for r in self._models if r() is not obj]
        self._caches = [r for r in self._caches if r() is not obj]
        self._weights_t = self._kv_t = -math.inf
        if not self._caches:
            self._kv = None

    def mark_step(self, label: str, reset_peak: bool = False) -> None:
        index = self._step[0] + 1
        self._kv_t = -math.inf  # the cache changes at step boundaries: re-walk it at the next tick
        if reset_peak and self.cuda.state() == "ok":
            for device in range(self.cuda.device_count()):
                self.cuda.reset_peak(device)
        self._step = (index, label, self._clock())

    def wait_recorded(self, timeout_s: float = 1.0) -> bool:
        """Wait (at most timeout_s) until a tick has written a record of the current step; False when the
        sampler thread is not running or did not tick in time. For harnesses whose steps can be shorter than a
        tick and must each be in the ring (memsight lab); an experiment's own code never needs to wait."""
        index = self._step[0]
        deadline = time.monotonic() + timeout_s
        while True:
            thread = self._thread
            if thread is None or not thread.is_alive():
                return False
            if self._recorded_step >= index:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)

    # ---- sampling
    def _tracked(self, now: float) -> tuple[dict[int, int] | None, dict[int, int] | None]:
        if self._models and (self._weights is None or now - self._weights_t >= self.weights_refresh_s):
            _prune(self._models)
            seen: set[int] = set()
            sizes = []
            # outermost models first, so a nested model's tensors are counted under its parent
            for ref in sorted(self._models, key=lambda r: id(r()) in self._nested):
                model = ref()
                if model is not None:
                    sizes.append((ref, *model_bytes_split(model, seen)))
            self._model_sizes = sizes
            self._weights = _add(*(p for _, p, _ in sizes), *(b for _, _, b in sizes))
            self._weights_t = now
        weights_out = self._weights if self._models else None
        kv: dict[int, int] | None = None
        if self._caches or self._kv is not None:  # a cache once tracked and now gone holds 0 bytes
            if self._kv is None or now - self._kv_t >= self.kv_refresh_s:
                _prune(self._caches)
                seen = set()
                infos = []
                for ref in list(self._caches):
                    cache = ref()
                    if cache is not None:
                        summary = cache_summary(cache, seen)
                        summary["class"] = type(cache).__name__
                        summary["auto"] = id(cache) in self._auto
                        infos.append(summary)
                        self._note_structure(cache, summary)
                self._cache_info = infos
                for i in infos:
                    size = sum(i["bytes"].values())
                    if size > 0 and size >= self._largest_bytes:
                        self._largest, self._largest_bytes = i, size
                self._kv, self._kv_t = _add(*(i["bytes"] for i in infos)), now
            kv = self._kv
        return weights_out, kv

    def _note_structure(self, cache: Any, summary: dict) -> None:
        """A cache of a class whose structure memsight does not know, holding no tensor it finds: named
        once."""
        if summary["structure"] != "tensors" or summary["bytes"]:
            return
        name = f"{type(cache).__name__}, unknown structure"
        if name not in self._untracked:
            self._untracked.append(name)

    # ---- the info file: what a monitor needs besides the numbers (plan inputs, phases, hook status)
    def info(self) -> dict[str, Any]:
        """The JSON document published beside the ring file (collectors/agent_info.py reads it)."""
        models = []
        for ref, params, buffers in self._model_sizes:
            model = ref()
            if model is None or id(model) in self._nested:
                continue
            described = self._model_info.get(id(model))
            if described is None:
                described = self._model_info[id(model)] = describe_model(model)
            models.append(
                dict(
                    described,
                    auto=id(model) in self._auto,
                    params_bytes={str(d): v for d, v in params.items()},
                    buffers_bytes={str(d): v for d, v in buffers.items()},
                )
            )
        caches = [_cache_json(i) for i in self._cache_info]
        tracker = self.autotrack
        return {
            "version": fmt.INFO_VERSION,
            "pid": self.pid,
            "autotrack": self.autotrack_note,
            "hooks": dict(tracker.status) if tracker is not None else {},
            "versions": dict(tracker.versions) if tracker is not None else {},
            "hook_errors": tracker.errors if tracker is not None else 0,
            "hook_last_error": tracker.last_error if tracker is not None else "",
            "models": models,
            "caches": caches,
            "largest_cache": None if self._largest is None else _cache_json(self._largest),
            "phases": tracker.phases.as_json() if tracker is not None else {},
            "phase_counter": tracker.phases.counter if tracker is not None else "",
            "untracked": list(self._untracked),
            "problems": list(self.problems),
        }

    def _publish(self, now: float, force: bool = False) -> None:
        if self.info_path is None or (now - self._info_t < self.info_interval_s and not force):
            return
        self._info_t = now
        if self.autotrack is None and not self._models and not self._caches and not self.problems:
            return
        body = self.info()
        text = json.dumps(body, separators=(",", ":"), default=str, sort_keys=True)
        if text == self._info_text:
            return
        fmt.write_info_file(self.info_path, json.dumps(dict(body, t=now), separators=(",", ":"), default=str))
        self._info_text = text

    def collect(self) -> list[dict[str, float]]:
        """One tick's records (not written). Device -1 carries process-level data when no CUDA device does."""
        t0 = time.perf_counter()
        now = self._clock()
        state = self.cuda.state()
        rss = self._rss.read()
        weights, kv = self._tracked(now)
        step_index, step_label, step_t = self._step
        base = {
            "t": now,
            "cuda_state": float(fmt.CUDA_STATES.index(state)),
            "rss": _f(rss),
            "step_index": float(step_index),
            "step_t": step_t,
            "tick_cost_s": self._last_tick_cost,
            "label": step_label,
        }
        records: list[dict[str, float]] = []
        if state == "ok":
            refresh_info = now - self._mem_info_t >= self.mem_info_interval_s
            for device in range(self.cuda.device_count()):
                stats = self.cuda.memory_stats(device)
                if not self.cuda.has_context(device, stats):
                    continue
                if refresh_info:
                    try:
                        self._mem_info[device] = self.cuda.mem_get_info(device)
                    except Exception as exc:
                        self._report(exc)
                free, total = self._mem_info.get(device, (None, None))
                record = dict(
                    base,
                    device=float(device),
                    cuda_free=_f(free),
                    cuda_total=_f(total),
                    is_integrated=_f(self.cuda.is_integrated(device)),
                    weights_bytes=_f(None if weights is None else weights.get(device, 0)),
                    kv_bytes=_f(None if kv is None else kv.get(device, 0)),
                )
                for name, value in derive(stats).items():
                    record[name] = _f(value)
                records.append(record)
            if refresh_info:
                self._mem_info_t = now
        host_weights = weights.get(-1) if weights is not None else None
        host_kv = kv.get(-1) if kv is not None else None
        if not records or host_weights or host_kv:
            records.insert(
                0,
                dict(
                    base,
                    device=-1.0,
                    weights_bytes=_NAN if weights is None else float(weights.get(-1, 0)),
                    kv_bytes=_NAN if kv is None else float(kv.get(-1, 0)),
                ),
            )
        self._publish(now)
        self._last_tick_cost = time.perf_counter() - t0
        return records

    def tick(self) -> int:
        """Sample once and write the records; returns how many were written."""
        mm = self._mm
        if mm is None:
            return 0
        records = self.collect()
        for record in records:
            payload = _pack(record)
            number = self._fine_count
            fmt.write_slot(
                mm, fmt.slot_offset("fine", number, self.fine_capacity, self.coarse_capacity), number, payload
            )
            self._fine_count = number + 1
            fmt.write_u64(mm, fmt.OFF_FINE_COUNT, self._fine_count)
            self._fold_coarse(record, payload)
            self._last_records[int(record["device"])] = record
        fmt.write_f64(mm, fmt.OFF_HEARTBEAT, self._clock())
        if records:
            self._recorded_step = int(records[-1]["step_index"])
        return len(records)

    def _fold_coarse(self, record: dict[str, float], payload: bytes) -> None:
        t = record["t"]
        if self._window_start != self._window_start:
            self._window_start = t
        elif t >= self._window_start + self.coarse_step_s:
            self._flush_coarse()
            self._window_start = t
        device = int(record["device"])
        key = record.get("reserved", _NAN)
        if key != key:
            key = record.get("rss", _NAN)
        key = -math.inf if key != key else key
        best = self._window_best.get(device)
        if best is None or key >= best[0]:
            self._window_best[device] = (key, payload)

    def _flush_coarse(self) -> None:
        mm = self._mm
        if mm is None:
            return
        for _, payload in sorted(self._window_best.values(), key=lambda kp: _PAYLOAD_T(kp[1])):
            number = self._coarse_count
            fmt.write_slot(
                mm,
                fmt.slot_offset("coarse", number, self.fine_capacity, self.coarse_capacity),
                number,
                payload,
            )
            self._coarse_count = number + 1
            fmt.write_u64(mm, fmt.OFF_COARSE_COUNT, self._coarse_count)
        self._window_best = {}

    # ---- the probe
    def snap(self, label: str, file=None) -> dict[str, Any]:
        """One record of alloc, reserved, peak, cuda_free, cuda_total, os_available, rss (GiB, NaN where
        unknown), printed as one line. Synchronizes CUDA first (like the seed's probe) if initialized."""
        alloc = reserved = peak = free = total = None
        if self.cuda.state() == "ok":
            torch = sys.modules.get("torch")
            if torch is not None and isinstance(self.cuda, TorchCuda):
                torch.cuda.synchronize()
            device = _current_device(self.cuda)
            derived = derive(self.cuda.memory_stats(device))
            alloc, reserved, peak = derived["allocated"], derived["reserved"], derived["peak_allocated"]
            free, total = self.cuda.mem_get_info(device)
        row: dict[str, Any] = dict(
            label=label,
            t=self._clock(),
            alloc=_gib(alloc),
            reserved=_gib(reserved),
            peak=_gib(peak),
            cuda_free=_gib(free),
            cuda_total=_gib(total),
            os_available=_gib(_os_available()),
            rss=_gib(self._rss.read()),
        )
        line = " ".join(
            f"{k}={v:.2f}" if isinstance(v, float) and k != "t" else f"{k}={v}" for k, v in row.items()
        )
        print(line, file=file if file is not None else sys.stdout)
        return row


def _current_device(cuda: CudaSource) -> int:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(cuda, TorchCuda):
        return int(torch.cuda.current_device())
    return 0


def _cache_json(summary: dict) -> dict[str, Any]:
    return {
        "class": summary["class"],
        "auto": summary["auto"],
        "structure": summary["structure"],
        "batch": summary["batch"],
        "tokens": max(summary["layer_tokens"]) if summary["layer_tokens"] else None,
        # the sequence length (a sliding window holds fewer tokens than it has seen)
        "seq_tokens": max(summary["seq_tokens"]) if summary.get("seq_tokens") else None,
        "layer_tokens": summary["layer_tokens"],
        "layers": summary["layers"],
        "bytes": {str(d): v for d, v in summary["bytes"].items()},
    }


def _prune(refs: list) -> None:
    """Drop references to objects that are gone (in place: the program's thread may append meanwhile)."""
    for ref in [r for r in refs if r() is None]:
        try:
            refs.remove(ref)
        except ValueError:
            pass


def describe_model(model: Any) -> dict[str, Any]:
    """Class, name, dtype and the config.json content of a (transformers) model; plain modules get the first
    three. Read once per model, in the agent's thread."""
    config = getattr(model, "config", None)
    as_dict = None
    config_error = ""
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):
        try:
            as_dict = json.loads(json.dumps(to_dict(), default=str))
        except Exception as exc:  # published as such: the plan cannot follow this model, and says why
            config_error = f"config.to_dict() failed: {type(exc).__name__}: {exc}"[:300]
    dtype = getattr(model, "dtype", None)
    if dtype is None:
        first = next(iter(model.parameters()), None)
        dtype = getattr(first, "dtype", None)
    name = getattr(model, "name_or_path", None) or getattr(config, "_name_or_path", None) or ""
    return {
        "class": type(model).__name__,
        "name": str(name),
        "dtype": str(dtype).replace("torch.", "") if dtype is not None else None,
        "config": as_dict,
        "config_error": config_error,
    }


def _PAYLOAD_T(payload: bytes) -> float:  # noqa: N802  (sort key: the record's time)
    return fmt.PAYLOAD.unpack(payload)[0]


def _ref(obj: Any) -> Any:
    try:
        return weakref.ref(obj)
    except TypeError:  # lists / tuples cannot be weakly referenced: hold them (the user asked us to)
        return lambda obj=obj: obj


def _f(value: Any) -> float:
    if value is None:
        return _NAN
    return float(value)


def _gib(value: int | None) -> float:
    return _NAN if value is None else value / GiB


def _pack(record: dict[str, Any]) -> bytes:
    values = [record.get(name, _NAN) for name in fmt.RECORD_FIELDS]
    label = str(record.get("label", "")).encode("utf-8", "replace")[: fmt.LABEL_BYTES]
    return fmt.PAYLOAD.pack(*values, label)


# ------------------------------------------------------------------------------------ one per process
class _ProcessAgent:
    """Holds this process's agent. The only process-wide state of the collectors, on purpose: the agent
    *is* per-process (like logging's root logger), and fork children must get a fresh one."""

    __slots__ = ("agent", "fork_hook")

    def __init__(self) -> None:
        self.agent: Agent | None = None
        self.fork_hook = False


_PROCESS = _ProcessAgent()


def _safe(fn):
    """Public entry points never raise into user code: report once on stderr, return None."""

    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            _say(f"memsight agent: {fn.__name__} failed: {type(exc).__name__}: {exc}")
            return None

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


@_safe
def start(hz: float | None = None, directory: str | None = None, autotrack: bool | None = None) -> Agent:
    """Start (or return) this process's agent. hz defaults to $MEMSIGHT_AGENT_HZ or 10; the agent's CPU
    budget (share of one core, default 0.005) to $MEMSIGHT_AGENT_CPU_BUDGET. autotrack (default: on unless
    $MEMSIGHT_AUTOTRACK=0) tracks the models and caches transformers builds, without any other call."""
    return _start(hz, directory, autotrack)


def _start(hz: float | None, directory: str | None, autotrack: bool | None) -> Agent:
    agent = _PROCESS.agent
    if agent is not None and agent.pid == os.getpid():
        return agent
    rate = hz if hz is not None else float(os.environ.get("MEMSIGHT_AGENT_HZ", "10"))
    budget = float(os.environ.get("MEMSIGHT_AGENT_CPU_BUDGET", DEFAULT_CPU_BUDGET))
    agent = Agent(hz=rate, directory=directory, cpu_budget=budget)
    agent.open()
    from collectors.autotrack import enabled_by_env  # noqa: PLC0415

    if autotrack is None:
        autotrack = enabled_by_env()
        note = "on" if autotrack else "off (MEMSIGHT_AUTOTRACK=0)"
    else:
        note = "on" if autotrack else "off (agent.start(autotrack=False))"
    if autotrack:
        try:
            agent.enable_autotrack(note)
        except Exception as exc:  # the hooks are optional; the agent is not
            agent.autotrack_note = f"failed: {type(exc).__name__}: {exc}"
    else:
        agent.autotrack_note = note
    agent.start()
    _PROCESS.agent = agent
    atexit.register(_at_exit)
    if not _PROCESS.fork_hook and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _PROCESS.fork_hook = True
    return agent


def _at_exit() -> None:
    agent = _PROCESS.agent
    if agent is not None and agent.pid == os.getpid():
        agent.stop(remove=True)
        _PROCESS.agent = None


def _after_fork_in_child() -> None:
    # the parent's mapping and thread are not ours: forget them (never write the parent's file), start anew
    inherited = _PROCESS.agent
    _PROCESS.agent = None
    if inherited is None:
        return
    inherited._mm = None  # noqa: SLF001  (the child must not touch the parent's ring)
    inherited.info_path = None
    where = f"memsight agent (pid {os.getpid()}, forked from pid {inherited.pid})"
    try:
        agent = _start(hz=inherited.hz, directory=inherited.directory, autotrack=False)
    except Exception as exc:  # never into the program; said, since this process now has no agent at all
        why = f"{type(exc).__name__}: {exc}"
        _say(f"{where}: no agent in this process: starting it after the fork failed: {why}")
        return
    tracker = inherited.autotrack
    if tracker is None:
        return
    try:  # the patched classes call this tracker: rebind it to the child's agent
        tracker.rebind(agent)
        agent.autotrack, agent.autotrack_note = tracker, inherited.autotrack_note
        for model in tracker.top_models():
            agent.track_model(model, auto=True)
    except Exception as exc:  # the agent samples on; what it no longer tracks is said on screen
        problem = f"automatic tracking not restored after the fork: {type(exc).__name__}: {exc}"
        agent.autotrack_note = f"failed after fork: {type(exc).__name__}: {exc}"
        agent.note_problem(problem)
        _say(f"{where}: {problem}")


def _say(text: str) -> None:
    """One line on stderr; never raises (a closed stderr must not break the program)."""
    try:
        print(text, file=sys.stderr, flush=True)
    except Exception:
        pass


def current() -> Agent | None:
    return _PROCESS.agent


@_safe
def stop() -> None:
    _at_exit()


@_safe
def track_model(model: Any) -> None:
    (current() or start()).track_model(model)


@_safe
def track_kv(cache: Any) -> None:
    (current() or start()).track_kv(cache)


@_safe
def untrack(obj: Any) -> None:
    agent = current()
    if agent is not None:
        agent.untrack(obj)


@_safe
def mark_step(label: str, reset_peak: bool = False) -> None:
    (current() or start()).mark_step(label, reset_peak=reset_peak)


@_safe
def snap(label: str) -> dict[str, Any]:
    """The seed's probe: one line of alloc, reserved, peak, cuda_free, cuda_total, os_available, rss (GiB)."""
    agent = current()
    if agent is None:
        agent = Agent()  # a probe needs no ring file or thread
    return agent.snap(label)


def start_from_env() -> Agent | None:
    """Called by the bootstrap sitecustomize: start only when `memsight run` asked (MEMSIGHT_AGENT=1)."""
    if os.environ.get("MEMSIGHT_AGENT") != "1":
        return None
    return start()
