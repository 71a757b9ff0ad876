"""llama.cpp's worst-case compute graph, built as llama.cpp builds it at start-up (tensor shapes only), for
the architectures whose graph follows llama's (llama, mistral, qwen2, qwen3, ...) or GPT-NeoX's (pythia).

llama.cpp sizes its compute buffers by building the graph of the largest micro-batch and letting ggml-alloc
place it (sched_reserve, src/llama-context.cpp:615-760 of ggml-org/llama.cpp@0c1e57098): n_tokens =
min(n_ctx, n_ubatch) tokens of n_seq_max sequences against the whole KV cache, and n_outputs =
min(n_tokens, n_outputs_max) output rows (llama-server sets n_outputs_max to its slots; builds before
n_outputs_max, which includes every published log memsight holds, reserved every token as an output).
The graph here follows llama.cpp call for call and in the same order, so that ggml-alloc's rules (galloc.py)
place the same tensors at the same moments:
- src/models/llama.cpp:100-239 (llama_model_llama::graph): per layer an RMS norm, Q/K/V, RoPE, attention, the
  output projection, the residual add, an RMS norm, the SwiGLU feed-forward and the residual add; the last
  layer keeps only the output rows (ggml_get_rows with out_ids) before its feed-forward; then the output norm
  and the LM head, both graph outputs (llama-graph.cpp:1367-1373 set_outputs);
- src/llama-graph.cpp: build_inp_embd (2376-2463: the token rows, and since the embeddings-input select of
  early 2026 an unused f32 n_embd x n_tokens input that stays in the graph as a leaf), build_qkv (1647-1760),
  build_attn (2868-2979: Q, V, K expanded in that order, K and V stored with set_rows), build_attn_mha
  (2616-2740: without flash attention the scores kq = mul_mat(k, q), n_kv x n_tokens x n_head f32, then
  soft_max_ext in place; with it one flash_attn_ext), build_ffn (1762-), build_inp_out_ids (2494-2515),
  build_attn_inp_kq_mask (29-45: f16 with flash attention, else f32);
- src/llama-kv-cache.cpp:1276-1441 (get_k, get_v, cpy_k, cpy_v and their index inputs; V transposed without
  flash attention).
GRAPH_2024 is the graph of the builds the ggml-org/ci logs come from (b3448 - b4801, mid 2024 to early 2025):
K/V stored with ggml_cpy into cache views (no index inputs), the mask's rows padded to GGML_KQ_MASK_PAD = 32
and, with flash attention, cast to f16 in the graph; Q, K, V expanded in that order; no embeddings leaf. Its
GPT-NeoX graph (pythia: one fused QKV matrix with bias, layer norms with bias, GELU feed-forward, the parallel
residual) is that of src/llama.cpp build_gptneox in those builds; it reproduces their logged node counts
(1287 nodes for 32 layers, 967 for 24).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planner.engines.llamacpp.ggml import OUTPUT, Context, Tensor


@dataclass(frozen=True, slots=True)
class GraphRules:
    """What differs in llama.cpp's reserve graph between builds."""

    name: str
    store: str  # "set_rows" (index inputs) or "cpy" (cache views)
    embd_leaf: bool  # the unused embeddings input stays in the graph
    mask_pad: int  # the mask's rows padded to this (1: not padded)
    mask_cast: bool  # flash attention: an f32 mask cast to f16 in the graph
    vk_order: bool  # Q, V, K expanded in that order (else Q, K, V)
    v_3d: bool  # V reshaped to heads before it is stored (else the projection's 2-d result)


GRAPH_0C1E570 = GraphRules("0c1e570 (2026)", "set_rows", True, 1, False, True, True)
GRAPH_2024 = GraphRules("b3448 - b4801 (2024 - early 2025)", "cpy", False, 32, True, False, False)
# between them (mid 2025 - late 2025): K/V stored with set_rows and index inputs, the mask padded to 64 rows
# and cast to f16 for flash attention, V reshaped to heads
GRAPH_2025 = GraphRules("~b6100 - b7200 (August - November 2025)", "set_rows", False, 64, True, True, True)


