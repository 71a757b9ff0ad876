"""A day-long recording made by the real Recorder (collectors/recorder.py), for the replay benches.

Synthetic samples, written through the same Recorder.os / agent / nvml / agent_info / alert / summary calls
the Monitor makes, at the monitor's default 2 Hz: a discrete 80 GiB GPU (NVML once a second: used, free,
utilization and its one process moving), one agent kept at 2 Hz (a decode loop whose KV cache grows and is
freed every minute, allocated / reserved / peak / segments / free moving with it), a process table of 24
processes rescanned once a second (a fifth of them changing size at each scan, one process starting and one
ending every 20 s), the agent's info file (the bundled transformers demo's last one) every 10 minutes, an
alert every hour and the run's summary at the end. Run by hand:

    python bench/day_recording.py --hours 24 --out /tmp/memsight-day.jsonl

bench/replay_cost.py makes (and caches) these files itself.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import random
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from collectors.recorder import Recorder  # noqa: E402
from collectors.snapshots import (  # noqa: E402
    AgentRecord,
    Alert,
    DeviceInfo,
    GpuProcess,
    NVMLSnapshot,
    OSSnapshot,
    ProcessInfo,
)
from collectors.summary import Peak, RunSummary  # noqa: E402

GiB = 2**30
HZ = 2.0
T0 = 1_780_000_000.0
AGENT_PID, AGENT_START = 4242, 777
AGENT_CMDLINE = "python serve.py --model llama-3.1-8b"


def _info() -> dict:
    """The bundled transformers demo's last agent info document (real content)."""
    path = REPO / "collectors" / "data" / "demo_transformers_generate.jsonl"
    last = None
    for line in path.read_text().splitlines():
        if '"k":"agent_info"' in line:
            last = json.loads(line)["info"]
    return last


class _Machine:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.next_pid = 10_000
        self.procs: dict[int, ProcessInfo] = {}
        self.born: dict[int, int] = {}  # pid -> the tick it started (new for a growth window after)
        for _ in range(23):
            self._spawn(-10_000)
        self.procs[AGENT_PID] = self._process(AGENT_PID, "python", AGENT_CMDLINE, 9 * GiB)
        self.table: tuple[ProcessInfo, ...] = ()

    def _process(self, pid: int, name: str, cmdline: str, rss: int, is_new: bool = False) -> ProcessInfo:
        user = self.rng.choice(("root", "ada"))
        return ProcessInfo(pid=pid, name=name, cmdline=cmdline, user=user, rss=rss, growth_bytes=0,
                           is_new=is_new, start_ticks=pid * 7, growth_window_s=30.0)  # fmt: skip

    def _spawn(self, tick: int) -> None:
        pid = self.next_pid
        self.next_pid += 1
        name = self.rng.choice(("python", "bash", "node", "sshd", "tmux: server", "jupyter-lab"))
        cmdline = f"{name} --worker {pid} --config /srv/jobs/job-{pid}.yaml"
        self.procs[pid] = self._process(pid, name, cmdline, self.rng.randrange(8, 2048) * 2**20)
        self.born[pid] = tick

    def scan(self, tick: int) -> tuple[ProcessInfo, ...]:
        rng = self.rng
        window = 30.0 + (tick % 4) * 0.25  # shared by every process older than the window, moving per scan
        if tick % 40 == 0:
            gone = rng.choice([pid for pid in self.procs if pid != AGENT_PID])
            del self.procs[gone]
            self._spawn(tick)
        for pid, p in list(self.procs.items()):
            rss = p.rss
            if pid == AGENT_PID:
                rss = 9 * GiB + (tick % 120) * 2**20
            elif rng.random() < 0.2:
                rss = max(4096, rss + rng.choice((-1, 1)) * rng.randrange(1, 64) * 4096)
            age = (tick - self.born.get(pid, -10_000)) / HZ  # a new process's window is its age
            self.procs[pid] = ProcessInfo(
                pid=p.pid, name=p.name, cmdline=p.cmdline, user=p.user, rss=rss,
                growth_bytes=rss - p.rss if age >= 30 else None, is_new=age < 30, start_ticks=p.start_ticks,
                growth_window_s=window if age >= 30 else age,
            )  # fmt: skip
        self.table = tuple(sorted(self.procs.values(), key=lambda q: q.rss, reverse=True))
        return self.table


PEAK = 16 * GiB + 119 * 48 * 2**20 + 2**21


