"""Value builders shared by the collectors tests: a 64 GiB host whose only moving parts are given."""

from __future__ import annotations

from collectors.snapshots import OSSnapshot, ProcessInfo

GiB = 2**30


def os_snapshot(t: float, available: int, procs: tuple[ProcessInfo, ...] = (), oom: int = 0) -> OSSnapshot:
    return OSSnapshot(
        t=t,
        mem_total=64 * GiB,
        mem_available=available,
        cached=0,
        shmem=0,
        swap_total=0,
        swap_free=0,
        psi_some_avg10=None,
        psi_full_avg10=None,
        oom_kill=oom,
        processes=tuple(procs),
    )
