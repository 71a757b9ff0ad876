"""llama.cpp's own figures from a GGUF and its arguments (planner/engines/llamacpp): the KV cache cell by
cell, the model buffers -ngl puts on each side, and the log reader on every wording; exact bytes,
computed here by hand from the shapes, never copied from the code under test."""

from __future__ import annotations

import pathlib

import pytest

from planner.engines import recognize
from planner.engines.llamacpp.kv import KVArgs, KVShape, kv_plan, row_bytes, swa_layer_count
from planner.engines.llamacpp.log import parse_log, strip_line
from planner.engines.llamacpp.model import split_tensors
from planner.engines.llamacpp.plan import predict
from planner.engines.llamacpp.predict import LlamaCppArgs
from planner.errors import PlannerError
from tests.conftest import REPO_ROOT
from tests.tiny_gguf import VOCAB, TinyShape, write_tiny_gguf

MiB = 2**20
LOGS = REPO_ROOT / "tests" / "data" / "llamacpp_logs"
SHAPE = TinyShape()
Q8 = 34  # bytes per 32 values
EMBD = VOCAB * SHAPE.n_embd // 32 * Q8  # token_embd, q8_0
OUTPUT = VOCAB * SHAPE.n_embd // 32 * Q8 + SHAPE.n_embd * 4  # output (q8_0) + output_norm (f32)
LAYER = (
    2 * SHAPE.n_embd * 4  # attn_norm, ffn_norm
    + 2 * SHAPE.n_embd * SHAPE.n_embd // 32 * Q8  # attn_q, attn_output
    + 2 * 128 * SHAPE.n_embd // 32 * Q8  # attn_k, attn_v: 2 KV heads x 64
    + 3 * SHAPE.n_ff * SHAPE.n_embd // 32 * Q8  # gate, up, down
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> pathlib.Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def test_row_bytes_follow_ggml_blocks():
    assert row_bytes("f16", 128) == 256
    assert row_bytes("q8_0", 128) == 4 * 34
    assert row_bytes("q4_0", 128) == 4 * 18
    with pytest.raises(PlannerError, match="not a whole number of q8_0 blocks"):
        row_bytes("q8_0", 100)
    with pytest.raises(PlannerError, match="unknown ggml type 'fp7'"):
        row_bytes("fp7", 128)


def test_kv_one_sequence_and_per_sequence_streams(tiny):
    one = predict(str(tiny), LlamaCppArgs(n_ctx=2000))
    # n_ctx padded to 256: 2048 cells x 4 layers x (128 K + 128 V values) x 2 B
    assert one.kv.n_ctx == 2048 and one.kv.bytes == 2048 * 4 * 256 * 2
    four = predict(str(tiny), LlamaCppArgs(n_ctx=4096, n_seq_max=3, type_k="q8_0", type_v="q4_0"))
    # 3 streams of pad(4096 // 3, 256) = 1536 cells; K q8_0 136 B, V q4_0 72 B per cell per layer
    assert (four.kv.n_ctx_seq, four.kv.caches[0].streams) == (1536, 3)
    assert four.kv.k_bytes == 1536 * 3 * 4 * 136 and four.kv.v_bytes == 1536 * 3 * 4 * 72
    unified = predict(str(tiny), LlamaCppArgs(n_ctx=4096, n_seq_max=3, kv_unified=True))
    assert unified.kv.caches[0].cells == 4096 and unified.kv.caches[0].streams == 1


def test_sliding_window_layers_get_their_own_smaller_cache():
    shape = KVShape("gemma3", 62, 2048, 2048, 62, swa_layer_count("gemma3", 62)[0], 1024, "test")
    assert shape.swa_layers == 52  # every 6th layer is global: 10 of 62
    plan = kv_plan(shape, KVArgs(n_ctx=32768, n_seq_max=1, n_ubatch=512))
    full, swa = plan.caches
    assert (full.layers, full.cells) == (10, 32768)
    assert (swa.layers, swa.cells) == (52, 1536)  # pad(min(32768, 1024 + 512), 256)
    assert plan.bytes == (10 * 32768 + 52 * 1536) * 2 * 2048 * 2
    unified = kv_plan(shape, KVArgs(n_ctx=32768, n_seq_max=4, kv_unified=True, n_ubatch=512))
    assert unified.caches[1].cells == 4608  # 1024 x 4 sequences + 512 = 4608, a multiple of 256
    assert kv_plan(shape, KVArgs(n_ctx=32768, swa_full=True)).caches[1].cells == 32768


@pytest.mark.parametrize(
    ("ngl", "host", "gpu", "layers"),
    [
        (-1, EMBD, 4 * LAYER + OUTPUT, 5),
        (99, EMBD, 4 * LAYER + OUTPUT, 5),
        (0, EMBD + 4 * LAYER + OUTPUT, 0, 0),
        (1, EMBD + 4 * LAYER, OUTPUT, 1),  # -ngl 1 offloads the output layer only
        (2, EMBD + 3 * LAYER, LAYER + OUTPUT, 2),  # and then the LAST repeating layers
    ],
)
def test_ngl_splits_the_ggufs_tensors_as_llama_cpp_does(tiny, ngl, host, gpu, layers):
    p = predict(str(tiny), LlamaCppArgs(n_ctx=1024, n_gpu_layers=ngl))
    assert (p.model.cpu_bytes, p.model.gpu_bytes, p.model.gpu_layers) == (host, gpu, layers)
    assert p.kv_gpu_bytes == p.kv.bytes * max(layers - 1, 0) // 4


def test_tied_embeddings_put_a_second_copy_of_token_embd_on_the_gpu():
    tensors = [("token_embd.weight", 1000), ("blk.0.attn_q.weight", 10), ("output_norm.weight", 4)]
    b = split_tensors(tensors, 1, -1)
    assert (b.cpu_bytes, b.gpu_bytes, b.tied_copy_bytes) == (1000, 1014, 1000)
    assert split_tensors(tensors, 1, 0).gpu_bytes == 0


def test_plan_refuses_what_is_not_a_gguf(tmp_path):
    config = tmp_path / "config.json"
    config.write_text("{}")
    with pytest.raises(PlannerError):
        predict(str(config), LlamaCppArgs(n_ctx=1024))


def test_every_wording_is_read_with_its_line_and_device():
    log = parse_log((LOGS / "ci_b4446_t4vulkan_pythia28b_q8_0.log").read_text(encoding="utf-8"))
    assert log.is_llamacpp and log.build == 4446 and log.commit == "4d2b3d88"
    assert {d: f.value for d, f in log.by_device("model_buffer").items()} == {
        "Vulkan0": 2684.57,
        "CPU_Mapped": 130.49,
    }
    assert log.by_device("compute_buffer")["Vulkan_Host"].value == 9.01
    assert log.context["kv_size"] == "2048" and log.context["n_ubatch"] == "512"
    (cache,) = log.kv_caches
    assert (cache.total_mib, cache.k_type, cache.k_mib, cache.line) == (640.0, "f16", 320.0, 65)
    assert log.tensor_types == {"f32": 258, "q8_0": 130} and log.info["model ftype"] == "Q8_0"
    new = parse_log(
        "2026-05-14 22:14:31.035 | llama_kv_cache: size = 4352.00 MiB (131072 cells,  16 layers,  4/1 seqs), "
        "K (q8_0): 2176.00 MiB, V (q8_0): 2176.00 MiB\n"
        "llama-1  | sched_reserve:      CUDA0 compute buffer size =   495.00 MiB\n"
        "0.00.919.176 I load_tensors:        CUDA0 model buffer size = 15843.20 MiB\n"
    )
    (c,) = new.kv_caches
    assert (c.cells, c.layers, c.seqs, c.streams, c.k_type) == (131072, 16, 4, 1, "q8_0")
    assert new.first("compute_buffer").rank == "CUDA0" and new.first("model_buffer").value == 15843.2


def test_the_memory_breakdown_table_keeps_the_last_one():
    log = parse_log(
        "common_memory_breakdown_print: | memory breakdown [MiB] | total    free     self   model   "
        "context   "
        "compute    unaccounted |\n"
        "common_memory_breakdown_print: |   - CUDA0 (RTX 5090)   | 32606 = 30330 + (21832 = 16386 +    4950 +"
        "     495) +      -19555 |\n"
        "common_memory_breakdown_print: |   - Host               |                    958 =   682 +       0 +"
        "     276                |\n"
    )
    assert log.breakdown == (
        {"device": "CUDA0", "total": 32606, "free": 30330, "self": 21832, "model": 16386, "context": 4950,
         "compute": 495, "unaccounted": -19555},
        {"device": "Host", "self": 958, "model": 682, "context": 0, "compute": 276},
    )  # fmt: skip


def test_prefixes_are_stripped():
    assert strip_line("\x1b[34m0.00.612.795\x1b[0m I print_info: n_layer = 65") == "print_info: n_layer = 65"
    assert strip_line("llama-1  | llama_context: n_ctx = 8192") == "llama_context: n_ctx = 8192"
    assert strip_line("[llama Debug]: llama_kv_cache_init: layer 15") == "llama_kv_cache_init: layer 15"


def test_engines_recognize_their_own_logs():
    for path in sorted(LOGS.glob("*.log")):
        assert recognize(path.read_text(encoding="utf-8")).name == "llamacpp", path.name
    for path in sorted((REPO_ROOT / "tests" / "data" / "vllm_logs").glob("*.log")):
        text = path.read_text(encoding="utf-8")
        assert recognize(text).name == "vllm", path.name


def test_a_layer_on_a_device_the_backends_do_not_list_is_refused_not_read_past():
    from planner.engines.llamacpp.compute import Devices, _placement  # noqa: PLC0415
    from planner.errors import PlannerError  # noqa: PLC0415

    with pytest.raises(PlannerError, match="layers placed on 3 GPUs but the backend lists 1 \\(Metal\\)"):
        _placement(Devices(("Metal",), (0, 1, 2, 2)))
