"""A tiny llama-architecture GGUF written with the `gguf` package, for tests that read a real GGUF header
(memsight plan --engine llamacpp) and for the llama.cpp run (tests/planner/test_llamacpp_run.py): GQA
attention (4 query heads, 2 KV heads), an untied output, q8_0 matrices with f32 norms, and a 259-token
SentencePiece vocabulary (3 specials + the 256 byte tokens llama.cpp's tokenizer falls back to)."""

from __future__ import annotations

import pathlib
from dataclasses import dataclass


@dataclass(frozen=True)
class TinyShape:
    n_layer: int = 4
    n_embd: int = 256
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 512
    n_ctx_train: int = 4096

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


VOCAB = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]


def write_tiny_gguf(
    path: pathlib.Path, shape: TinyShape = TinyShape(), matrix_type: str = "Q8_0"
) -> pathlib.Path:
    """Write the GGUF and return its path. Weights are small random values (the run needs numbers, not
    meaning); a fixed seed keeps the file the same from run to run."""
    import gguf  # noqa: PLC0415  (a dev dependency: only tests write GGUFs)
    import numpy as np  # noqa: PLC0415

    rng = np.random.default_rng(0)
    qtype = getattr(gguf.GGMLQuantizationType, matrix_type)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("memsight-tiny-llama")
    w.add_block_count(shape.n_layer)
    w.add_context_length(shape.n_ctx_train)
    w.add_embedding_length(shape.n_embd)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(shape.head_dim)
    w.add_file_type(
        gguf.LlamaFileType.MOSTLY_Q8_0 if matrix_type == "Q8_0" else gguf.LlamaFileType.MOSTLY_F16
    )
    w.add_tokenizer_model("llama")
    w.add_token_list(VOCAB)
    w.add_token_scores([0.0] * len(VOCAB))
    w.add_token_types([2, 3, 3] + [6] * 256)  # unknown, control x2, byte
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def matrix(name: str, rows: int, cols: int) -> None:
        data = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
        if matrix_type == "F16":
            w.add_tensor(name, data.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)

    def vector(name: str, n: int) -> None:
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    kv = shape.n_head_kv * shape.head_dim
    matrix("token_embd.weight", len(VOCAB), shape.n_embd)
    for i in range(shape.n_layer):
        vector(f"blk.{i}.attn_norm.weight", shape.n_embd)
        matrix(f"blk.{i}.attn_q.weight", shape.n_embd, shape.n_embd)
        matrix(f"blk.{i}.attn_k.weight", kv, shape.n_embd)
        matrix(f"blk.{i}.attn_v.weight", kv, shape.n_embd)
        matrix(f"blk.{i}.attn_output.weight", shape.n_embd, shape.n_embd)
        vector(f"blk.{i}.ffn_norm.weight", shape.n_embd)
        matrix(f"blk.{i}.ffn_gate.weight", shape.n_ff, shape.n_embd)
        matrix(f"blk.{i}.ffn_up.weight", shape.n_ff, shape.n_embd)
        matrix(f"blk.{i}.ffn_down.weight", shape.n_embd, shape.n_ff)
    vector("output_norm.weight", shape.n_embd)
    matrix("output.weight", len(VOCAB), shape.n_embd)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
