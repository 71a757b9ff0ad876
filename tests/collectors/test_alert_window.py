"""The states the alert rules keep for their window (StateBuilder.recent, a minute at the monitor's rate) hold
each process's bytes alone, packed (MonitorState.process_bytes): what the growth and runway rules read of an
older state, at 8 bytes a figure instead of a table of ProcessInfo (issue 20's resident memory)."""

from __future__ import annotations

from collectors.snapshots import ProcessBytes, ProcessInfo
from collectors.state import StateBuilder
from tests.collectors.builders import os_snapshot

GiB, MiB = 2**30, 2**20


def process(pid: int, rss: int, gpu: int | None = None) -> ProcessInfo:
    # growth_bytes None: the OS collector's own window says nothing, so a growth alert can only come from
    # comparing with an older state's table
    return ProcessInfo(pid=pid, name="python", cmdline=f"python job{pid}.py", user="me", rss=rss,
                       growth_bytes=None, is_new=False, gpu_bytes=gpu, start_ticks=pid * 10)  # fmt: skip


def test_older_states_keep_each_process_bytes_and_the_growth_rule_reads_them():
    builder = StateBuilder()
    for k in range(40):  # pid 10 grows 100 MiB a second; pid 11 holds 2 GiB of RSS and 1 GiB on a GPU
        table = (process(10, GiB + k * 100 * MiB), process(11, 2 * GiB, gpu=GiB))
        builder.update_os(os_snapshot(1000.0 + k, 32 * GiB, table))
        state = builder.build(1000.0 + k)
    assert state.process_bytes is None and len(state.os.processes) == 2  # the screens get the table whole
    kept = list(builder.recent)
    assert all(s.os.processes == () and s.process_bytes is not None for s in kept)
    first = kept[0]
    k0 = round(first.t - 1000.0)
    assert first.bytes_by_process() == {(10, 100): GiB + k0 * 100 * MiB, (11, 110): 3 * GiB}
    growth = [a for a in builder.alerts if a.kind == "process_growth"]
    # raised once, at 21 s: 2,100 MiB since the first state (the oldest in the 30 s window), over the 2 GiB
    # default; pid 11 held the same bytes throughout
    assert [(a.pid, a.value) for a in growth] == [(10, 21 * 100 * MiB)]


def test_a_table_packs_to_three_int64_a_process():
    table = (process(10, 5 * GiB), process(11, 2 * GiB, gpu=GiB))
    packed = ProcessBytes.of(table)
    assert packed.packed.itemsize == 8 and list(packed.packed) == [10, 100, 5 * GiB, 11, 110, 3 * GiB]
    assert packed.by_process() == {(10, 100): 5 * GiB, (11, 110): 3 * GiB}
