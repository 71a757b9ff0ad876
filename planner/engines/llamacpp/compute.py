"""llama.cpp's compute buffer on the GPU, PREDICTED approximately from the reserve graph's largest tensors.

llama.cpp sizes the compute buffer by building the worst-case graph (n_ubatch tokens against the whole KV
cache, every position an output) and letting ggml-alloc place its tensors (src/llama-context.cpp
graph_reserve / sched_reserve in ggml-org/llama.cpp@0c1e57098). ggml-alloc reuses memory as tensors die, so
the buffer is the peak of the tensors alive together, not their sum; memsight does not replay the allocator.
It takes the largest of the graph's big tensors, each f32, plus the residual stream:
- the logits: n_vocab x n_ubatch x 4 B (on the output layer's device; llama-graph.cpp build_inp_out_ids keeps
  every row at reserve time);
- without flash attention, the attention scores: n_kv x n_ubatch x n_head x 4 B (kq = mul_mat(k, q), then
  soft_max in place; llama-graph.cpp build_attn_mha); with flash attention they are never materialized;
- the feed-forward: gate and up, n_ff x n_ubatch x 4 B each (MoE: the selected experts' n_ff_exp x
  n_expert_used);
- plus 3 x n_embd x n_ubatch x 4 B of residual, norm and attention output alive across them.
This is an APPROXIMATION (a lower bound of the allocator's peak): its error on the cited logs is in the README
table (tests/planner/test_llamacpp_logs.py); the smaller live tensors and alignment are what it leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass

F32 = 4
MiB = 2**20


@dataclass(frozen=True, slots=True)
class ComputeShape:
    n_vocab: int
    n_embd: int
    n_head: int
    n_ff: int  # dense width, or n_ff_exp x n_expert_used for MoE


@dataclass(frozen=True, slots=True)
class ComputeEstimate:
    bytes: int
    largest: str
    terms: tuple[str, ...]


def gpu_compute_bytes(
    shape: ComputeShape, *, n_ubatch: int, n_kv: int, flash_attn: bool, output_on_gpu: bool
) -> ComputeEstimate:
    logits = shape.n_vocab * n_ubatch * F32 if output_on_gpu else 0
    scores = 0 if flash_attn else n_kv * n_ubatch * shape.n_head * F32
    ffn = 2 * shape.n_ff * n_ubatch * F32
    residual = 3 * shape.n_embd * n_ubatch * F32
    candidates = {"logits": logits, "attention scores": scores, "feed-forward": ffn}
    largest = max(candidates, key=lambda k: candidates[k])
    total = candidates[largest] + residual
    terms = (
        f"logits {shape.n_vocab} x {n_ubatch} x 4 = {logits:,} B"
        + ("" if output_on_gpu else " (output layer on the CPU: not here)"),
        f"attention scores {n_kv} x {n_ubatch} x {shape.n_head} heads x 4 = {scores:,} B"
        + (" (flash attention: not materialized)" if flash_attn else ""),
        f"feed-forward gate + up 2 x {shape.n_ff} x {n_ubatch} x 4 = {ffn:,} B",
        f"largest: {largest}; + residual 3 x {shape.n_embd} x {n_ubatch} x 4 = {residual:,} B -> {total:,} B "
        f"({total / MiB:.2f} MiB), APPROXIMATE (ggml-alloc's peak is not replayed)",
    )
    return ComputeEstimate(total, largest, terms)
