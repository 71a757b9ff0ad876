"""The date and machine a bench figure was taken on, as the README's "Measured figures" table writes them in
its `taken` column (scripts/readme_figures.py checks the form): every bench prints this line last, from its
main guard: `sys.exit(finish(main()))`.

    taken: 2026-12-01, 2 vCPUs (AMD EPYC), 23.5 GiB RAM, no NVIDIA GPU (NVML: NVMLError_LibraryNotFound),
    load average 3.6 while taken
"""

from __future__ import annotations

import datetime
import os


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU model unknown"


def _ram_gib() -> str:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) * 1024 / 2**30:.1f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return "RAM unknown"


def _gpus() -> str:
    try:
        import pynvml  # noqa: PLC0415  (the monitor's own dependency; no torch, no CUDA context)

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
            names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # any NVML failure means the figure was taken without a GPU: say which
        return f"no NVIDIA GPU (NVML: {type(exc).__name__})"
    if not names:
        return "no NVIDIA GPU (NVML: 0 devices)"
    return ", ".join(n.decode() if isinstance(n, bytes) else str(n) for n in names)


def machine() -> str:
    return f"{os.cpu_count()} vCPUs ({_cpu_model()}), {_ram_gib()}, {_gpus()}"


def _load() -> str:
    try:
        return f"load average {os.getloadavg()[0]:.1f} while taken"  # a shared machine's other jobs
    except OSError:
        return "load average unknown"


def taken_line() -> str:
    return f"taken: {datetime.date.today().isoformat()}, {machine()}, {_load()}"


def finish(code: int | None) -> int | None:
    """Print the taken line after a bench's figures; its exit status passes through."""
    print(taken_line(), flush=True)
    return code


if __name__ == "__main__":
    print(taken_line())
