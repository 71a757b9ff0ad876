"""llama.cpp's compute buffers derived from its graph (planner/engines/llamacpp: ggml.py, galloc.py, graph.py,
sched.py, compute.py) and the model buffers per GPU (model.py): the allocator's rules on graphs small enough
to place by hand, the graph's node counts against the counts llama.cpp logged, the layer split over GPUs by
llama-model.cpp's rule. Expected figures are worked out here from the rules, never copied from the code."""

from __future__ import annotations

import re

import pytest

from planner.engines.llamacpp.compute import Devices, compute_buffers
from planner.engines.llamacpp.galloc import DynAllocator, GraphAllocator
from planner.engines.llamacpp.ggml import INPUT, OUTPUT, Context
from planner.engines.llamacpp.graph import GRAPH_2024, GraphShape, ReserveBatch, build_graph
from planner.engines.llamacpp.model import GpuSplit, layer_devices, split_tensors
from planner.engines.llamacpp.plan import predict
from planner.engines.llamacpp.predict import LlamaCppArgs
from planner.errors import PlannerError
from tests.conftest import REPO_ROOT
from tests.tiny_gguf import write_tiny_gguf

LOGS = REPO_ROOT / "tests" / "data" / "llamacpp_logs"
MiB = 2**20


def test_dyn_allocator_best_fit_and_merging():
    a = DynAllocator(32)
    x, y, z = a.alloc(100), a.alloc(64), a.alloc(200)  # 100 pads to 128
    assert (x, y, z) == (0, 128, 192) and a.max_size == 192 + 224
    a.free(x, 100)
    a.free(z, 200)  # the freed tail merges with the unbounded last block
    assert a.alloc(96) == 0  # the hole at 0 (128 B) is the only block that is not the last one
    a.free(y, 64)
    a.free(0, 96)  # 0-96, 96-128 and 128-192 merge with the tail: one block from 0
    assert a.blocks == [[0, 2**62]] and a.alloc(400) == 0 and a.max_size == 416


def _chain(ctx: Context, inplace: bool) -> tuple[list, list]:
    x = ctx.input("x", "f32", 256)  # 1 KiB
    w = ctx.external("w", "f32", 256, 512)
    h = ctx.mul_mat(w, x, "h")  # 2 KiB
    h2 = ctx.unary("ADD" if inplace else "GLU", h, "h2")  # in place, or a new 2 KiB tensor
    out = ctx.mul_mat(ctx.external("w2", "f32", 512, 128), h2, "out")  # 512 B
    out.flags.add(OUTPUT)
    ctx.expand(out)
    return ctx.nodes, ctx.leafs


@pytest.mark.parametrize("inplace, peak", [(True, 1024 + 2048), (False, 1024 + 2048 + 2048)])
def test_graph_allocator_reuses_a_parent_in_place(inplace, peak):
    nodes, leafs = _chain(Context(), inplace)
    sizes = GraphAllocator([32]).reserve(nodes, leafs, [0] * len(nodes), [0] * len(leafs))
    # x (1 KiB, the input) at 0, h (2 KiB) at 1 KiB; x is freed once h is computed, leaving a 1 KiB hole.
    # In place, h2 is h. Otherwise h2 (2 KiB) does not fit the hole and goes after h: 5 KiB at the top.
    assert sizes == [peak]


def test_graph_counts_match_the_nodes_llama_cpp_logged():
    """b3448 GPT-NeoX graphs: 32 layers -> 1287 nodes, 24 -> 967 (the logged "graph nodes")."""
    for log, shape in (
        (
            "ci_b3448_v100_pythia28b_q4_0.log",
            GraphShape("gptneox", 32, 2560, 32, 32, 80, 80, 10240, 50304),
        ),
        (
            "ci_b3448_x86cpu_pythia14b_q4_0.log",
            GraphShape("gptneox", 24, 2048, 16, 16, 128, 128, 8192, 50304),
        ),
    ):
        logged = int(re.search(r"graph nodes\s+=\s+(\d+)", (LOGS / log).read_text()).group(1))
        ctx = build_graph(shape, ReserveBatch(512, 512, 1, 2048, 0, False), GRAPH_2024)
        assert len(ctx.nodes) == logged


def test_scores_dominate_without_flash_attention_and_vanish_with_it():
    shape = GraphShape("llama", 2, 512, 8, 2, 64, 64, 1024, 1000)
    off = compute_buffers(shape, ReserveBatch(512, 1, 1, 4096, 0, False), Devices((), (-1, -1, -1)))
    on = compute_buffers(shape, ReserveBatch(512, 1, 1, 4096, 0, True), Devices((), (-1, -1, -1)))
    scores = 4096 * 512 * 8 * 4  # n_kv x n_tokens x n_head f32: 64 MiB
    mask = 4096 * 512 * 4  # the f32 mask, an input, alive throughout
    assert off.host_bytes >= scores + mask
    assert on.host_bytes < scores // 4  # no score matrix with flash attention (the f16 mask is 4 MiB)


