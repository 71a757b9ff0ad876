"""A tiny Llama-architecture GGUF written with the `gguf` package, for running a real llama.cpp binary in the
tests (llama-server / llama-cli load it in well under a second on a CPU): 2 blocks of width 64, 4 query and
2 KV heads of 16, a byte-level SPM vocabulary of 259 tokens. The tensors hold small random numbers; what is
tested is memory, not text."""

from __future__ import annotations

import pathlib

N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, N_FF, N_CTX_TRAIN = 64, 2, 4, 2, 128, 4096
SPECIAL = ("<unk>", "<s>", "</s>")
VOCAB = len(SPECIAL) + 256


def write_tiny_llama(path: pathlib.Path, dtype: str = "f32") -> pathlib.Path:
    """Write the model to `path` (f32 or f16 matrices; norms are always f32) and return the path."""
    import gguf  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    rng = np.random.default_rng(0)
    matrix = np.float16 if dtype == "f16" else np.float32

    def w(*shape: int, kind=matrix):  # noqa: ANN202, ANN001
        return (rng.standard_normal(shape) * 0.02).astype(kind)

    head_dim = N_EMBD // N_HEAD
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("memsight tiny llama")
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    tokens = [*SPECIAL, *(f"<0x{b:02X}>" for b in range(256))]
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * VOCAB)
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    writer.add_token_types(types + [gguf.TokenType.BYTE] * 256)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_tensor("token_embd.weight", w(VOCAB, N_EMBD))
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("output.weight", w(VOCAB, N_EMBD))
    for i in range(N_LAYER):
        blk = f"blk.{i}"
        writer.add_tensor(f"{blk}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"{blk}.attn_q.weight", w(N_EMBD, N_EMBD))
        writer.add_tensor(f"{blk}.attn_k.weight", w(N_HEAD_KV * head_dim, N_EMBD))
        writer.add_tensor(f"{blk}.attn_v.weight", w(N_HEAD_KV * head_dim, N_EMBD))
        writer.add_tensor(f"{blk}.attn_output.weight", w(N_EMBD, N_EMBD))
        writer.add_tensor(f"{blk}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"{blk}.ffn_gate.weight", w(N_FF, N_EMBD))
        writer.add_tensor(f"{blk}.ffn_up.weight", w(N_FF, N_EMBD))
        writer.add_tensor(f"{blk}.ffn_down.weight", w(N_EMBD, N_FF))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
