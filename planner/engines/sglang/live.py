"""SGLang's buckets from its own log, for the Live screen and the recording
(planner.engines.base.LiveBuckets).

Per rank (the smallest one, as the pool every rank then uses): weights = "Load weight end ... mem usage";
KV = the K and V buffers ("KV Cache is allocated": K size + V size, or the MLA pool's KV size); activations
are not logged; overhead = the CUDA graphs' "mem usage" (decode and piecewise) plus what the free memory fell
by between the weights and "Memory pool end" beyond the KV buffers (the request-to-token table and the
allocator's free lists).
"""

from __future__ import annotations

from planner.engines.base import DeviceBuckets, LiveBuckets
from planner.engines.sglang.log import SGLangLog


def live_buckets(log: SGLangLog) -> LiveBuckets | None:
    if not log.is_sglang:
        return None
    sources: list[str] = []

    def fig(name: str):
        f = log.smallest(name)
        return f

    weights = fig("weights")
    k, v, kv_fig = fig("k_size"), fig("v_size"), fig("kv_size")
    kv_bytes = None
    if k is not None and v is not None:
        kv_bytes = k.bytes + v.bytes
        sources.append(f"KV: 'KV Cache is allocated' K + V size (line {k.line})")
    elif kv_fig is not None:
        kv_bytes = kv_fig.bytes
        sources.append(f"KV: 'KV Cache is allocated' KV size (line {kv_fig.line})")
    if weights is not None:
        sources.append(f"weights: 'Load weight end' mem usage (line {weights.line})")
    overhead = None
    after, pool_end = fig("free_after_weights"), fig("free_after_pool")
    if after is not None and pool_end is not None and kv_bytes is not None:
        overhead = max(0, after.bytes - pool_end.bytes - kv_bytes)
        sources.append(
            f"overhead: free memory fallen beyond the KV buffers by 'Memory pool end' (line {pool_end.line})"
        )
    graphs = [g for g in (fig("graphs"), fig("piecewise_graphs")) if g is not None]
    if graphs:
        overhead = (overhead or 0) + sum(g.bytes for g in graphs)
        sources.append(
            "overhead: CUDA graphs' mem usage (line " + ", ".join(str(g.line) for g in graphs) + ")"
        )
    ranks = max(1, len({f.rank for f in log.figures.get("kv_tokens", ()) or log.figures.get("k_size", ())}))
    figures = tuple(
        (name, float(f.bytes) if f.unit == "GiB" else f.value)
        for name in sorted(log.figures)
        if (f := log.smallest(name)) is not None
    )
    device = DeviceBuckets("GPU", None if weights is None else weights.bytes, kv_bytes, None, overhead)
    return LiveBuckets("sglang", log.stage, (device,), tuple(sources), figures, ranks)
