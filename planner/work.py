"""Work and traffic: ideal causal-prefill attention work, the one-read decode traffic bound, a roofline.

These are capacity's companions, not part of the memory budget: bytes of capacity never mix with bytes per
second here. Bandwidths are decimal GB/s (10**9 bytes per second), the way vendors and the roofline lab
quote them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.errors import PlannerError
from planner.kv import kv_bytes_for_sequence
from planner.params import ParamCount
from planner.spec import AttentionSpec, ModelSpec
from planner.units import GB


def causal_pairs(tokens: int, window: int | None = None) -> int:
    """Query-key pairs a causal mask permits over `tokens` positions: query i (1-based) sees min(i, W) keys.

    Full causal: N(N+1)/2. Sliding window W: W(W+1)/2 for the first W queries, then W for each of the rest.
    """
    if tokens < 0:
        raise PlannerError(f"token count must not be negative, got {tokens}")
    if window is None or window >= tokens:
        return tokens * (tokens + 1) // 2
    if window <= 0:
        raise PlannerError(f"sliding window must be positive, got {window}")
    return window * (window + 1) // 2 + (tokens - window) * window


def _compute_head_dims(attention: AttentionSpec, spec: ModelSpec) -> tuple[int, int]:
    """(QK width, AV width) of one query head as the math runs, which for MLA is not what the cache stores."""
    if attention.kind == "mla":
        config = spec.config
        try:
            qk = int(config["qk_nope_head_dim"]) + int(config["qk_rope_head_dim"])
            v = int(config["v_head_dim"])
        except (KeyError, TypeError, ValueError) as exc:
            raise PlannerError(f"MLA config lacks {exc} needed for the attention work") from exc
        return qk, v
    return attention.k_head_dim, attention.v_head_dim or attention.k_head_dim


def attention_prefill_flops(spec: ModelSpec, tokens: int, layers: Sequence[int] | None = None) -> int:
    """Ideal attention work of one causal prefill of `tokens` tokens, multiply and add counted as two.

    Per layer: pairs x n_q x (d_qk + d_v) x 2 (QK^T and the value accumulation). For full attention with
    d_qk = d_v = d that is 2 n_q d N(N+1), the textbook expression; sliding layers use their own pair count.
    Linear/state-space layers do no pairwise work and count zero. Projections, MLP, softmax are excluded.
    """
    chosen = range(spec.num_layers) if layers is None else layers
    total = 0
    for index in chosen:
        attention = spec.layers[index].attention
        if attention is None or attention.kind in ("linear", "mamba"):
            continue
        window = attention.window if attention.kind == "sliding" else None
        d_qk, d_v = _compute_head_dims(attention, spec)
        total += 2 * causal_pairs(tokens, window) * attention.num_q_heads * (d_qk + d_v)
    return total


@dataclass(frozen=True, slots=True)
class DecodeTraffic:
    weight_bytes_read: int  # weights one decode step must stream: active parameters only for MoE
    kv_bytes_read: int  # every retained KV byte of every sequence, read once
    total_bytes: int
    bandwidth_gbs: float | None
    step_seconds: float | None  # lower bound: total / bandwidth
    tokens_per_second_per_user: float | None  # ceiling
    tokens_per_second_total: float | None  # ceiling, all users together


def decode_traffic(
    spec: ModelSpec,
    params: ParamCount,
    weight_total_bytes: int,
    *,
    context: int,
    users: int = 1,
    kv_dtype: str = "auto",
    bandwidth_gbs: float | None = None,
) -> DecodeTraffic:
    """One-read lower bound of the bytes a decode step moves, and the tokens/s ceiling that implies.

    Weights read = the stored weight bytes scaled by active / total parameters (a MoE token touches only its
    experts; dense models read everything). KV read = each user's retained history once.
    """
    if context < 0 or users < 0:
        raise PlannerError(f"context and users must not be negative (got {context}, {users})")
    if params.total <= 0:
        raise PlannerError("model has no parameters")
    weight_read = weight_total_bytes * params.active_per_token // params.total
    kv_read = users * kv_bytes_for_sequence(spec, context, kv_dtype)
    total = weight_read + kv_read
    if bandwidth_gbs is None:
        return DecodeTraffic(weight_read, kv_read, total, None, None, None, None)
    if bandwidth_gbs <= 0:
        raise PlannerError(f"bandwidth must be positive, got {bandwidth_gbs} GB/s")
    step = total / (bandwidth_gbs * GB)
    per_user = 1.0 / step if step > 0 else float("inf")
    return DecodeTraffic(weight_read, kv_read, total, bandwidth_gbs, step, per_user, per_user * users)


def roofline_gflops(intensity: float, bandwidth_gbs: float, peak_gflops: float = 1000.0) -> float:
    """Attainable GFLOP/s = min(peak, I x B): I in FLOP/byte, B in decimal GB/s."""
    if intensity < 0 or bandwidth_gbs < 0 or peak_gflops <= 0:
        raise PlannerError(
            f"roofline needs intensity >= 0, bandwidth >= 0 and peak > 0 "
            f"(got I={intensity}, B={bandwidth_gbs}, peak={peak_gflops})"
        )
    return min(peak_gflops, intensity * bandwidth_gbs)
