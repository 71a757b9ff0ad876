"""Tiny Llama-architecture GGUFs written with the `gguf` package: for tests that read a real GGUF header
(`memsight plan FILE.gguf --engine llamacpp`) and for running a real llama.cpp binary on this machine's CPU
(llama-server / llama-cli load them in well under a second). Grouped-query attention (4 query heads, 2 KV
heads), an untied output, f32 norms, and a byte-level SentencePiece vocabulary of 259 tokens (3 specials + the
256 byte tokens llama.cpp's tokenizer falls back to). The tensors hold small random numbers from a fixed seed;
what is tested is memory, not text."""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

# write_tiny_llama's model: 2 blocks of width 64, heads of 16
N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, N_FF, N_CTX_TRAIN = 64, 2, 4, 2, 128, 4096
SPECIAL = ("<unk>", "<s>", "</s>")
VOCAB = len(SPECIAL) + 256


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


def write_tiny_gguf(
    path: pathlib.Path, shape: TinyShape = TinyShape(), matrix_type: str = "Q8_0"
) -> pathlib.Path:
    """Write the model (matrices in F32, F16 or Q8_0; norms f32) to `path` and return the path."""
    import gguf  # noqa: PLC0415  (a dev dependency: only tests write GGUFs)
    import numpy as np  # noqa: PLC0415

    rng = np.random.default_rng(0)
    file_types = {"F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16,
                  "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}  # fmt: skip
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("memsight tiny llama")
    w.add_block_count(shape.n_layer)
    w.add_context_length(shape.n_ctx_train)
    w.add_embedding_length(shape.n_embd)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(shape.head_dim)
    w.add_file_type(file_types[matrix_type])
    w.add_tokenizer_model("llama")
    w.add_token_list([*SPECIAL, *(f"<0x{b:02X}>" for b in range(256))])
    w.add_token_scores([0.0] * VOCAB)
    kinds = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    w.add_token_types(kinds + [gguf.TokenType.BYTE] * 256)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def matrix(name: str, rows: int, cols: int) -> None:
        data = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
        if matrix_type == "F32":
            w.add_tensor(name, data)
        elif matrix_type == "F16":
            w.add_tensor(name, data.astype(np.float16))
        else:
            qtype = getattr(gguf.GGMLQuantizationType, matrix_type)
            w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)

    def vector(name: str, n: int) -> None:
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    kv = shape.n_head_kv * shape.head_dim
    matrix("token_embd.weight", VOCAB, shape.n_embd)
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
    matrix("output.weight", VOCAB, shape.n_embd)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_tiny_llama(path: pathlib.Path, dtype: str = "f32") -> pathlib.Path:
    """The 2-block model of width 64 (N_EMBD ... above) in f32 or f16 matrices."""
    shape = TinyShape(N_LAYER, N_EMBD, N_HEAD, N_HEAD_KV, N_FF, N_CTX_TRAIN)
    return write_tiny_gguf(path, shape, dtype.upper())
