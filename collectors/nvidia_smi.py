"""Parse recorded `nvidia-smi` output (the plain table, `-q` / `-a`) and serve it as an NVML backend.

The backend answers the way pynvml would on that machine: a cell that says "Not Supported" or "N/A"
raises pynvml.NVMLError_NotSupported; a field the recording does not contain raises NVMLError_NoData
(unknown, not unsupported). nvidia-smi truncates process memory of 100,000 MiB or more to five digits
and "..." ("10707..."): that value is unknown (None), never the five digits.

This is how tests (and anyone with only a pasted nvidia-smi) feed real recorded values through the same
NVMLCollector code path the live pynvml backend uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from collectors.errors import CollectorError

MiB = 2**20

_UNSUPPORTED_CELLS = ("not supported", "n/a", "[n/a]")


@dataclass(frozen=True, slots=True)
class SmiProcess:
    gpu: int
    pid: int
    kind: str  # "compute" (C, C+G) | "graphics" (G)
    name: str
    used_bytes: int | None  # None: truncated ("10707...") or N/A
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class SmiDevice:
    index: int
    name: str
    uuid: str | None = None
    total: int | None = None  # None: not in the recording
    used: int | None = None
    reserved: int | None = None
    free: int | None = None
    memory_not_supported: bool = False
    utilization: float | None = None
    utilization_not_supported: bool = False


@dataclass(frozen=True, slots=True)
class SmiReport:
    driver_version: str | None
    devices: tuple[SmiDevice, ...]
    processes: tuple[SmiProcess, ...]
    processes_listed: bool  # the recording contains a processes section (possibly "No running processes")
    notes: tuple[str, ...] = field(default=())


def _mib(cell: str) -> int | None:
    m = re.fullmatch(r"\s*(\d+)\s*MiB\s*", cell)
    return int(m.group(1)) * MiB if m else None


def _not_supported(cell: str) -> bool:
    return cell.strip().lower() in _UNSUPPORTED_CELLS


_DEVICE_ROW = re.compile(r"^\|\s+(\d+)\s+(.+?)\s+(On|Off)\s+\|")
_PROCESS_ROW = re.compile(r"^\|\s+(\d+)\s+\S+\s+\S+\s+(\d+)\s+(C\+G|C|G)\s+(.*?)\s+(\S+)\s*\|\s*$")


def parse_table(text: str) -> SmiReport:
    """Plain `nvidia-smi` output (the boxed table)."""
    driver = None
    m = re.search(r"Driver Version:\s*([\d.]+)", text)
    if m:
        driver = m.group(1)
    lines = text.splitlines()
    devices: list[SmiDevice] = []
    processes: list[SmiProcess] = []
    processes_listed = False
    in_processes = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if "Processes:" in line:
            in_processes = True
            processes_listed = True
        if not in_processes:
            dm = _DEVICE_ROW.match(line)
            if dm and i + 1 < len(lines):
                devices.append(_table_device(dm, lines[i + 1]))
                i += 2
                continue
        else:
            pm = _PROCESS_ROW.match(line)
            if pm:
                processes.append(_table_process(pm))
        i += 1
    if not devices:
        raise CollectorError("no GPU rows found in the nvidia-smi table")
    return SmiReport(
        driver_version=driver,
        devices=tuple(devices),
        processes=tuple(processes),
        processes_listed=processes_listed,
    )


def _table_device(dm: re.Match[str], next_line: str) -> SmiDevice:
    """One GPU of the table: its name row (`dm`) and the memory / utilization row below it."""
    index, name = int(dm.group(1)), dm.group(2).strip()
    cells = next_line.split("|")
    memory_cell = cells[2] if len(cells) > 3 else ""
    util_cell = cells[3] if len(cells) > 3 else ""
    total = used = None
    not_supported = _not_supported(memory_cell)
    mm = re.search(r"(\d+)MiB\s*/\s*(\d+)MiB", memory_cell)
    if mm:
        used, total = int(mm.group(1)) * MiB, int(mm.group(2)) * MiB
    um = re.search(r"(\d+)%", util_cell)
    util = float(um.group(1)) if um else None
    return SmiDevice(
        index=index,
        name=name,
        total=total,
        used=used,
        free=(total - used) if total is not None and used is not None else None,
        memory_not_supported=not_supported,
        utilization=util,
        utilization_not_supported=util is None and "N/A" in util_cell,
    )


def _table_process(pm: re.Match[str]) -> SmiProcess:
    """One row of the table's processes section ("10707..." usage: truncated, unknown)."""
    usage = pm.group(5)
    truncated = usage.endswith("...")
    used_bytes = None if truncated else _mib(usage)
    return SmiProcess(
        gpu=int(pm.group(1)),
        pid=int(pm.group(2)),
        kind="graphics" if pm.group(3) == "G" else "compute",
        name=pm.group(4),
        used_bytes=used_bytes,
        truncated=truncated,
    )


