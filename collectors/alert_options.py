"""The alert rules' thresholds (collectors/alerts.py), in a module of their own: the config file's reader
(tui/config.py) builds them before the Live screen's first frame, which does not wait for the rules, the
snapshots they read or the runway's statistics (issue 20)."""

from __future__ import annotations

from dataclasses import dataclass

GiB = 2**30


@dataclass(frozen=True, slots=True)
class AlertOptions:
    headroom_warning_bytes: int = 8 * GiB
    headroom_critical_bytes: int = 2 * GiB
    new_process_bytes: int = 1 * GiB  # a process that appeared recently and holds more than this
    growth_bytes: int = 2 * GiB  # a process growing more than this ...
    growth_window_s: float = 30.0  # ... within this window
    fragmentation_fraction: float = 0.30  # reserved − allocated over this share of reserved ...
    fragmentation_min_bytes: int = 1 * GiB  # ... and over this many bytes
    # time until headroom reaches the critical line, from its trend over runway_window_s (headroom_runway);
    # the horizon is ten windows: a trend is not extrapolated much further than it was seen
    runway_window_s: float = 60.0  # the trend's window (the StateBuilder keeps 60 s of states for the rules)
    runway_warning_s: float = 10 * 60.0  # warn when it is gone sooner than this ...
    runway_critical_s: float = 2 * 60.0  # ... critical sooner than this
    runway_min_bytes: int = 256 * 2**20  # a fall smaller than this over the window is no trend
