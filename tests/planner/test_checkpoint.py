"""read_checkpoint on real files written by the safetensors and gguf packages (headers only)."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from gguf import GGUFReader, GGUFWriter, quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from safetensors.numpy import save_file

from planner.checkpoint import read_checkpoint
from planner.errors import PlannerError


def _write_safetensors(path, tensors, metadata=None):
    save_file(tensors, str(path), metadata=metadata)
    return path


def test_single_safetensors_file_exact_bytes(tmp_path):
    path = _write_safetensors(tmp_path / "model.safetensors", {
        "model.embed.weight": np.zeros((10, 8), np.float32),
        "model.norm.weight": np.zeros((8,), np.float16),
        "model.layers.0.mlp.qweight": np.zeros((8, 4), np.int32),  # packed int4: 8 weights per int32
        "model.layers.0.mlp.scales": np.zeros((1, 32), np.float16),  # a scale, not a parameter
        "model.layers.0.mlp.experts.gate_up_proj_blocks": np.zeros((2, 16), np.uint8),  # mxfp4: 2 per byte
    }, metadata={"format": "pt"})  # fmt: skip
    info = read_checkpoint(path)
    assert info.format == "safetensors" and info.files == (str(path),)
    assert dict(info.bytes_by_dtype) == {"F16": 16 + 64, "F32": 320, "I32": 128, "U8": 32}
    assert info.tensor_bytes == 320 + 16 + 128 + 64 + 32
    assert info.params == 80 + 8 + 256 + 64
    assert info.aux_bytes == 64
    assert info.bits_per_weight == pytest.approx(info.tensor_bytes * 8 / info.params)
    assert info.file_bytes == path.stat().st_size > info.tensor_bytes
    assert info.metadata["format"] == "pt"
    shapes = {t.name: t.shape for t in info.tensors}
    assert shapes["model.embed.weight"] == (10, 8)


def test_packed_formats_count_their_weights(tmp_path):
    # numpy has no float8, so this file is written by hand in the safetensors layout (header + data)
    entries = [("mlp.up_proj.weight", "U8", [16, 32], 512),  # 64 e2m1 weights per row, two per byte
               ("mlp.up_proj.weight_scale", "F8_E4M3", [16, 4], 64),  # one fp8 scale per 16 weights
               ("mlp.up_proj.weight_scale_2", "F32", [1], 4)]  # fmt: skip
    header, offset = {}, 0
    for name, dtype, shape, size in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    nvfp4 = tmp_path / "nvfp4.safetensors"
    nvfp4.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))
    info = read_checkpoint(nvfp4)
    assert info.params == 16 * 64 and info.aux_bytes == 64 + 4
    assert info.bits_per_weight == (512 + 64 + 4) * 8 / 1024

    folder = tmp_path / "gptq8"
    folder.mkdir()
    config = {"quantization_config": {"quant_method": "gptq", "bits": 8}}
    (folder / "config.json").write_text(json.dumps(config))
    _write_safetensors(folder / "model.safetensors", {"q.qweight": np.zeros((4, 16), np.int32)})
    assert read_checkpoint(folder).params == 4 * 16 * 4  # four 8-bit weights per int32
    assert read_checkpoint(folder / "model.safetensors").params == 256


def test_sharded_safetensors_with_index(tmp_path):
    _write_safetensors(tmp_path / "model-00001-of-00002.safetensors", {"a": np.zeros((4, 4), np.float32)})
    _write_safetensors(tmp_path / "model-00002-of-00002.safetensors", {"b": np.zeros((2, 3), np.float16)})
    index = {"metadata": {"total_size": 64 + 12},
             "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    from_folder = read_checkpoint(tmp_path)
    from_index = read_checkpoint(tmp_path / "model.safetensors.index.json")
    assert from_folder.tensor_bytes == from_index.tensor_bytes == 76
    assert from_folder.params == 22 and len(from_folder.files) == 2
    assert from_folder.notes == ()

    index["metadata"]["total_size"] = 999
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert "999" in read_checkpoint(tmp_path).notes[0]

    index["weight_map"]["b"] = "model-00001-of-00002.safetensors"  # listed in the wrong shard
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(PlannerError, match="not in the shard named for them"):
        read_checkpoint(tmp_path)

    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    index["weight_map"]["b"] = "model-00002-of-00002.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(PlannerError, match="model-00002-of-00002.safetensors.*missing"):
        read_checkpoint(tmp_path)


def test_truncated_corrupt_and_foreign_safetensors_name_the_file(tmp_path):
    good = _write_safetensors(tmp_path / "good.safetensors", {"w": np.zeros((64, 64), np.float32)})
    data = good.read_bytes()
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(data[:-100])
    with pytest.raises(PlannerError, match="truncated.safetensors: truncated"):
        read_checkpoint(truncated)
    header_cut = tmp_path / "header_cut.safetensors"
    header_cut.write_bytes(data[:20])
    with pytest.raises(PlannerError, match="header_cut.safetensors: truncated"):
        read_checkpoint(header_cut)
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(struct.pack("<Q", 10) + b"{not json!" + b"\0" * 16)
    with pytest.raises(PlannerError, match="corrupt.safetensors: not a safetensors file"):
        read_checkpoint(corrupt)
    foreign = tmp_path / "notes.txt"
    foreign.write_text("hello, this is not a checkpoint at all\n" * 10)
    with pytest.raises(PlannerError, match="notes.txt"):
        read_checkpoint(foreign)
    lying = tmp_path / "lying.safetensors"
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
    lying.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)
    with pytest.raises(PlannerError, match="lying.safetensors: tensor 'w': 8 bytes"):
        read_checkpoint(lying)
    with pytest.raises(PlannerError, match="no such file"):
        read_checkpoint(tmp_path / "absent.safetensors")


def _gguf_bytes(qtype: GGMLQuantizationType, shape: tuple[int, int]) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    return shape[0] * shape[1] // block * size


def _write_gguf(path, *, alignment=None, endianess=None, prefix=""):
    kwargs = {} if endianess is None else {"endianess": endianess}
    writer = GGUFWriter(str(path), "llama", **kwargs)
    writer.add_block_count(2)
    writer.add_uint64("test.u64", 2**40)
    writer.add_int32("test.i32", -5)
    writer.add_float32("test.f32", 1.5)
    writer.add_float64("test.f64", 2.25)
    writer.add_bool("test.bool", True)
    writer.add_string("test.str", "hello")
    writer.add_array("test.short", [1, 2, 3])
    writer.add_array("test.strings", ["a", "bb", "ccc"])
    writer.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(1000)])
    if alignment:
        writer.add_custom_alignment(alignment)
    rng = np.random.default_rng(0)
    x = rng.random((8, 512), dtype=np.float32)
    expected = {}
    for qtype in (GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q5_0,
                  GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q5_1):  # fmt: skip
        writer.add_tensor(prefix + qtype.name.lower(), quants.quantize(x, qtype), raw_dtype=qtype)
        expected[qtype.name] = _gguf_bytes(qtype, x.shape)
    # K-quants, i-quants and MXFP4 have no numpy quantizer in gguf-py: write blocks of the right byte size
    for qtype in (GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K, GGMLQuantizationType.Q2_K,
                  GGMLQuantizationType.IQ4_XS, GGMLQuantizationType.MXFP4):  # fmt: skip
        raw = rng.integers(0, 255, size=quants.quant_shape_to_byte_shape(x.shape, qtype), dtype=np.uint8)
        writer.add_tensor(prefix + qtype.name.lower(), raw, raw_dtype=qtype)
        expected[qtype.name] = _gguf_bytes(qtype, x.shape)
    writer.add_tensor(prefix + "norm", np.zeros((512,), np.float32))
    writer.add_tensor(prefix + "embd", np.zeros((10, 512), np.float16))
    expected["F32"], expected["F16"] = 512 * 4, 10 * 512 * 2
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return expected


def test_gguf_tensor_table_exact_bytes_and_metadata(tmp_path):
    path = tmp_path / "model.gguf"
    expected = _write_gguf(path)
    info = read_checkpoint(path)
    assert info.format == "gguf"
    assert dict(info.bytes_by_dtype) == expected
    assert info.tensor_bytes == sum(expected.values())
    assert info.params == 10 * 8 * 512 + 512 + 10 * 512
    assert info.bits_per_weight == pytest.approx(info.tensor_bytes * 8 / info.params)
    # the gguf package's own reader agrees tensor by tensor
    reader = GGUFReader(str(path))
    assert {t.name: int(t.n_bytes) for t in reader.tensors} == {t.name: t.nbytes for t in info.tensors}
    shapes = {t.name: t.shape for t in info.tensors}
    assert shapes["q4_k"] == (8, 512) and shapes["embd"] == (10, 512)
    meta = info.metadata
    assert meta["general.architecture"] == "llama" and meta["llama.block_count"] == 2
    assert (meta["test.u64"], meta["test.i32"], meta["test.f32"], meta["test.f64"]) == (2**40, -5, 1.5, 2.25)
    assert meta["test.bool"] is True and meta["test.str"] == "hello"
    assert meta["test.short"] == [1, 2, 3] and meta["test.strings"] == ["a", "bb", "ccc"]
    assert "1000" in meta["tokenizer.ggml.tokens"]  # long arrays are parsed through, then summarised
    q4k = dict(info.params_by_dtype)["Q4_K"]
    assert info.bytes_by_dtype["Q4_K"] * 8 / q4k == 4.5  # the true bits per weight of Q4_K


def test_gguf_custom_alignment_and_big_endian(tmp_path):
    expected = _write_gguf(tmp_path / "aligned.gguf", alignment=64)
    info = read_checkpoint(tmp_path / "aligned.gguf")
    assert info.metadata["general.alignment"] == 64 and dict(info.bytes_by_dtype) == expected
    try:
        from gguf.constants import GGUFEndian
    except ImportError:  # pragma: no cover - older gguf
        pytest.skip("this gguf package cannot write big-endian files")
    expected = _write_gguf(tmp_path / "big.gguf", endianess=GGUFEndian.BIG)
    assert dict(read_checkpoint(tmp_path / "big.gguf").bytes_by_dtype) == expected


def test_gguf_truncated_corrupt_and_wrong_version_name_the_file(tmp_path):
    path = tmp_path / "model.gguf"
    _write_gguf(path)
    data = path.read_bytes()
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(data[:-1000])
    with pytest.raises(PlannerError, match="truncated.gguf: truncated GGUF file"):
        read_checkpoint(truncated)
    header_cut = tmp_path / "header_cut.gguf"
    header_cut.write_bytes(data[:200])
    with pytest.raises(PlannerError, match="header_cut.gguf: truncated GGUF file"):
        read_checkpoint(header_cut)
    version1 = tmp_path / "v1.gguf"
    version1.write_bytes(data[:4] + struct.pack("<I", 1) + data[8:])
    with pytest.raises(PlannerError, match="v1.gguf: GGUF version 1"):
        read_checkpoint(version1)
    # tensor info of "q8_0": u64 name length, name, u32 n_dims (2), 2 x u64 dims, u32 ggml type, u64 offset
    at = data.index(struct.pack("<Q", 4) + b"q8_0") + 8 + 4 + 4 + 16
    assert struct.unpack_from("<I", data, at)[0] == GGMLQuantizationType.Q8_0
    bad_type = tmp_path / "bad_type.gguf"
    bad_type.write_bytes(data[:at] + struct.pack("<I", 99) + data[at + 4 :])
    with pytest.raises(PlannerError, match="bad_type.gguf: tensor 'q8_0' has unknown ggml type 99"):
        read_checkpoint(bad_type)
    foreign = tmp_path / "model2.gguf"
    foreign.write_bytes(b"GGML" + data[4:])
    with pytest.raises(PlannerError, match="model2.gguf: not a GGUF file"):
        read_checkpoint(foreign)


def test_folder_of_gguf_files(tmp_path):
    expected = _write_gguf(tmp_path / "model-00001-of-00002.gguf")
    _write_gguf(tmp_path / "model-00002-of-00002.gguf", prefix="blk.1.")
    info = read_checkpoint(tmp_path)
    assert info.format == "gguf" and len(info.files) == 2
    assert info.tensor_bytes == 2 * sum(expected.values())


def test_the_same_tensor_in_two_files_is_an_error(tmp_path):
    _write_gguf(tmp_path / "a.gguf")
    _write_gguf(tmp_path / "b.gguf")
    with pytest.raises(PlannerError, match="appears in more than one file"):
        read_checkpoint(tmp_path)


def _checkpoint_from_spec(path, spec, fmt):
    """Write the tensors model_tensors lists, in the layout the real checkpoints of `fmt` use."""
    from planner.formats import module_matches
    from planner.params import LINEAR_ROLES, model_tensors

    skip = spec.quantization.modules_to_not_convert if spec.quantization else ()
    tensors = {}
    for g in model_tensors(spec).all():
        shape = (g.rows, g.cols) if g.cols > 1 else (g.rows,)
        if g.count > 1:
            shape = (g.count, *shape)
        if fmt == "mxfp4" and g.role in LINEAR_ROLES and not module_matches(g.module, skip):
            lead = shape[:-1]
            tensors[g.name + "_blocks"] = np.zeros((*lead, g.cols // 32, 16), np.uint8)  # gpt-oss layout
            tensors[g.name + "_scales"] = np.zeros((*lead, g.cols // 32), np.uint8)
        else:
            tensors[g.name] = np.zeros(shape, np.float16)  # 2 bytes, like bf16
    save_file(tensors, str(path))
    return path


def test_a_checkpoint_of_the_spec_reads_back_as_planned(tmp_path):
    from planner.formats import weight_bytes
    from planner.params import count_params
    from planner.spec import load_spec

    tiny_llama = load_spec({
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "torch_dtype": "float16",
    })  # fmt: skip
    info = read_checkpoint(_checkpoint_from_spec(tmp_path / "llama.safetensors", tiny_llama, "fp16"))
    assert info.params == count_params(tiny_llama).total
    assert info.tensor_bytes == weight_bytes(tiny_llama, "fp16").total

    tiny_gpt_oss = load_spec({
        "model_type": "gpt_oss", "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_local_experts": 4,
        "num_experts_per_tok": 2, "vocab_size": 100, "sliding_window": 8,
        "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]},
    })  # fmt: skip
    info = read_checkpoint(_checkpoint_from_spec(tmp_path / "gpt_oss.safetensors", tiny_gpt_oss, "mxfp4"))
    planned = weight_bytes(tiny_gpt_oss)
    assert planned.format == "mxfp4"
    assert info.params == count_params(tiny_gpt_oss).total
    assert info.tensor_bytes == planned.total
    assert info.bits_per_weight == pytest.approx(planned.bits_per_weight)
    # 2 layers x 4 experts x (128 gate_up + 64 down rows) x 64 inputs at 17 bytes per 32 weights
    assert info.bytes_by_dtype["U8"] == 2 * 4 * (128 + 64) * 64 * 17 // 32
