"""The Live screen's tables and chart, from a MonitorState (collectors): the process rows (process_rows),
the agent rows (agent_rows), the alert rows (alert_rows) and the gap chart's series (chart_series); and what
`memsight run` keeps of a state (run_scope: only its own agents; own_pids).

Pure: the same state always gives the same values (no clock, no hostname, no /proc), so snapshot tests are
deterministic.
"""

from __future__ import annotations

from dataclasses import replace

from collectors.alerts import AlertOptions
from collectors.snapshots import AgentView, MonitorState, short_command
from tui.widgets.data import AgentRow, AlertRow, ChartSeries, ProcessRow

# an agent sampling at under this share of its asked rate shows both rates in its row
HELD_RATE_SHOWN_BELOW = 0.8


def run_scope(state: MonitorState, own: frozenset[int]) -> MonitorState:
    """The state as `memsight run`'s bars and plans see it: only the command's own agents (`own`, from
    RunChild.family). Other agents in the same directory (another run's) drop out of the measured buckets,
    so what they hold is drawn with "other procs / OS" (their processes stay listed as processes)."""
    buckets = tuple(b for b in state.buckets if b.pid in own)
    agents = tuple(a for a in state.agents if a.pid in own)
    if len(buckets) == len(state.buckets) and len(agents) == len(state.agents):
        return state
    return replace(state, buckets=buckets, agents=agents)


def own_pids(state: MonitorState) -> frozenset[int]:
    """The experiments' processes: every agent's (under `memsight run` the app keeps only the command's own,
    tui/cmd_run.py RunChild.family)."""
    return frozenset(a.pid for a in state.agents)


def process_rows(
    state: MonitorState, thresholds: AlertOptions, own: frozenset[int] = frozenset()
) -> tuple[ProcessRow, ...]:
    if state.os is None:
        return ()
    return tuple(
        ProcessRow(
            pid=p.pid,
            name=p.name,
            user=p.user,
            rss=p.rss,
            gpu_bytes=p.gpu_bytes,
            growth_bytes=p.growth_bytes,
            is_new=p.is_new,
            fast_growing=p.growth_bytes is not None and p.growth_bytes > thresholds.growth_bytes,
            cmdline=p.cmdline,
            command=p.label,
            own=p.pid in own,
        )
        for p in state.os.processes
    )


def agent_rows(state: MonitorState) -> tuple[AgentRow, ...]:
    """One row per agent and device (a rank); the one holding the most (reserved) is the busiest."""
    rows: list[AgentRow] = []
    for agent in state.agents:
        records = [r for r in agent.latest if r.device >= 0] or list(agent.latest[:1])
        for rec in records:
            gap = None if rec.reserved is None or rec.allocated is None else rec.reserved - rec.allocated
            where = f"cuda:{rec.device}" if rec.device >= 0 else _short_state(rec.cuda_state)
            if not agent.alive:
                where = "exited"  # its last figures stay in the row
            rows.append(
                AgentRow(
                    pid=agent.pid,
                    label=f"{_short_cmd(agent)}{_held_rate(agent)}",
                    allocated=rec.allocated,
                    reserved=rec.reserved,
                    gap=gap,
                    retries=rec.alloc_retries,
                    ooms=rec.num_ooms,
                    busiest=False,
                    where=where,
                    key=f"{agent.pid}/{agent.start_ticks}/{rec.device}",
                )
            )
    if len(rows) > 1:
        busiest = max(range(len(rows)), key=lambda i: (rows[i].reserved or 0, rows[i].allocated or 0))
        r = rows[busiest]
        rows[busiest] = replace(r, busiest=True)
    return tuple(rows)


def _held_rate(agent: AgentView) -> str:
    """' · 38/100 Hz' when the agent's CPU budget holds it well below the asked rate, else nothing."""
    sampled = agent.sampled_hz
    if sampled is None or not agent.alive or sampled >= HELD_RATE_SHOWN_BELOW * agent.hz:
        return ""
    return f" · {sampled:.0f}/{agent.hz:.0f} Hz"


def _short_state(cuda_state: str) -> str:
    short = {"CUDA not initialized": "no CUDA yet", "torch not imported": "no torch"}
    return short.get(cuda_state, cuda_state)


def _short_cmd(agent: AgentView) -> str:
    return short_command(agent.cmdline, max_words=2, width=28) or f"pid {agent.pid}"


def alert_rows(state: MonitorState, origin_t: float) -> tuple[AlertRow, ...]:
    """Alert times relative to `origin_t` (the first state the app saw), never the wall clock."""
    return tuple(AlertRow(f"t+{a.t - origin_t:.1f}s", a.severity, a.message) for a in state.alerts)


def chart_series(state: MonitorState) -> ChartSeries:
    history = state.history
    if "allocated" not in history or "reserved" not in history or not history["allocated"][0]:
        if state.agents:
            states = sorted({r.cuda_state for a in state.agents for r in a.latest} - {"ok"})
            why = f"agent attached, no allocator counters yet ({', '.join(states) or 'no samples'})"
        else:
            why = "no PyTorch agent: allocated / reserved / gap need `memsight run -- CMD`"
        times, values = history.get("headroom", ((), ()))
        if state.headroom_source == "MemAvailable" and len(history.get("available", ((),))[0]) > len(times):
            times, values = history["available"]  # the same quantity, sampled with every OS tick
        n = min(len(times), len(values))
        if n < 2:
            return ChartSeries((), (), (), (), why)
        return ChartSeries(
            (), (), (), (), why,
            fallback_label=f"headroom ({state.headroom_source})",
            fallback_t=tuple(round(t - times[0], 3) for t in times[:n]),
            fallback=tuple(values[:n]),
        )
    times, allocated = history["allocated"]
    _, reserved = history["reserved"]
    if "gap" in history:
        _, gap = history["gap"]
    else:
        gap = tuple(r - a for r, a in zip(reserved, allocated, strict=False))
    n = min(len(times), len(allocated), len(reserved), len(gap))
    t0 = times[0]
    return ChartSeries(
        tuple(round(t - t0, 3) for t in times[:n]),
        tuple(allocated[:n]),
        tuple(reserved[:n]),
        tuple(gap[:n]),
    )