@dataclass(frozen=True, slots=True)
class GraphShape:
    """What the compute graph needs to know of a model (llama.cpp's hparams)."""

    arch: str  # the GGUF's general.architecture
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_k: int
    head_v: int
    n_ff: int
    n_vocab: int
    swa_layers: frozenset[int] = frozenset()  # layers reading the sliding-window cache
    qkv_bias: bool = False  # qwen2
    qk_norm: bool = False  # qwen3
    # (name, layer, values) -> a weight's bytes: only the weights a GPU copies in (partial offload) need them
    weight_bytes: Callable[[str, int, int], int] | None = None


@dataclass(frozen=True, slots=True)
class ReserveBatch:
    """The micro-batch llama.cpp reserves for, and the caches it attends over."""

    n_tokens: int
    n_outputs: int
    n_stream: int  # KV streams the batch spans (n_seq_max without --kv-unified, else 1)
    n_kv: int  # cells per stream of the full cache
    n_kv_swa: int  # cells per stream of the sliding-window cache (0: none)
    flash_attn: bool
    type_k: str = "f16"
    type_v: str = "f16"


def _pad(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


class _Inputs:
    """The graph's inputs, created in the order llama.cpp creates them."""

    def __init__(self, ctx: Context, shape: GraphShape, batch: ReserveBatch, rules: GraphRules) -> None:
        n = batch.n_tokens
        self.tokens = ctx.input("inp_tokens", "i32", n)
        self.embd = ctx.input("inp_embd", "f32", shape.n_embd, n) if rules.embd_leaf else None
        self.pos = ctx.input("inp_pos", "i32", n)
        self.masks: dict[bool, Tensor] = {}
        self.k_idxs: dict[bool, Tensor] = {}
        self.v_idxs: dict[bool, Tensor] = {}
        mask_type = "f16" if batch.flash_attn and not rules.mask_cast else "f32"
        v_idx = n if batch.flash_attn else n * shape.n_head_kv * shape.head_v
        for swa in [False] + ([True] if shape.swa_layers else []):
            cells = batch.n_kv_swa if swa else batch.n_kv
            tag = "_swa" if swa else ""
            if rules.store == "set_rows":
                self.k_idxs[swa] = ctx.input(f"attn_inp_k_idxs{tag}", "i64", n)
                self.v_idxs[swa] = ctx.input(f"attn_inp_v_idxs{tag}", "i64", v_idx)
            rows = _pad(n // batch.n_stream, rules.mask_pad)
            mask = ctx.input(f"attn_inp_kq_mask{tag}", mask_type, cells, rows, 1, batch.n_stream)
            if batch.flash_attn and rules.mask_cast:
                mask = ctx.cast(mask, "f16", f"kq_mask_f16{tag}")
            self.masks[swa] = mask
        self.out_ids = ctx.input("out_ids", "i32", batch.n_outputs)


def _weight(ctx: Context, name: str, *dims: int) -> Tensor:
    return ctx.weight(name, *dims)


def _norm(ctx: Context, x: Tensor, weight: str, name: str, layer_norm: bool = False) -> Tensor:
    """build_norm: RMS norm (or layer norm) x weight (+ bias for a layer norm)."""
    norm = ctx.unary("NORM" if layer_norm else "RMS_NORM", x, "norm")
    cur = ctx.unary("MUL", norm, name, _weight(ctx, weight, x.ne[0]))
    if layer_norm:
        cur = ctx.unary("ADD", cur, name, _weight(ctx, weight.replace("weight", "bias"), x.ne[0]))
    return cur


class _Attention:
    """One layer's attention over its KV cache (llama-graph.cpp build_attn + build_attn_mha)."""

    def __init__(
        self, ctx: Context, shape: GraphShape, batch: ReserveBatch, rules: GraphRules, inputs: _Inputs
    ) -> None:
        self.ctx, self.shape, self.batch, self.rules, self.inputs = ctx, shape, batch, rules, inputs

    def __call__(self, il: int, q: Tensor, k_cur: Tensor, v_cur: Tensor) -> Tensor:
        ctx, s, b = self.ctx, self.shape, self.batch
        swa = il in s.swa_layers
        cells = b.n_kv_swa if swa else b.n_kv
        k_cache = ctx.external(f"cache_k_l{il}", b.type_k, s.n_head_kv * s.head_k, cells, b.n_stream)
        v_cache = ctx.external(f"cache_v_l{il}", b.type_v, s.n_head_kv * s.head_v, cells, b.n_stream)
        for t in (q, v_cur, k_cur) if self.rules.vk_order else (q, k_cur, v_cur):
            ctx.expand(t)
        if self.rules.store == "set_rows":
            ctx.expand(self._set_rows_k(k_cache, k_cur, swa))
            ctx.expand(self._set_rows_v(v_cache, v_cur, swa))
        else:
            for stored in self._cpy_kv(k_cache, v_cache, k_cur, v_cur):
                ctx.expand(stored)
        k, v = self._views(k_cache, v_cache, cells)
        cur = self._mha(q, k, v, self.inputs.masks[swa], il)
        ctx.expand(cur)
        return cur

    def _set_rows_k(self, cache: Tensor, k_cur: Tensor, swa: bool) -> Tensor:
        ctx, b = self.ctx, self.batch
        rows = ctx.view(k_cur, (k_cur.ne[0] * k_cur.ne[1], k_cur.ne[2]), (k_cur.nb[2],))
        if b.n_stream > 1:
            cache = ctx.reshape(cache, cache.ne[0], cache.ne[1] * b.n_stream)
        return ctx.set_rows(cache, rows, self.inputs.k_idxs[swa])

    def _set_rows_v(self, cache: Tensor, v_cur: Tensor, swa: bool) -> Tensor:
        ctx, b = self.ctx, self.batch
        n_gqa = v_cur.ne[0] * v_cur.ne[1]
        if b.flash_attn:  # V not transposed: one row per token
            rows = ctx.view(v_cur, (n_gqa, v_cur.ne[2]), (v_cur.nb[2],))
            if b.n_stream > 1:
                cache = ctx.reshape(cache, cache.ne[0], cache.ne[1] * b.n_stream)
            return ctx.set_rows(cache, rows, self.inputs.v_idxs[swa])
        if v_cur.nb[2] == v_cur.nb[0] * n_gqa:
            flat = ctx.reshape(v_cur, n_gqa, v_cur.ne[2])
        else:
            flat = ctx.cont(v_cur, n_gqa, v_cur.ne[2])
        cells = ctx.reshape(cache, 1, cache.ne[0] * cache.ne[1] * cache.ne[2] * cache.ne[3])
        values = ctx.reshape(flat, 1, flat.ne[0] * flat.ne[1])
        return ctx.set_rows(cells, values, self.inputs.v_idxs[swa])

    def _cpy_kv(
        self, k_cache: Tensor, v_cache: Tensor, k_cur: Tensor, v_cur: Tensor
    ) -> tuple[Tensor, Tensor]:
        """llm_build_kv_store of 2024: K and V copied into views of the cache."""
        ctx, b = self.ctx, self.batch
        n = b.n_tokens
        k_view = ctx.view(k_cache, (n * k_cache.ne[0],), ())
        v_flat = v_cur if v_cur.ne[2] == 1 else ctx.reshape(v_cur, v_cur.ne[0] * v_cur.ne[1], n)
        if b.flash_attn:
            v_view = ctx.view(v_cache, (n * v_cache.ne[0],), ())
        else:
            v_view = ctx.view(v_cache, (n, v_cache.ne[0]), (v_cache.nb[0] * v_cache.ne[1],))
            v_flat = ctx.transpose(v_flat)
        return ctx.cpy(k_cur, k_view), ctx.cpy(v_flat, v_view)

    def _views(self, k_cache: Tensor, v_cache: Tensor, cells: int) -> tuple[Tensor, Tensor]:
        ctx, s, b = self.ctx, self.shape, self.batch
        kr, vr = k_cache.nb[1], v_cache.nb[0]
        if self.rules.store == "cpy":  # 2024: one 3-d view each, already in attention's order
            k = ctx.view(k_cache, (s.head_k, cells, s.n_head_kv), (kr, kr // s.n_head_kv))
            if b.flash_attn:
                vrow = v_cache.nb[1]
                return k, ctx.view(v_cache, (s.head_v, cells, s.n_head_kv), (vrow, vrow // s.n_head_kv))
            return k, ctx.view(v_cache, (cells, s.head_v, s.n_head_kv), (vr * cells, vr * cells * s.head_v))
        k = ctx.view(k_cache, (s.head_k, s.n_head_kv, cells, b.n_stream), (kr // s.n_head_kv, kr, kr * cells))
        if b.flash_attn:
            vrow = v_cache.nb[1]
            v = ctx.view(
                v_cache, (s.head_v, s.n_head_kv, cells, b.n_stream), (vrow // s.n_head_kv, vrow, vrow * cells)
            )
        else:
            v = ctx.view(
                v_cache,
                (cells, s.n_head_kv, s.head_v, b.n_stream),
                (vr * cells * s.head_v, vr * cells, vr * cells * s.n_head_kv * s.head_v),
            )
        return k, v

    def _mha(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, il: int) -> Tensor:
        ctx, b = self.ctx, self.batch
        ns = b.n_stream
        if self.rules.store == "set_rows":  # the stream split of late 2025 (a view; none before)
            q = ctx.view(
                q, (q.ne[0], q.ne[1], q.ne[2] // ns, ns), (q.nb[1], q.nb[2], q.nb[2] * (q.ne[2] // ns))
            )
            q, k, v = ctx.permute(q, 0, 2, 1, 3), ctx.permute(k, 0, 2, 1, 3), ctx.permute(v, 0, 2, 1, 3)
        else:
            q = ctx.permute(q, 0, 2, 1, 3)
        if b.flash_attn:
            cur = ctx.flash_attn_ext(q, k, v, mask, f"__fattn__-{il}")
            return ctx.reshape(cur, cur.ne[0] * cur.ne[1], cur.ne[2] * cur.ne[3])
        kq = ctx.mul_mat(k, q, f"kq-{il}")
        kq = ctx.unary("SOFT_MAX", kq, f"kq_soft_max-{il}", mask)
        kqv = ctx.mul_mat(v, kq, f"kqv-{il}")
        cur = ctx.permute(kqv, 0, 2, 1, 3)
        return ctx.cont(cur, cur.ne[0] * cur.ne[1], cur.ne[2] * cur.ne[3], name=f"kqv_out-{il}")


def _qkv_separate(
    ctx: Context, s: GraphShape, rules: GraphRules, cur: Tensor, il: int
) -> tuple[Tensor, Tensor, Tensor]:
    """build_qkv's separate Q/K/V path (biases for qwen2), then the Q/K norms (qwen3)."""
    n = cur.ne[1]
    out = []
    for name, heads, width in (("q", s.n_head, s.head_k), ("k", s.n_head_kv, s.head_k),
                               ("v", s.n_head_kv, s.head_v)):  # fmt: skip
        w = _weight(ctx, f"blk.{il}.attn_{name}.weight", s.n_embd, heads * width)
        t = ctx.mul_mat(w, cur, f"{name.upper()}cur-{il}")
        if s.qkv_bias:
            t = ctx.unary(
                "ADD", t, f"{name.upper()}cur-{il}", _weight(ctx, f"blk.{il}.attn_{name}.bias", t.ne[0])
            )
        out.append(ctx.reshape(t, width, heads, n) if name != "v" or rules.v_3d else t)
    q, k, v = out
    if s.qk_norm:
        q = _norm(ctx, q, f"blk.{il}.attn_q_norm.weight", f"Qcur_normed-{il}")
        k = _norm(ctx, k, f"blk.{il}.attn_k_norm.weight", f"Kcur_normed-{il}")
    return q, k, v


class _Builder:
    def __init__(self, shape: GraphShape, batch: ReserveBatch, rules: GraphRules) -> None:
        self.ctx = Context(shape.weight_bytes)
        self.shape, self.batch, self.rules = shape, batch, rules
        self.inputs = _Inputs(self.ctx, shape, batch, rules)
        self.attention = _Attention(self.ctx, shape, batch, rules, self.inputs)

    def embeddings(self) -> Tensor:
        ctx, s = self.ctx, self.shape
        cur = ctx.get_rows(_weight(ctx, "token_embd.weight", s.n_embd, s.n_vocab), self.inputs.tokens, "embd")
        ctx.expand(cur)
        if self.inputs.embd is not None:
            ctx.expand(self.inputs.embd)  # ggml_build_forward_select keeps the unused input in the graph
        return cur

    def rope(self, q: Tensor, k: Tensor, il: int) -> tuple[Tensor, Tensor]:
        ctx = self.ctx
        return (
            ctx.unary("ROPE", q, f"Qcur-{il}", self.inputs.pos),
            ctx.unary("ROPE", k, f"Kcur-{il}", self.inputs.pos),
        )

    def llama_layer(self, inp: Tensor, il: int) -> Tensor:
        ctx, s = self.ctx, self.shape
        cur = _norm(ctx, inp, f"blk.{il}.attn_norm.weight", f"attn_norm-{il}")
        q, k, v = _qkv_separate(ctx, s, self.rules, cur, il)
        q, k = self.rope(q, k, il)
        cur = self.attention(il, q, k, v)
        cur = ctx.mul_mat(
            _weight(ctx, f"blk.{il}.attn_output.weight", cur.ne[0], s.n_embd), cur, f"attn_out-{il}"
        )
        residual = inp
        if il == s.n_layer - 1:
            cur = ctx.get_rows(cur, self.inputs.out_ids)
            residual = ctx.get_rows(residual, self.inputs.out_ids)
        ffn_inp = ctx.unary("ADD", cur, f"ffn_inp-{il}", residual)
        cur = _norm(ctx, ffn_inp, f"blk.{il}.ffn_norm.weight", f"ffn_norm-{il}")
        up = ctx.mul_mat(_weight(ctx, f"blk.{il}.ffn_up.weight", s.n_embd, s.n_ff), cur, f"ffn_up-{il}")
        gate = ctx.mul_mat(_weight(ctx, f"blk.{il}.ffn_gate.weight", s.n_embd, s.n_ff), cur, f"ffn_gate-{il}")
        cur = ctx.glu(gate, up, f"ffn_swiglu-{il}")
        cur = ctx.mul_mat(_weight(ctx, f"blk.{il}.ffn_down.weight", s.n_ff, s.n_embd), cur, f"ffn_out-{il}")
        return ctx.unary("ADD", cur, f"l_out-{il}", ffn_inp)

    def gptneox_layer(self, inp: Tensor, il: int) -> Tensor:
        """build_gptneox of 2024: fused QKV + bias, contiguous Q/K/V copies, the parallel residual."""
        ctx, s = self.ctx, self.shape
        n, e = self.batch.n_tokens, s.n_embd
        cur = _norm(ctx, inp, f"blk.{il}.attn_norm.weight", f"attn_norm-{il}", layer_norm=True)
        qkv = ctx.mul_mat(_weight(ctx, f"blk.{il}.attn_qkv.weight", e, 3 * e), cur, f"wqkv-{il}")
        qkv = ctx.unary("ADD", qkv, f"bqkv-{il}", _weight(ctx, f"blk.{il}.attn_qkv.bias", 3 * e))
        q, k, v = (ctx.cont(ctx.view(qkv, (e, n), (qkv.nb[1],)), name=f"{x}cur-{il}") for x in "QKV")
        q, k = self.rope(ctx.reshape(q, s.head_k, s.n_head, n), ctx.reshape(k, s.head_k, s.n_head_kv, n), il)
        cur = self.attention(il, q, k, v)
        cur = ctx.mul_mat(_weight(ctx, f"blk.{il}.attn_output.weight", e, e), cur, f"attn_out-{il}")
        cur = ctx.unary("ADD", cur, f"attn_out-{il}", _weight(ctx, f"blk.{il}.attn_output.bias", e))
        if il == s.n_layer - 1:
            cur = ctx.get_rows(cur, self.inputs.out_ids)
            inp = ctx.get_rows(inp, self.inputs.out_ids)
        attn_out = cur
        cur = _norm(ctx, inp, f"blk.{il}.ffn_norm.weight", f"ffn_norm-{il}", layer_norm=True)
        cur = ctx.mul_mat(_weight(ctx, f"blk.{il}.ffn_up.weight", e, s.n_ff), cur, f"ffn_up-{il}")
        cur = ctx.unary("ADD", cur, f"ffn_up_b-{il}", _weight(ctx, f"blk.{il}.ffn_up.bias", s.n_ff))
        cur = ctx.unary("UNARY", cur, f"ffn_gelu-{il}")
        cur = ctx.mul_mat(_weight(ctx, f"blk.{il}.ffn_down.weight", s.n_ff, e), cur, f"ffn_down-{il}")
        cur = ctx.unary("ADD", cur, f"ffn_out-{il}", _weight(ctx, f"blk.{il}.ffn_down.bias", e))
        cur = ctx.unary("ADD", cur, f"ffn_res-{il}", inp)
        return ctx.unary("ADD", cur, f"l_out-{il}", attn_out)

    def output(self, cur: Tensor) -> None:
        ctx, s = self.ctx, self.shape
        ctx.layer = s.n_layer  # the output layer (llama.cpp's dev_output)
        norm = _norm(
            ctx, cur, "output_norm.weight", "result_norm", layer_norm=ARCH_FAMILIES.get(s.arch) == "gptneox"
        )
        logits = ctx.mul_mat(_weight(ctx, "output.weight", s.n_embd, s.n_vocab), norm, "result_output")
        norm.flags.add(OUTPUT)
        logits.flags.add(OUTPUT)
        ctx.expand(logits)


# the GGUF architectures built like llama's graph (qwen2 adds Q/K/V biases, qwen3 Q/K norms), and GPT-NeoX
ARCH_FAMILIES: dict[str, str] = {
    "llama": "llama", "mistral": "llama", "qwen2": "llama", "qwen3": "llama", "gptneox": "gptneox",
}  # fmt: skip


def build_graph(shape: GraphShape, batch: ReserveBatch, rules: GraphRules = GRAPH_0C1E570) -> Context:
    """The reserve graph: its nodes and leafs in ggml's order, each tensor tagged with its layer. An
    architecture not in ARCH_FAMILIES gets llama's graph (the caller says it is an approximation)."""
    b = _Builder(shape, batch, rules)
    cur = b.embeddings()
    layer = b.gptneox_layer if ARCH_FAMILIES.get(shape.arch) == "gptneox" else b.llama_layer
    for il in range(shape.n_layer):
        b.ctx.layer = il
        cur = layer(cur, il)
    b.output(cur)
    return b.ctx
