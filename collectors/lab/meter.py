"""Memory meters for the lab's workloads: what "allocated", "peak" and "the cap" mean on each device.

CUDA: PyTorch's caching allocator itself. The cap is
`torch.cuda.set_per_process_memory_fraction(cap / total)`, so an allocation that would take the allocator's
reservations over it raises torch.OutOfMemoryError; allocated, reserved and peak are torch.cuda's counters.

CPU: there is no caching allocator and no counter of live tensor bytes, so the meter keeps one. A
TorchDispatchMode sees every operator's outputs; each new storage is counted once (by its data pointer, views
and in-place results share it) and uncounted when the last tensor on it dies (weakref.finalize). That is the
CUDA allocator's "allocated" without the 512 B rounding. The cap is checked after every operator: the
operator whose output takes the live bytes over the cap raises BudgetExceeded (a torch.OutOfMemoryError),
which unwinds the forward pass and frees its temporaries, the same way a CUDA OOM does. What it cannot see:
scratch memory an operator allocates and frees inside itself (a fused kernel's workspace), and anything that
is not a tensor (Python objects, the libraries). There is no reserved − allocated gap on the CPU (no cache to
hold freed blocks); the closest real figure is the process's resident growth beyond its live tensors (glibc's
heap), which `rss_gap` reports as such.
"""

from __future__ import annotations

import gc
import os
import weakref
from typing import Any


def _rss_bytes() -> int | None:
    try:
        with open(f"/proc/{os.getpid()}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _budget_error_type():
    import torch  # noqa: PLC0415

    class BudgetExceeded(torch.OutOfMemoryError):
        """The CPU meter's cap was crossed (raised inside the operator that crossed it)."""

    return BudgetExceeded


class CpuMeter:
    """Live tensor bytes on the CPU, with a peak and an optional cap (see the module docstring)."""

    device = "cpu"

    def __init__(self, cap_bytes: int | None) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode  # noqa: PLC0415
        from torch.utils._pytree import tree_flatten  # noqa: PLC0415

        self.cap_bytes = cap_bytes
        self.allocated = 0
        self.peak = 0
        self.failures = 0
        self._live: dict[int, list[int]] = {}  # storage data_ptr -> [nbytes, tensors alive on it]
        self.error_type = _budget_error_type()
        meter = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for item in tree_flatten(out)[0]:
                    if isinstance(item, _tensor):
                        meter.track(item)
                cap = meter.cap_bytes
                if cap is not None and meter.allocated > cap:
                    meter.failures += 1
                    over = meter.allocated
                    del out, item
                    raise meter.error_type(
                        f"CPU budget: {func} took live tensor bytes to {over:,} B, over the cap of {cap:,} B"
                    )
                return out

        import torch  # noqa: PLC0415

        _tensor = torch.Tensor
        self._mode = _Mode()

    # ---- accounting
    def track(self, tensor: Any) -> None:
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # meta / sparse tensors have no plain storage
            return
        nbytes = storage.nbytes()
        key = storage.data_ptr()
        if nbytes == 0 or key == 0:
            return
        entry = self._live.get(key)
        if entry is None:
            self._live[key] = [nbytes, 1]
            self.allocated += nbytes
            if self.allocated > self.peak:
                self.peak = self.allocated
        else:
            entry[1] += 1
        weakref.finalize(tensor, self._release, key)

    def _release(self, key: int) -> None:
        entry = self._live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del self._live[key]
            self.allocated -= entry[0]

    def track_model(self, model: Any) -> None:
        """Count a model built before the meter started (parameters and buffers)."""
        for tensor in [*model.parameters(), *model.buffers()]:
            self.track(tensor)

    # ---- the common meter interface (CudaMeter has the same)
    def __enter__(self) -> CpuMeter:
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)

    def reset_peak(self) -> None:
        self.peak = self.allocated

    def reserved(self) -> int | None:
        return None  # no caching allocator on the CPU

    def cleanup(self) -> None:
        gc.collect()

    def rss(self) -> int | None:
        return _rss_bytes()

    def is_oom(self, exc: BaseException) -> bool:
        import torch  # noqa: PLC0415

        if isinstance(exc, torch.OutOfMemoryError):
            return True
        # the system allocator itself failing (a real RLIMIT / machine limit) is an OOM too
        return isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)

    def describe_cap(self) -> str:
        if self.cap_bytes is None:
            return "no cap"
        return f"live tensor bytes checked after every operator against {self.cap_bytes:,} B"


class CudaMeter:
    """torch.cuda's own counters; the cap through set_per_process_memory_fraction."""

    device = "cuda"

    def __init__(self, cap_bytes: int | None) -> None:
        import torch  # noqa: PLC0415

        self._torch = torch
        self.cap_bytes = cap_bytes
        self.failures = 0
        torch.cuda.init()
        self.total = torch.cuda.get_device_properties(0).total_memory
        if cap_bytes is not None:
            torch.cuda.set_per_process_memory_fraction(min(1.0, cap_bytes / self.total), 0)

    def __enter__(self) -> CudaMeter:
        return self

    def __exit__(self, *exc) -> None:
        pass

    @property
    def allocated(self) -> int:
        self._torch.cuda.synchronize()
        return self._torch.cuda.memory_allocated()

    @property
    def peak(self) -> int:
        self._torch.cuda.synchronize()
        return self._torch.cuda.max_memory_allocated()

    def reset_peak(self) -> None:
        self._torch.cuda.synchronize()
        self._torch.cuda.reset_peak_memory_stats()

    def reserved(self) -> int | None:
        return self._torch.cuda.memory_reserved()

    def track_model(self, model: Any) -> None:
        pass  # the allocator counts everything on the device already

    def cleanup(self) -> None:
        gc.collect()
        self._torch.cuda.empty_cache()

    def rss(self) -> int | None:
        return _rss_bytes()

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, self._torch.OutOfMemoryError)

    def describe_cap(self) -> str:
        if self.cap_bytes is None:
            return "no cap"
        return (
            f"torch.cuda.set_per_process_memory_fraction({self.cap_bytes / self.total:.4f}) "
            f"= {self.cap_bytes:,} B of {self.total:,} B"
        )


def make_meter(device: str, cap_bytes: int | None):
    return CudaMeter(cap_bytes) if device == "cuda" else CpuMeter(cap_bytes)