def parse_query(text: str) -> SmiReport:
    """`nvidia-smi -q` / `-a` output (possibly an excerpt with elided lines)."""
    driver = None
    m = re.search(r"Driver Version\s*:\s*(\S+)", text)
    if m:
        driver = m.group(1)
    blocks = re.split(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s*$", text, flags=re.M)
    gpu_blocks = blocks[1:] if len(blocks) > 1 else [text]
    devices = []
    processes_listed = False
    for index, block in enumerate(gpu_blocks):

        def value(section: str | None, key: str, block: str = block) -> str | None:
            body = block
            if section is not None:
                sm = re.search(rf"^(\s*){re.escape(section)}\s*$", block, flags=re.M)
                if not sm:
                    return None
                indent = len(sm.group(1))
                body_lines = []
                for line in block[sm.end() :].splitlines()[1:]:
                    if line.strip() and len(line) - len(line.lstrip()) <= indent:
                        break
                    body_lines.append(line)
                body = "\n".join(body_lines)
            vm = re.search(rf"^\s*{re.escape(key)}\s*:\s*(.*?)\s*$", body, flags=re.M)
            return vm.group(1) if vm else None

        name = value(None, "Product Name") or f"GPU {index}"
        fb = {k: value("FB Memory Usage", k) for k in ("Total", "Reserved", "Used", "Free")}
        not_supported = any(v is not None and _not_supported(v) for v in fb.values())
        util = value("Utilization", "Gpu")
        um = re.match(r"(\d+(?:\.\d+)?)\s*%", util or "")
        if value(None, "Processes") is not None:
            processes_listed = True
        devices.append(
            SmiDevice(
                index=index,
                name=name,
                uuid=value(None, "GPU UUID"),
                total=_mib(fb["Total"] or ""),
                reserved=_mib(fb["Reserved"] or ""),
                used=_mib(fb["Used"] or ""),
                free=_mib(fb["Free"] or ""),
                memory_not_supported=not_supported,
                utilization=float(um.group(1)) if um else None,
                utilization_not_supported=util is not None and _not_supported(util),
            )
        )
    return SmiReport(
        driver_version=driver, devices=tuple(devices), processes=(), processes_listed=processes_listed
    )


def parse_csv(text: str) -> SmiReport:
    """`nvidia-smi --query-gpu=... --format=csv` output (a `$ nvidia-smi ...` command line is skipped)."""
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("$")]
    if len(lines) < 2:
        raise CollectorError("nvidia-smi CSV needs a header line and at least one row")
    header = [re.sub(r"\s*\[.*?\]\s*$", "", h.strip()) for h in lines[0].split(",")]
    devices = []
    for row_index, line in enumerate(lines[1:]):
        try:
            devices.append(_csv_device(header, line, row_index))
        except (ValueError, IndexError) as exc:
            row = f"nvidia-smi CSV row {row_index + 1} ({line.strip()[:80]!r})"
            raise CollectorError(f"{row}: {exc}") from exc
    return SmiReport(driver_version=None, devices=tuple(devices), processes=(), processes_listed=False)


def _csv_device(header: list[str], line: str, row_index: int) -> SmiDevice:
    cells = dict(zip(header, (c.strip() for c in line.split(",")), strict=False))

    def mib(key: str) -> int | None:
        cell = cells.get(key)
        return None if cell is None or _not_supported(cell) else int(float(cell.split()[0])) * MiB

    memory_cells = [cells[k] for k in ("memory.total", "memory.used", "memory.free") if k in cells]
    util = cells.get("utilization.gpu")
    return SmiDevice(
        index=int(cells.get("index", row_index)),
        name=cells.get("name", f"GPU {row_index}"),
        uuid=cells.get("uuid"),
        total=mib("memory.total"),
        used=mib("memory.used"),
        free=mib("memory.free"),
        memory_not_supported=any(_not_supported(c) for c in memory_cells),
        utilization=None if util is None or _not_supported(util) else float(util.split()[0]),
        utilization_not_supported=util is not None and _not_supported(util),
    )


