"""The Live screen's lines about other machines (--peer): one line each, from MonitorState.peers."""

from __future__ import annotations

import urllib.parse

from collectors.snapshots import MonitorState, PeerSnapshot
from tui.widgets.fmt import GIB

BUCKET_NAMES = {"weights": "weights", "kv": "KV", "activations": "activations", "overhead": "overhead"}


def _g(n: int | None) -> str:
    return "n/a" if n is None else f"{n / GIB:.1f}"


def _where(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc or url


def peer_line(p: PeerSnapshot, now: float) -> str:
    """'peer spark-b:9400: headroom 12.3 of 121.7 GiB (MemAvailable) · weights 30.1 · ... · 1 s ago'."""
    name = f"peer {_where(p.url)}"
    if p.ok_t is None:
        return f"{name}: {p.status}"
    figures = f"headroom {_g(p.headroom_bytes)} of {_g(p.total_bytes)} GiB ({p.headroom_source or '?'})"
    known = [(BUCKET_NAMES[k], n) for k, n in p.buckets if n is not None]
    if known:
        figures += " · " + " · ".join(f"{k} {_g(n)}" for k, n in known) + f" GiB over {p.agents} agent(s)"
    else:
        figures += " · no agent there"
    if p.warnings or p.criticals:
        figures += f" · alerts: {p.criticals} critical, {p.warnings} warning"
    if p.status != "ok":
        return f"{name}: {p.status} · last seen {max(0.0, now - p.ok_t):.0f} s ago: {figures}"
    return f"{name}: {figures} · {max(0.0, now - p.ok_t):.0f} s ago"


def peer_lines(state: MonitorState) -> tuple[str, ...]:
    return tuple(peer_line(p, state.t) for p in state.peers)
