"""NVIDIA devices through NVML (`import pynvml`, from nvidia-ml-py), behind a small backend interface.

Every field can fail on its own: NOT_SUPPORTED is recorded in DeviceInfo.unsupported (the value is None),
any other NVML error in DeviceInfo.errors; the sample goes on. No NVML library, or no driver, gives one
NVMLSnapshot with available=False and a status that says which, never an exception.

Unified memory (GB10 / DGX Spark, Jetson Thor): memory info answers NOT_SUPPORTED, or the device name is
one of those parts. There the headroom that matters is the OS's MemAvailable (see collectors/monitor.py).
GH200 is not unified in this sense: it reports its own HBM framebuffer (97871 MiB) like a discrete GPU.

Per-process lists (`nvmlDeviceGet{Compute,Graphics}RunningProcesses`, ~4.5 ms, and they take the driver's
global lock) are read at most `process_interval_s` apart (default 1 s) however often sample() is called.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

from collectors.snapshots import DeviceInfo, GpuProcess, NVMLSnapshot

# Device names (substrings) of parts whose GPU has no memory of its own. Names from nvidia-smi outputs in
# ../shared/fixtures ("NVIDIA GB10", "NVIDIA Thor") and NVIDIA's Jetson line ("Orin").
UNIFIED_NAME_MARKERS = ("GB10", "Thor", "Orin", "Xavier", "Tegra")


# pynvml's way to its library (pynvml._LoadNvmlLibrary): CDLL("libnvidia-ml.so.1") on Linux. What its failure
# reads as on screen: describe_error of pynvml's NVMLError_LibraryNotFound (a test holds the two together).
NVML_LIBRARY = "libnvidia-ml.so.1"
LIBRARY_NOT_FOUND = "NVMLError_LibraryNotFound (code 12): NVML Shared Library Not Found"


def nvml_library_missing() -> str | None:
    """Why NVML cannot load (in pynvml's words), or None when its shared library loads (or on Windows, where
    pynvml searches folders of its own). Probed as pynvml loads it, so that a machine without NVIDIA's driver
    never imports pynvml: its module costs 2.3 MiB resident, only to learn that there is no GPU."""
    if sys.platform.startswith("win"):
        return None
    import ctypes  # noqa: PLC0415  (0.3 MiB against pynvml's 2.3; pynvml imports it too)

    try:
        ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        return LIBRARY_NOT_FOUND
    return None


def name_is_unified(name: str) -> bool:
    return any(marker.lower() in name.lower() for marker in UNIFIED_NAME_MARKERS)


class NVMLBackend(Protocol):
    """What the collector needs from NVML. Methods raise pynvml.NVMLError subclasses on failure, exactly
    as pynvml does (NVMLError_NotSupported for "Not Supported")."""

    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def driver_version(self) -> str: ...
    def device_count(self) -> int: ...
    def name(self, index: int) -> str: ...
    def uuid(self, index: int) -> str: ...
    def memory_info_v2(self, index: int) -> tuple[int, int, int, int]: ...  # total, reserved, used, free
    def memory_info(self, index: int) -> tuple[int, int, int]: ...  # total, used, free
    def utilization_gpu(self, index: int) -> float: ...
    def compute_processes(self, index: int) -> list[tuple[int, int | None]]: ...  # (pid, used bytes)
    def graphics_processes(self, index: int) -> list[tuple[int, int | None]]: ...


def _used(value: Any) -> int | None:
    # NVML reports "not available" per process as NVML_VALUE_NOT_AVAILABLE (2**64 - 1), seen as None
    if value is None or value >= 2**63:
        return None
    return int(value)


class PynvmlBackend:
    """The real thing. Imports pynvml on construction; raises ImportError if nvidia-ml-py is absent."""

    def __init__(self) -> None:
        import pynvml  # noqa: PLC0415  (lazy: `memsight plan` never pays for it)

        self._nvml = pynvml
        self._handles: dict[int, Any] = {}

    def _h(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self._nvml.nvmlDeviceGetHandleByIndex(index)
        return self._handles[index]

    def init(self) -> None:
        self._nvml.nvmlInit()

    def shutdown(self) -> None:
        self._handles.clear()
        self._nvml.nvmlShutdown()

    def driver_version(self) -> str:
        v = self._nvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)

    def device_count(self) -> int:
        return int(self._nvml.nvmlDeviceGetCount())

    def name(self, index: int) -> str:
        v = self._nvml.nvmlDeviceGetName(self._h(index))
        return v.decode() if isinstance(v, bytes) else str(v)

    def uuid(self, index: int) -> str:
        v = self._nvml.nvmlDeviceGetUUID(self._h(index))
        return v.decode() if isinstance(v, bytes) else str(v)

    def memory_info_v2(self, index: int) -> tuple[int, int, int, int]:
        nvml = self._nvml
        if not hasattr(nvml, "nvmlMemory_v2"):
            raise nvml.NVMLError(nvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        m = nvml.nvmlDeviceGetMemoryInfo(self._h(index), version=nvml.nvmlMemory_v2)
        return int(m.total), int(m.reserved), int(m.used), int(m.free)

    def memory_info(self, index: int) -> tuple[int, int, int]:
        m = self._nvml.nvmlDeviceGetMemoryInfo(self._h(index))
        return int(m.total), int(m.used), int(m.free)

    def utilization_gpu(self, index: int) -> float:
        return float(self._nvml.nvmlDeviceGetUtilizationRates(self._h(index)).gpu)

    def compute_processes(self, index: int) -> list[tuple[int, int | None]]:
        return [
            (int(p.pid), _used(p.usedGpuMemory))
            for p in self._nvml.nvmlDeviceGetComputeRunningProcesses(self._h(index))
        ]

    def graphics_processes(self, index: int) -> list[tuple[int, int | None]]:
        return [
            (int(p.pid), _used(p.usedGpuMemory))
            for p in self._nvml.nvmlDeviceGetGraphicsRunningProcesses(self._h(index))
        ]


def _is_not_supported(exc: BaseException) -> bool:
    try:
        import pynvml  # noqa: PLC0415
    except ImportError:
        return False
    return (
        isinstance(exc, pynvml.NVMLError) and getattr(exc, "value", None) == pynvml.NVML_ERROR_NOT_SUPPORTED
    )


def describe_error(exc: BaseException) -> str:
    """An NVML error as what it is: its pynvml class and code, with NVML's text when pynvml knows it
    (without the library loaded, pynvml's str() of a less common code is only "NVML Error with code N").
    Never raises, whatever str() of the exception does."""
    name = type(exc).__name__
    try:
        text = str(exc)
    except Exception:
        text = ""
    value = getattr(exc, "value", None)
    if name.startswith("NVMLError") and isinstance(value, int):
        generic = f"NVML Error with code {value}"
        return f"{name} (code {value})" + (f": {text}" if text and text != generic else "")
    return f"{name}: {text}" if text else name


class NVMLCollector:
    """sample() -> NVMLSnapshot. `backend=None` uses pynvml (imported only when NVML's library loads); a
    backend that fails to init is reported."""

    def __init__(
        self,
        backend: NVMLBackend | None = None,
        process_interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self.process_interval_s = process_interval_s
        self._backend: NVMLBackend | None = None
        self._status = "ok"
        self._driver: str | None = None
        self._last_process_read = -float("inf")
        self._cached_processes: dict[
            int, tuple[tuple[GpuProcess, ...], tuple[str, ...], tuple[str, ...]]
        ] = {}
        missing = nvml_library_missing() if backend is None else None
        if missing is not None:  # the status pynvml's init would give, without importing pynvml
            self._status = f"no NVML library: {missing}"
            return
        try:
            chosen = backend if backend is not None else PynvmlBackend()
        except ImportError as exc:
            self._status = f"no NVML library: nvidia-ml-py (pynvml) is not installed ({exc})"
            return
        try:
            chosen.init()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ... : one clear status
            self._status = (
                f"no NVML library: {describe_error(exc)}"
                if "Library" in type(exc).__name__ or isinstance(exc, ImportError)
                else f"NVML init failed: {describe_error(exc)}"
            )
            return
        self._backend = chosen
        try:
            self._driver = chosen.driver_version()
        except Exception:  # a missing driver version is not worth failing for
            self._driver = None

    @property
    def status(self) -> str:
        return self._status

    @property
    def active(self) -> bool:
        """NVML initialised: sampling can change something. False (no library, init failed, closed): every
        sample() returns the same "why not" snapshot, so the monitor samples it once and runs no thread."""
        return self._backend is not None

    def close(self) -> None:
        if self._backend is not None:
            try:
                self._backend.shutdown()
            except Exception:  # shutting down twice or after a driver reset: nothing to do
                pass
            self._backend = None

    def sample(self) -> NVMLSnapshot:
        t = self._clock()
        backend = self._backend
        if backend is None:
            return NVMLSnapshot(status=self._status, available=False, devices=(), t=t)
        try:
            count = backend.device_count()
        except Exception as exc:
            return NVMLSnapshot(
                status=f"NVML device count failed: {describe_error(exc)}",
                available=False,
                devices=(),
                t=t,
                driver_version=self._driver,
            )
        read_processes = t - self._last_process_read >= self.process_interval_s
        if read_processes:
            self._last_process_read = t
        devices = tuple(self._device(backend, i, read_processes) for i in range(count))
        status = "ok" if devices else "no NVIDIA device"
        return NVMLSnapshot(
            status=status, available=bool(devices), devices=devices, t=t, driver_version=self._driver
        )

    def _device(self, backend: NVMLBackend, index: int, read_processes: bool) -> DeviceInfo:
        fields = _FieldFailures()
        attempt = fields.attempt
        name = attempt("name", lambda: backend.name(index)) or f"GPU {index}"
        uuid = attempt("uuid", lambda: backend.uuid(index)) or ""
        total, reserved, used, free = _memory(backend, index, fields)
        util = attempt("utilization", lambda: backend.utilization_gpu(index))
        procs = self._processes(backend, index, read_processes, fields)
        unified = "memory" in fields.unsupported or name_is_unified(name)
        return DeviceInfo(
            index=index,
            name=name,
            uuid=uuid,
            total=total,
            reserved=reserved,
            used=used,
            free=free,
            unified=unified,
            utilization_gpu=util,
            processes=tuple(procs),
            unsupported=tuple(fields.unsupported),
            errors=tuple(fields.errors),
        )

    def _processes(
        self, backend: NVMLBackend, index: int, read_processes: bool, fields: _FieldFailures
    ) -> list[GpuProcess]:
        """The device's compute and graphics processes: read now when due (or never read yet), else the
        previous reading, whose failed fields are reported again."""
        if read_processes or index not in self._cached_processes:
            p_unsup_before, p_err_before = len(fields.unsupported), len(fields.errors)
            procs: list[GpuProcess] = []
            for kind, fn in (
                ("compute", backend.compute_processes),
                ("graphics", backend.graphics_processes),
            ):
                listed = fields.attempt(f"{kind}_processes", lambda fn=fn: fn(index))
                for pid, used_bytes in listed or ():
                    procs.append(GpuProcess(pid=pid, used_bytes=used_bytes, kind=kind))
            self._cached_processes[index] = (
                tuple(procs),
                tuple(fields.unsupported[p_unsup_before:]),
                tuple(fields.errors[p_err_before:]),
            )
            return procs
        procs_t, p_unsup, p_err = self._cached_processes[index]
        fields.unsupported.extend(p_unsup)
        fields.errors.extend(p_err)
        return list(procs_t)


class _FieldFailures:
    """The fields of one device's sample that NVML did not answer: NOT_SUPPORTED ones in `unsupported`, any
    other error in `errors` (as "field: error")."""

    __slots__ = ("unsupported", "errors")

    def __init__(self) -> None:
        self.unsupported: list[str] = []
        self.errors: list[str] = []

    def attempt(self, field: str, fn: Callable[[], Any]) -> Any:
        """fn(), or None with its failure recorded under `field`."""
        try:
            return fn()
        except Exception as exc:
            if _is_not_supported(exc):
                self.unsupported.append(field)
            else:
                self.errors.append(f"{field}: {describe_error(exc)}")
            return None


def _memory(
    backend: NVMLBackend, index: int, fields: _FieldFailures
) -> tuple[int | None, int | None, int | None, int | None]:
    """(total, reserved, used, free) from NVML's v2 memory info, else v1's three with "reserved" unknown."""
    mark = (len(fields.unsupported), len(fields.errors))
    v2 = fields.attempt("memory_v2", lambda: backend.memory_info_v2(index))
    if v2 is not None:
        total, reserved, used, free = v2
        return total, reserved, used, free
    # v2 absent (old driver / old pynvml) or refused: v1 may still answer. Only v1's verdict on
    # total/used/free is kept; "reserved" is unsupported whichever way v2 failed.
    del fields.unsupported[mark[0] :]
    del fields.errors[mark[1] :]
    fields.unsupported.append("reserved")
    v1 = fields.attempt("memory", lambda: backend.memory_info(index))
    if v1 is not None:
        total, used, free = v1
        return total, None, used, free
    return None, None, None, None


def gpu_bytes_by_pid(snapshot: NVMLSnapshot) -> dict[int, int]:
    """pid -> sum of its known per-process usage over all devices (compute and graphics)."""
    out: dict[int, int] = {}
    for device in snapshot.devices:
        for p in device.processes:
            if p.used_bytes is not None:
                out[p.pid] = out.get(p.pid, 0) + p.used_bytes
    return out


def gpu_held_bytes(snapshot: NVMLSnapshot) -> int | None:
    """Sum of per-process usage over every device; None when no process gave a number."""
    values = [d.processes_used_bytes for d in snapshot.devices]
    known = [v for v in values if v is not None]
    return sum(known) if known else None