def parse_nvml_probe(text: str) -> SmiReport:
    """A pasted ctypes/pynvml probe: `device : NAME`, `driver : X`,
    `nvmlDeviceGetMemoryInfo -> NVML_ERROR_...`."""
    name = re.search(r"^\s*device\s*:\s*(.+?)\s*$", text, flags=re.M)
    driver = re.search(r"^\s*driver\s*:\s*(\S+)", text, flags=re.M)
    if not name:
        raise CollectorError("NVML probe text has no 'device : NAME' line")
    not_supported = bool(re.search(r"nvmlDeviceGetMemoryInfo\S*\s*->\s*NVML_ERROR_NOT_SUPPORTED", text))
    device = SmiDevice(index=0, name=name.group(1), memory_not_supported=not_supported)
    return SmiReport(
        driver_version=driver.group(1) if driver else None,
        devices=(device,),
        processes=(),
        processes_listed=False,
    )


def parse(text: str) -> SmiReport:
    """Any of the formats above, told apart by their shape."""
    if re.search(r"^\s*device\s*:", text, flags=re.M) and "nvmlDeviceGet" in text:
        return parse_nvml_probe(text)
    if re.search(r"^(index|name|memory\.|utilization\.)[^\n]*,", text, flags=re.M):
        return parse_csv(text)
    if re.search(r"^\|\s+\d+\s+.+\s(On|Off)\s+\|", text, flags=re.M):
        return parse_table(text)
    if "Product Name" in text or "FB Memory Usage" in text:
        return parse_query(text)
    raise CollectorError("not nvidia-smi output: no GPU table rows and no 'Product Name' / 'FB Memory Usage'")


class SmiBackend:
    """An NVMLBackend serving a parsed nvidia-smi recording, raising pynvml's own exception classes."""

    def __init__(self, report: SmiReport) -> None:
        import pynvml  # noqa: PLC0415  (the exception classes are pynvml's; nvidia-ml-py is a dependency)

        self._nvml = pynvml
        self.report = report

    @classmethod
    def from_text(cls, text: str) -> SmiBackend:
        return cls(parse(text))

    def _err(self, code: int) -> Exception:
        return self._nvml.NVMLError(code)

    def _dev(self, index: int) -> SmiDevice:
        try:
            return self.report.devices[index]
        except IndexError:
            raise self._err(self._nvml.NVML_ERROR_INVALID_ARGUMENT) from None

    def init(self) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def driver_version(self) -> str:
        if self.report.driver_version is None:
            raise self._err(self._nvml.NVML_ERROR_NO_DATA)
        return self.report.driver_version

    def device_count(self) -> int:
        return len(self.report.devices)

    def name(self, index: int) -> str:
        return self._dev(index).name

    def uuid(self, index: int) -> str:
        uuid = self._dev(index).uuid
        if uuid is None:
            raise self._err(self._nvml.NVML_ERROR_NO_DATA)
        return uuid

    def memory_info_v2(self, index: int) -> tuple[int, int, int, int]:
        d = self._dev(index)
        if d.memory_not_supported:
            raise self._err(self._nvml.NVML_ERROR_NOT_SUPPORTED)
        if None in (d.total, d.reserved, d.used, d.free):
            # the recording has no v2 figures (plain table): answer like a driver without v2
            raise self._err(self._nvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return d.total, d.reserved, d.used, d.free  # type: ignore[return-value]

    def memory_info(self, index: int) -> tuple[int, int, int]:
        d = self._dev(index)
        if d.memory_not_supported:
            raise self._err(self._nvml.NVML_ERROR_NOT_SUPPORTED)
        if d.total is None or d.used is None or d.free is None:
            raise self._err(self._nvml.NVML_ERROR_NO_DATA)
        # NVML v1 counts the driver-reserved memory as used (used = total - free)
        return d.total, d.total - d.free, d.free

    def utilization_gpu(self, index: int) -> float:
        d = self._dev(index)
        if d.utilization_not_supported:
            raise self._err(self._nvml.NVML_ERROR_NOT_SUPPORTED)
        if d.utilization is None:
            raise self._err(self._nvml.NVML_ERROR_NO_DATA)
        return d.utilization

    def _processes(self, index: int, kind: str) -> list[tuple[int, int | None]]:
        self._dev(index)
        if not self.report.processes_listed:
            raise self._err(self._nvml.NVML_ERROR_NO_DATA)
        return [(p.pid, p.used_bytes) for p in self.report.processes if p.gpu == index and p.kind == kind]

    def compute_processes(self, index: int) -> list[tuple[int, int | None]]:
        return self._processes(index, "compute")

    def graphics_processes(self, index: int) -> list[tuple[int, int | None]]:
        return self._processes(index, "graphics")