def test_a_gpu_run_copies_the_inputs_and_keeps_token_rows_on_the_cpu():
    shape = GraphShape("llama", 2, 512, 8, 2, 64, 64, 1024, 1000)
    est = compute_buffers(shape, ReserveBatch(512, 512, 1, 2048, 0, False), Devices(("CUDA0",), (0, 0, 0)))
    copies = {term for term in est.terms if term.startswith("copied")}
    assert len(copies) == 1 and "embd -> CUDA0 1.00" in copies.pop()  # n_embd x n_tokens f32 = 1 MiB
    host = dict(est.per_device)["CPU"]
    # the host buffer: the token rows (1 MiB), the unused embeddings input (1 MiB), the f32 mask (4 MiB), the
    # V indices (512 x 128 i64, 0.5 MiB) and a few KiB of positions and indices
    assert 6.5 * MiB <= host < 6.6 * MiB


def test_layers_split_over_gpus_by_llama_model_cpp_rule():
    # 32 layers + output = 33 offloaded; equal split points (0.5, 1): layer il to GPU 0 while il/33 < 0.5
    assert layer_devices(32, 99, GpuSplit(2)) == (0,) * 17 + (1,) * 16
    # -ts 3,1: points (0.75, 1); il/33 < 0.75 for il <= 24
    assert layer_devices(32, 99, GpuSplit(2, (3, 1))) == (0,) * 25 + (1,) * 8
    # -ngl 11: layers 22..31 and the output; shares (il - 22)/11 < 0.5 for il <= 27
    assert layer_devices(32, 11, GpuSplit(2)) == (-1,) * 22 + (0,) * 6 + (1,) * 5
    # -sm none -mg 1: every offloaded layer on GPU 1
    assert layer_devices(4, 99, GpuSplit(2, (), "none", 1)) == (1,) * 5
    with pytest.raises(PlannerError, match="-ts needs 2 proportions"):
        GpuSplit(2, (1, 1, 1))
    with pytest.raises(PlannerError, match="-mg 2: there are 2"):
        GpuSplit(2, main_gpu=2)


def test_model_buffer_per_gpu_sums_each_layers_tensors():
    tensors = [("token_embd.weight", 1000)] + [(f"blk.{i}.w", 100 + i) for i in range(4)]
    tensors += [("output.weight", 500), ("output_norm.weight", 7, False)]
    m = split_tensors(tensors, 4, -1, GpuSplit(2))  # layers 0-2 on GPU 0 (il/5 < 0.5), 3 + output on GPU 1
    assert m.per_gpu == (100 + 101 + 102, 103 + 500 + 7) and m.cpu_bytes == 1000
    row = split_tensors(tensors, 4, -1, GpuSplit(2, (1, 1), "row"))
    # -sm row: each layer's matrices split by rows over both GPUs; the output layer stays whole
    assert row.per_gpu == (round(100 * 0.5) + 50 + 51 + 52, 50 + 50 + 51 + 52 + 507)


def test_a_plan_on_two_gpus_gives_each_its_buffers(tmp_path):
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")
    one = predict(str(gguf), LlamaCppArgs(n_ctx=4096))
    two = predict(str(gguf), LlamaCppArgs(n_ctx=4096, gpus=GpuSplit(2)))
    rows = {name: (m, kv, c) for name, m, kv, c in two.per_device()}
    assert set(rows) == {"CUDA0", "CUDA1", "host"}
    assert rows["CUDA0"][0] + rows["CUDA1"][0] == one.model.gpu_bytes == two.model.gpu_bytes
    # 4 layers + output: layers 0-2 on CUDA0 (il/5 < 0.5), so 3 of the 4 KV layers
    assert (rows["CUDA0"][1], rows["CUDA1"][1]) == (one.kv.bytes * 3 // 4, one.kv.bytes // 4)
    # pipeline parallelism: every input copied 4 times, on the host as well
    assert two.compute.host_bytes > 3 * one.compute.host_bytes


def test_input_flags_survive_the_builder():
    ctx = build_graph(
        GraphShape("llama", 1, 64, 4, 2, 16, 16, 128, 259), ReserveBatch(32, 1, 1, 256, 0, True)
    )
    inputs = {t.name for t in ctx.leafs if INPUT in t.flags}
    assert {"inp_tokens", "inp_embd", "inp_pos", "attn_inp_kq_mask", "out_ids"} <= inputs
