"""A memsight recording of one real DGX Spark (GB10) moment, built from what that machine printed.

    python scripts/gb10_recording.py OUT.jsonl      # then: memsight replay OUT.jsonl

The moment: 2026-03-29 20:25:44 on a GB10 serving nemotron-3-nano through a NIM container (vLLM
EngineCore at 61383 MiB). Its nvidia-smi table and `free -h` are in ../shared/fixtures
(nvidia-smi_gb10_vllm-61383MiB.txt, free-h_gb10_vllm-61383MiB.txt); its `top` and `df -h` are in
tests/data/gb10/ (SOURCES.md there). The NVML
side goes through memsight's own NVML collector over the recorded table (collectors/nvidia_smi.SmiBackend:
memory info answers Not Supported, the processes their recorded MiB), the host side is an OSSnapshot of top's
figures, and the Recorder writes them as a live run would. Nothing the machine did not print is filled in:
AnonPages and the kernel's memory were not recorded, so they stay unknown; top's processes are the only
processes (their RSS from top's RES column).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collectors.nvidia_smi import SmiBackend  # noqa: E402
from collectors.nvml_collector import NVMLCollector  # noqa: E402
from collectors.os_collector import parse_free_h_line  # noqa: E402
from collectors.recorder import Recorder  # noqa: E402
from collectors.snapshots import OSSnapshot, PoolDetail, ProcessInfo  # noqa: E402

FIXTURES = ROOT.parent / "shared" / "fixtures"
DATA = ROOT / "tests" / "data" / "gb10"
NVIDIA_SMI = "nvidia-smi_gb10_vllm-61383MiB.txt"
FREE_H = "free-h_gb10_vllm-61383MiB.txt"
TOP = "top_gb10_vllm-61383MiB.txt"
DF = "df-h_gb10_vllm-61383MiB.txt"
MOMENT = "2026-03-29 20:25:44"  # the machine's local time (nvidia-smi: "Sun Mar 29 20:25:44 2026")
KIB, MIB = 2**10, 2**20
_HUMAN = {"Ki": KIB, "Mi": MIB, "Gi": 2**30, "Ti": 2**40, "K": 2**10, "M": 2**20, "G": 2**30, "": 1}


def _mib(text: str) -> int:
    """top's '122502.8' MiB -> bytes, to the KiB (top prints MiB with one decimal: 0.1 MiB resolution)."""
    return round(float(text) * 1024) * KIB


def parse_top(text: str) -> tuple[dict[str, int], list[tuple[int, str, int, str]]]:
    """top -b output -> ({"total","free","buff/cache","avail","swap_total","swap_free"}: bytes,
    [(pid, user, RES bytes, command)] of the rows with resident memory)."""
    number = r"\s*([\d.]+)"
    mem = re.search(rf"MiB Mem :{number} total,{number} free,{number} used,{number} buff/cache", text)
    swap = re.search(rf"MiB Swap:{number} total,{number} free,{number} used\.{number} avail", text)
    if mem is None or swap is None:
        raise ValueError("not top -b output: no 'MiB Mem :' / 'MiB Swap:' lines")
    figures = {
        "total": _mib(mem.group(1)),
        "free": _mib(mem.group(2)),
        "buff/cache": _mib(mem.group(4)),
        "swap_total": _mib(swap.group(1)),
        "swap_free": _mib(swap.group(2)),
        "avail": _mib(swap.group(4)),
    }
    rows = []
    for line in text.splitlines():
        cells = line.split()
        if len(cells) == 12 and cells[0].isdigit() and cells[5].isdigit() and int(cells[5]) > 0:
            rows.append((int(cells[0]), cells[1], int(cells[5]) * KIB, cells[11]))  # RES in KiB
    return figures, rows


def _human(cell: str) -> int:
    """free -h / df -h's '385Mi', '60G', '0' -> bytes (their rounding kept: these are not exact)."""
    match = re.fullmatch(r"([\d.]+)([KMGT]i?|)", cell)
    if match is None:
        raise ValueError(f"not a human-readable size: {cell!r}")
    return round(float(match.group(1)) * _HUMAN[match.group(2)])


def dev_shm_used(df_text: str) -> int:
    for line in df_text.splitlines():
        cells = line.split()
        if cells and cells[-1] == "/dev/shm":
            return _human(cells[2])
    raise ValueError("df -h output without /dev/shm")


def snapshots(t: float, fixtures: pathlib.Path = FIXTURES, data: pathlib.Path = DATA):
    """(NVMLSnapshot, OSSnapshot, PoolDetail) of the recorded moment, stamped t."""
    nvml = NVMLCollector(SmiBackend.from_text((fixtures / NVIDIA_SMI).read_text()), clock=lambda: t).sample()
    figures, rows = parse_top((data / TOP).read_text())
    shared = _human(parse_free_h_line((fixtures / FREE_H).read_text())["Mem.shared"])
    processes = tuple(
        ProcessInfo(pid, command, command, user, rss, None, False, start_ticks=0)
        for pid, user, rss, command in rows
    )
    host = OSSnapshot(
        t=t,
        mem_total=figures["total"],
        mem_available=figures["avail"],
        cached=figures["buff/cache"],  # procps' buff/cache: Buffers + Cached + SReclaimable, not split
        shmem=shared,
        swap_total=figures["swap_total"],
        swap_free=figures["swap_free"],
        psi_some_avg10=None,
        psi_full_avg10=None,
        oom_kill=None,
        processes=processes,
        mem_free=figures["free"],
        buffers=0,  # inside buff/cache above
    )
    detail = PoolDetail(t=t, dev_shm_used=dev_shm_used((data / DF).read_text()))
    return nvml, host, detail


def write(out: pathlib.Path, fixtures: pathlib.Path = FIXTURES, data: pathlib.Path = DATA) -> pathlib.Path:
    t = time.mktime(time.strptime(MOMENT, "%Y-%m-%d %H:%M:%S"))
    nvml, host, detail = snapshots(t, fixtures, data)
    recorder = Recorder(out, hz=0.0)
    recorder.nvml(nvml)
    recorder.os(host)
    recorder.pool(detail)
    recorder.close()
    # the header names the machine the recording is of (the Recorder wrote this one's name and clock)
    lines = out.read_text(encoding="utf-8").split("\n")
    header = json.loads(lines[0])
    header.update(host="a DGX Spark (GB10): scripts/gb10_recording.py", created=t)
    out.write_text("\n".join([json.dumps(header, separators=(",", ":")), *lines[1:]]), encoding="utf-8")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=pathlib.Path, help="the recording to write (.jsonl)")
    args = parser.parse_args()
    if not (FIXTURES / NVIDIA_SMI).is_file():
        print(f"gb10_recording: no shared fixtures at {FIXTURES}", file=sys.stderr)
        return 2
    print(write(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
