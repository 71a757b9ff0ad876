"""Alert rules: pure functions over a history of MonitorStates, thresholds as options.

`evaluate(history, options)` looks at the newest state and, where a rule needs a change, at the states
before it; it returns the alerts true *now* (the monitor keeps the recent ones in MonitorState.alerts).
"""

from __future__ import annotations

from collections.abc import Sequence

from collectors.alert_options import AlertOptions, GiB  # AlertOptions: the rules' thresholds
from collectors.runway import headroom_runway
from collectors.snapshots import Alert, MonitorState, held_bytes


def _gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def headroom(state: MonitorState, o: AlertOptions) -> list[Alert]:
    if state.headroom_bytes is None:
        return []
    h = state.headroom_bytes
    if h < o.headroom_critical_bytes:
        severity = "critical"
    elif h < o.headroom_warning_bytes:
        severity = "warning"
    else:
        return []
    return [
        Alert(
            state.t,
            "headroom",
            severity,
            f"headroom {_gib(h)} ({state.headroom_source}) under {_gib(o.headroom_warning_bytes)}",
            value=float(h),
        )
    ]


def new_processes(state: MonitorState, o: AlertOptions) -> list[Alert]:
    if state.os is None:
        return []
    out = []
    for p in state.os.processes:
        held = held_bytes(p)
        if p.is_new and held > o.new_process_bytes:
            out.append(
                Alert(
                    state.t,
                    "new_process",
                    "warning",
                    f"new process {p.pid} ({p.label}) holds {_gib(held)}",
                    pid=p.pid,
                    value=float(held),
                )
            )
    return out


def process_growth(history: Sequence[MonitorState], o: AlertOptions) -> list[Alert]:
    """A process whose RSS + GPU bytes grew more than growth_bytes within growth_window_s."""
    now = history[-1]
    if now.os is None:
        return []
    base = None
    for s in history:  # the oldest state inside the window
        if s.os is not None and now.t - s.t <= o.growth_window_s:
            base = s
            break
    earlier = {}
    if base is not None and base is not now:
        earlier = base.bytes_by_process()
    out = []
    for p in now.os.processes:
        before = earlier.get((p.pid, p.start_ticks))
        grown = None
        if before is not None:
            grown = held_bytes(p) - before
        elif p.growth_bytes is not None and p.growth_window_s <= o.growth_window_s * 1.05:
            grown = p.growth_bytes  # the OS collector's own window (RSS only)
        if grown is not None and grown > o.growth_bytes:
            out.append(
                Alert(
                    now.t,
                    "process_growth",
                    "warning",
                    f"pid {p.pid} ({p.label}) grew {_gib(grown)} in {o.growth_window_s:.0f} s",
                    pid=p.pid,
                    value=float(grown),
                )
            )
    return out


def allocator_failures(history: Sequence[MonitorState], o: AlertOptions) -> list[Alert]:
    """alloc retries or OOM count rising in any agent between the oldest and newest state."""
    now = history[-1]
    first: dict[tuple[int, int], tuple[int | None, int | None]] = {}
    for s in history:
        for a in s.agents:
            for r in a.latest:
                first.setdefault((a.pid, r.device), (r.alloc_retries, r.num_ooms))
    out = []
    for a in now.agents:
        for r in a.latest:
            retries0, ooms0 = first.get((a.pid, r.device), (None, None))
            if r.alloc_retries is not None and retries0 is not None and r.alloc_retries > retries0:
                out.append(
                    Alert(
                        now.t,
                        "alloc_retries",
                        "warning",
                        f"pid {a.pid} GPU {r.device}: cudaMalloc retries rose "
                        f"{retries0} -> {r.alloc_retries} (cache flushed to fit)",
                        pid=a.pid,
                        device=r.device,
                        value=float(r.alloc_retries),
                    )
                )
            if r.num_ooms is not None and ooms0 is not None and r.num_ooms > ooms0:
                out.append(
                    Alert(
                        now.t,
                        "ooms",
                        "critical",
                        f"pid {a.pid} GPU {r.device}: CUDA OOMs rose {ooms0} -> {r.num_ooms}",
                        pid=a.pid,
                        device=r.device,
                        value=float(r.num_ooms),
                    )
                )
    return out


def oom_kills(history: Sequence[MonitorState], o: AlertOptions) -> list[Alert]:
    counts = [s.os.oom_kill for s in history if s.os is not None and s.os.oom_kill is not None]
    if len(counts) >= 2 and counts[-1] > counts[0]:
        return [
            Alert(
                history[-1].t,
                "oom_kill",
                "critical",
                f"the kernel OOM killer ran {counts[-1] - counts[0]} time(s) (vmstat oom_kill "
                f"{counts[0]} -> {counts[-1]})",
                value=float(counts[-1] - counts[0]),
            )
        ]
    return []


def driver_oom(history: Sequence[MonitorState], o: AlertOptions) -> list[Alert]:
    """The NVIDIA driver's out-of-memory lines (NV_ERR_NO_MEMORY) rising in the kernel log: on a GB10 they
    come while MemAvailable still looks healthy, so the headroom rule alone would say nothing."""
    logs = [s.pool.kernel_log for s in history if s.pool is not None and s.pool.kernel_log is not None]
    logs = [log for log in logs if log.readable]
    # since_start is 0 in the first state a monitor builds; a replay builds its first state after a step,
    # so a lone state is compared with that 0
    baseline = logs[0].since_start if len(logs) >= 2 else 0
    if not logs or logs[-1].since_start <= baseline:
        return []
    now = history[-1]
    new = logs[-1].since_start - baseline
    headroom_text = "unknown" if now.headroom_bytes is None else _gib(now.headroom_bytes)
    last = logs[-1].last_lines[-1] if logs[-1].last_lines else ""
    return [
        Alert(
            now.t,
            "driver_oom",
            "warning",
            f"the NVIDIA driver could not get memory {new} time(s) (kernel log, NV_ERR_NO_MEMORY) while "
            f"headroom reads {headroom_text} ({now.headroom_source}); last: {last[:120]}",
            value=float(new),
        )
    ]


def fragmentation(state: MonitorState, o: AlertOptions) -> list[Alert]:
    out = []
    for b in state.buckets:
        if b.allocator_gap_bytes is None or not b.reserved:
            continue
        gap = b.allocator_gap_bytes
        if gap > o.fragmentation_min_bytes and gap > o.fragmentation_fraction * b.reserved:
            out.append(
                Alert(
                    state.t,
                    "fragmentation",
                    "warning",
                    f"pid {b.pid} GPU {b.device}: reserved − allocated = {_gib(gap)} "
                    f"({100 * gap / b.reserved:.0f}% of {_gib(b.reserved)} reserved)",
                    pid=b.pid,
                    device=b.device,
                    value=float(gap),
                )
            )
    return out


def evaluate(history: Sequence[MonitorState], options: AlertOptions | None = None) -> tuple[Alert, ...]:
    """Every rule over `history` (oldest first); empty history gives no alerts."""
    if not history:
        return ()
    o = options or AlertOptions()
    now = history[-1]
    return tuple(
        [
            *headroom(now, o),
            *new_processes(now, o),
            *process_growth(history, o),
            *allocator_failures(history, o),
            *oom_kills(history, o),
            *driver_oom(history, o),
            *headroom_runway(history, o),
            *fragmentation(now, o),
        ]
    )