def _record(tick: int, t: float) -> AgentRecord:
    """A decode loop on GPU 0: the KV cache grows for a minute, then the batch ends and it is freed."""
    phase = tick % 120
    kv = phase * 48 * 2**20
    allocated = 16 * GiB + kv + (phase % 3) * 2**20
    reserved = allocated + 2 * GiB - (phase % 5) * 2**20
    return AgentRecord(
        t=t, device=0, cuda_state="ok", allocated=allocated, reserved=reserved,
        peak_allocated=PEAK, active=allocated, inactive_split=(phase % 7) * 2**20,
        alloc_retries=0, num_ooms=0, segments=40 + phase // 10, large_pool_reserved=reserved - 64 * 2**20,
        small_pool_reserved=64 * 2**20, cuda_free=80 * GiB - reserved - GiB, cuda_total=80 * GiB,
        is_integrated=False, rss=9 * GiB + phase * 2**20, weights_bytes=16 * GiB, kv_bytes=kv,
        step_index=tick * 20, step_label="decode", step_t=t - 0.01, tick_cost_s=1.2e-4 + (tick % 9) * 1e-6,
    )  # fmt: skip


def _nvml(tick: int, t: float, record: AgentRecord) -> NVMLSnapshot:
    used = record.reserved + GiB
    device = DeviceInfo(
        index=0, name="NVIDIA H100 80GB HBM3", uuid="GPU-3f1c2d7e-8a41-4b7c-9a1e-5d2f0c6b9e41",
        total=80 * GiB, reserved=512 * 2**20, used=used, free=80 * GiB - used - 512 * 2**20, unified=False,
        utilization_gpu=float(60 + tick % 37), processes=(GpuProcess(AGENT_PID, used, "compute"),),
        unsupported=(),
    )  # fmt: skip
    return NVMLSnapshot(status="ok", available=True, devices=(device,), t=t, driver_version="580.65.06")


def make(path: str | pathlib.Path, hours: float, seed: int = 20) -> dict:
    """Write the recording; returns what was written (ticks, bytes, seconds of recording)."""
    rng = random.Random(seed)
    machine = _Machine(rng)
    info = _info()
    ticks = int(hours * 3600 * HZ)
    recorder = Recorder(path, hz=HZ, agent_hz=HZ)
    table: tuple[ProcessInfo, ...] = ()
    for tick in range(ticks):
        t = T0 + tick / HZ
        if tick % 2 == 0:
            table = machine.scan(tick)
        available = 60 * GiB - (tick % 120) * 48 * 2**20 + rng.randrange(0, 64) * 2**20
        cached = 20 * GiB + (tick // 600) * 2**20
        recorder.os(
            OSSnapshot(t=t, mem_total=128 * GiB, mem_available=available, cached=cached, shmem=512 * 2**20,
                       swap_total=8 * GiB, swap_free=8 * GiB, psi_some_avg10=0.0, psi_full_avg10=0.0,
                       oom_kill=0, processes=table)  # fmt: skip
        )
        record = _record(tick, t - 0.05)
        if tick % 2 == 0:
            recorder.nvml(_nvml(tick, t, record))
        rate = 10.0 if tick % 600 else 9.9  # measured on the last 64 records: steady, now and then a jitter
        recorder.agent(AGENT_PID, AGENT_START, AGENT_CMDLINE, "/tmp/memsight-0/agent.ring", 10.0, (record,),
                       "ok", True, 0, rate)  # fmt: skip
        if tick % 1200 == 0:
            recorder.agent_info(AGENT_PID, AGENT_START, t, {**info, "t": t, "pid": AGENT_PID})
        if tick % 7200 == 3600:
            message = f"pid {AGENT_PID} (python serve.py) grew 2.10 GiB in 30 s"
            recorder.alert(Alert(t, "process_growth", "warning", message, pid=AGENT_PID, value=2.1 * GiB))
    end = T0 + (ticks - 1) / HZ
    kv = 119 * 48 * 2**20
    peaks = (Peak("kv", kv, end - 1), Peak("reserved", 18 * GiB + kv, end))
    recorder.summary(RunSummary(start_t=T0, end_t=end, peaks=peaks, lowest_headroom=60 * GiB - kv,
                                lowest_headroom_t=end, headroom_source="device free (NVML)", alerts=(),
                                alerts_total=math.ceil(ticks / 7200)))  # fmt: skip
    recorder.close()
    size = pathlib.Path(path).stat().st_size
    return {"ticks": ticks, "bytes": size, "seconds": ticks / HZ, "bytes_per_s": size / (ticks / HZ)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--out", default="/tmp/memsight-day.jsonl")
    args = parser.parse_args()
    started = time.perf_counter()
    made = make(args.out, args.hours)
    print(f"{args.out}: {made['ticks']:,} ticks, {made['bytes']:,} bytes ({made['bytes_per_s']:.0f} B/s of "
          f"recording), written in {time.perf_counter() - started:.1f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    from taken import finish  # bench/taken.py: the date and machine, for the README

    sys.exit(finish(main()))
