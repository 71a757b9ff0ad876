"""The end-of-run summary (collectors/summary.py's RunSummary) as short lines: what the Live screen shows
when the run ends and what `memsight run` prints (summary_lines)."""

from __future__ import annotations

from collectors.summary import PEAK_KEYS, RunSummary, clock
from tui.widgets.fmt import figure, size, unit_for

# --- the end-of-run summary, as the Live screen shows it and memsight run prints it ----------------------
# the peaks that choose the summary's unit: the program's own (the system's used memory is the machine's)
SUMMARY_UNIT_KEYS = frozenset(
    {"weights", "kv", "activations", "tensors", "gap", "non_torch", "allocated", "reserved"}
)


def summary_lines(s: RunSummary, alert_lines: int = 5) -> list[str]:
    """The summary (collectors/summary.py) as short lines, each figure labelled with its unit; the last
    `alert_lines` alerts are listed after their count."""
    labels = dict(PEAK_KEYS)
    lines = [f"run summary: {clock(s.start_t)} to {clock(s.end_t)} ({s.end_t - s.start_t:.0f} s)"]
    if s.peaks:
        unit = unit_for(p.bytes for p in s.peaks if p.key in SUMMARY_UNIT_KEYS)
        parts = [f"{labels[p.key]} {figure(p.bytes, unit)}" for p in s.peaks]
        lines.append(f"peak {unit.name}: " + " · ".join(parts) + (f" — {s.scope}" if s.scope else ""))
    else:
        lines.append("peak: nothing measured")
    gap = s.peak("gap")
    if gap is None:
        lines.append("peak reserved − allocated: unknown (no allocator counters: no agent, or no CUDA)")
    else:
        lines.append(f"peak reserved − allocated: {size(gap.bytes)} at {clock(gap.t)}")
    if s.lowest_headroom is None:
        lines.append("lowest headroom: unknown")
    else:
        when = clock(s.lowest_headroom_t or s.end_t)
        lines.append(f"lowest headroom: {size(s.lowest_headroom)} ({s.headroom_source}) at {when}")
    if not s.alerts_total:
        lines.append("alerts: none")
    else:
        by: dict[str, int] = {}
        for a in s.alerts:
            by[a.severity] = by.get(a.severity, 0) + 1
        counts = ", ".join(f"{n} {sev}" for sev, n in sorted(by.items()))
        lines.append(f"alerts: {s.alerts_total} ({counts})")
        if alert_lines > 0:
            lines.extend(f"  {clock(a.t)} {a.severity.upper()} {a.message}" for a in s.alerts[-alert_lines:])
    return lines
