"""What a real checkpoint holds, read from its headers only (no tensor is loaded).

* safetensors: an 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}},
  then the data. A single file, a folder, or a sharded set listed in model.safetensors.index.json.
* GGUF (llama.cpp): magic "GGUF", version 2 or 3, tensor and metadata counts, metadata key/values of every
  type (arrays included), tensor infos (name, dims, ggml type, offset), then the aligned data section.
  Split files (-00001-of-0000N.gguf) in one folder are summed.

Sizes are checked against the file: a header that points past the end (a truncated download), a malformed
header or a file of another kind is a PlannerError naming the file.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import stat
import struct
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, BinaryIO

from planner import limits
from planner.errors import PlannerError
from planner.formats import GGML_TYPES

# safetensors dtypes -> bits per element (F4/F6 are packed sub-byte types)
SAFETENSORS_DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16,
    "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "F64": 64, "I64": 64, "U64": 64, "F4": 4, "F6_E2M3": 6,
    "F6_E3M2": 6,
}  # fmt: skip

# Quantized checkpoints store, next to the weights, tensors that are not parameters: scales, zero points,
# group maps. Their bytes count, their elements do not. Matched on the end of the tensor name.
AUX_SUFFIXES = (
    ".weight_scale", ".weight_scale_inv", ".weight_scale_2", ".input_scale", ".output_scale", ".k_scale",
    ".v_scale", ".scales", ".qzeros", ".g_idx", "_scales", ".weight_zero_point", ".weight_shape",
    ".weight_global_scale", ".input_global_scale", ".weight_g_idx",
)  # fmt: skip

GGUF_MAGIC = b"GGUF"
GGUF_DEFAULT_ALIGNMENT = 32


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    dtype: str  # safetensors dtype ("BF16") or ggml type name ("Q4_K")
    shape: tuple[int, ...]
    nbytes: int
    params: int  # logical weights it holds (packed 4-bit: 2 per byte; scales: 0)
    file: str


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    path: str
    format: str  # "safetensors" | "gguf"
    files: tuple[str, ...]
    file_bytes: int  # size of the files on disk
    tensor_bytes: int  # bytes of tensor data (sum over tensors)
    params: int  # logical parameters (scales and zero points excluded)
    bytes_by_dtype: Mapping[str, int]
    params_by_dtype: Mapping[str, int]
    aux_bytes: int  # of tensor_bytes: scales, zero points, group indices
    bits_per_weight: float  # tensor_bytes * 8 / params
    tensors: tuple[TensorInfo, ...]
    metadata: Mapping[str, Any]  # safetensors __metadata__ or GGUF key/values (long arrays summarised)
    notes: tuple[str, ...] = ()


def read_checkpoint(path: str | os.PathLike) -> CheckpointInfo:
    """Read a checkpoint's headers: a .safetensors file, a model.safetensors.index.json, a .gguf file, or a
    folder holding any of these."""
    p = pathlib.Path(path).expanduser()
    try:
        st = p.stat()
    except (OSError, ValueError) as exc:
        raise PlannerError(f"{p}: no such file or folder ({getattr(exc, 'strerror', None) or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        bits = _packed_bits(p)
        index = p / "model.safetensors.index.json"
        if index.is_file():
            return _read_sharded(index, bits)
        shards = sorted(p.glob("*.safetensors"))
        if shards:
            return _summarise(p, "safetensors", [_read_safetensors(f, bits) for f in shards], {}, [])
        ggufs = sorted(p.glob("*.gguf"))
        if ggufs:
            return _read_gguf_files(p, ggufs)
        raise PlannerError(f"{p}: no *.safetensors, model.safetensors.index.json or *.gguf file here")
    if p.name.endswith(".index.json"):
        return _read_sharded(p, _packed_bits(p.parent))
    fd = limits.open_regular(p, PlannerError, "checkpoint file")
    try:
        magic = os.read(fd, 4)
    except OSError as exc:
        raise PlannerError(f"{p}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if magic == GGUF_MAGIC:
        return _read_gguf_files(p, [p])
    if p.suffix == ".gguf":
        raise PlannerError(f"{p}: not a GGUF file (magic {magic!r}, expected b'GGUF')")
    return _summarise(p, "safetensors", [_read_safetensors(p, _packed_bits(p.parent))], {}, [])


def _packed_bits(folder: pathlib.Path) -> int:
    """Bits per packed integer weight, from quantization_config.bits of the config.json beside the weights
    (AWQ/GPTQ); 4 when there is none."""
    config = folder / "config.json"
    if not config.is_file():
        return 4
    try:
        data = limits.loads_json(
            limits.read_regular(config, "MAX_CONFIG_BYTES", PlannerError, "config.json"), finite_only=False
        )
    except (PlannerError, limits.JSONLimitError):
        return 4  # the weights can still be read; load_spec reports a broken config.json
    qc = data.get("quantization_config") if isinstance(data, dict) else None
    bits = qc.get("bits", qc.get("w_bit")) if isinstance(qc, dict) else None
    if bits is None:
        return 4
    if bits not in (2, 4, 8):
        raise PlannerError(f"{config}: quantization_config.bits {bits!r} cannot be packed in int32 words")
    return bits


# ----------------------------------------------------------------------------------------------------------
# safetensors


@dataclass(frozen=True, slots=True)
class _FileTensors:
    file: pathlib.Path
    tensors: tuple[TensorInfo, ...]
    metadata: Mapping[str, Any]


def _read_safetensors(path: pathlib.Path, packed_bits: int = 4) -> _FileTensors:
    """One safetensors file; packed_bits: bits per weight packed into int32 words (AWQ/GPTQ qweight)."""
    fd = limits.open_regular(path, PlannerError, "safetensors file")
    try:
        size = os.fstat(fd).st_size
        with os.fdopen(fd, "rb") as fh:
            fd = -1  # the file object owns it now
            head = fh.read(8)
            if len(head) < 8:
                raise PlannerError(f"{path}: too short for a safetensors file ({size} bytes)")
            (header_len,) = struct.unpack("<Q", head)
            if header_len > limits.MAX_SAFETENSORS_HEADER:
                raise PlannerError(
                    f"{path}: not a safetensors file (a header of {header_len} bytes, over "
                    f"{limits.bound('MAX_SAFETENSORS_HEADER')})"
                )
            if 8 + header_len > size:
                raise PlannerError(
                    f"{path}: truncated safetensors file: the header needs {header_len} bytes, "
                    f"the file has {size - 8}"
                )
            raw = fh.read(header_len)
    except OSError as exc:
        raise PlannerError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    finally:
        if fd >= 0:
            os.close(fd)
    try:
        header = limits.loads_json(raw)
    except limits.JSONLimitError as exc:
        raise PlannerError(f"{path}: not a safetensors file (its header: {exc})") from None
    del raw
    if not isinstance(header, dict):
        raise PlannerError(f"{path}: not a safetensors file (its header is not a JSON object)")
    metadata = header.pop("__metadata__", None) or {}
    if len(header) > limits.MAX_TENSORS:
        raise PlannerError(f"{path}: {len(header)} tensors, over {limits.bound('MAX_TENSORS')}")
    data_size = size - 8 - header_len
    tensors = [_safetensors_tensor(path, name, entry, data_size) for name, entry in header.items()]
    dtypes = {t.name: t.dtype for t in tensors}
    tensors = [
        dataclasses.replace(t, params=_logical_params(t.name, t.dtype, t.params, dtypes, packed_bits))
        for t in tensors
    ]
    return _FileTensors(path, tuple(tensors), metadata if isinstance(metadata, dict) else {})


def _safetensors_tensor(path: pathlib.Path, name: str, entry: Any, data_size: int) -> TensorInfo:
    if not isinstance(entry, dict):
        raise PlannerError(f"{path}: tensor {name!r}: header entry is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in SAFETENSORS_DTYPE_BITS:  # a list is unhashable
        raise PlannerError(f"{path}: tensor {name!r}: unknown dtype {str(dtype)[:40]!r}")
    if (
        not isinstance(shape, list)
        or len(shape) > 8
        or not all(isinstance(d, int) and 0 <= d <= limits.MAX_MEASURED for d in shape)
    ):
        raise PlannerError(f"{path}: tensor {name!r}: malformed shape {shape!r}")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and o >= 0 for o in offsets)
        or offsets[1] < offsets[0]
    ):
        raise PlannerError(f"{path}: tensor {name!r}: malformed data_offsets {offsets!r}")
    numel = 1
    for d in shape:
        numel *= d
    nbytes = offsets[1] - offsets[0]
    expected = -(-numel * SAFETENSORS_DTYPE_BITS[dtype] // 8)
    if nbytes != expected:
        raise PlannerError(
            f"{path}: tensor {name!r}: {nbytes} bytes in data_offsets but {dtype}{shape} needs {expected}"
        )
    if offsets[1] > data_size:
        raise PlannerError(
            f"{path}: truncated: tensor {name!r} ends at byte {offsets[1]} of the data section, "
            f"which holds only {data_size} bytes"
        )
    return TensorInfo(name, dtype, tuple(shape), nbytes, numel, str(path))  # params: see _logical_params


def _logical_params(name: str, dtype: str, numel: int, dtypes: Mapping[str, str], packed_bits: int) -> int:
    """Weights a tensor holds: 0 for scales/zero points; 32/packed_bits per int32 of packed integer weights
    (AWQ/GPTQ qweight, compressed-tensors weight_packed); 2 per byte of packed fp4 (mxfp4 *_blocks, and
    NVFP4 uint8 weights that come with an fp8 weight_scale)."""
    if name.endswith(AUX_SUFFIXES):
        return 0
    if dtype in ("I32", "U32") and name.endswith((".qweight", ".weight_packed")):
        return numel * (32 // packed_bits)
    if dtype == "U8" and name.endswith("_blocks"):
        return numel * 2
    if dtype == "U8" and name.endswith((".weight", ".weight_packed")):
        stem = name.rsplit(".", 1)[0]
        if dtypes.get(stem + ".weight_scale") == "F8_E4M3":  # NVFP4: e2m1 pairs + fp8 block scales
            return numel * 2
    return numel


def _read_sharded(index: pathlib.Path, packed_bits: int = 4) -> CheckpointInfo:
    raw = limits.read_regular(index, "MAX_INDEX_BYTES", PlannerError, "safetensors index")
    try:
        data = limits.loads_json(raw)
    except limits.JSONLimitError as exc:
        raise PlannerError(f"{index}: malformed index JSON: {exc}") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise PlannerError(f"{index}: no 'weight_map' object in the index")
    if len(weight_map) > limits.MAX_TENSORS:
        raise PlannerError(f"{index}: {len(weight_map)} tensors, over {limits.bound('MAX_TENSORS')}")
    meta = data.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise PlannerError(f"{index}: 'metadata' must be an object, found {type(meta).__name__}")
    folder = index.parent
    files = sorted({str(f) for f in weight_map.values()})
    for name in files:
        if (
            not name
            or "/" in name
            or "\\" in name
            or name in (".", "..")
            or len(name.encode("utf-8", "surrogatepass")) > 255
            or not name.isprintable()  # a lone surrogate or a control character (found by the fuzz suite)
        ):
            raise PlannerError(f"{index}: shard name {name[:80]!r} is not a file name in the index's folder")
    shards = []
    for name in files:
        shard = folder / name
        if not shard.is_file():
            raise PlannerError(f"{index}: shard {name} listed in weight_map is missing")
        shards.append(_read_safetensors(shard, packed_bits))
    found = {t.name: pathlib.Path(t.file).name for s in shards for t in s.tensors}
    missing = [n for n, f in weight_map.items() if found.get(n) != pathlib.Path(str(f)).name]
    if missing:
        raise PlannerError(
            f"{index}: {len(missing)} tensors of weight_map are not in the shard named for them, "
            f"e.g. {missing[0]!r}"
        )
    notes = []
    declared = (meta or {}).get("total_size")
    summary = _summarise(index.parent, "safetensors", shards, {}, notes)
    if isinstance(declared, int) and declared != summary.tensor_bytes:
        notes.append(
            f"index metadata.total_size is {declared} bytes; the shard headers hold {summary.tensor_bytes}"
        )
        return _summarise(index.parent, "safetensors", shards, {}, notes)
    return summary


def _summarise(
    path: pathlib.Path, fmt: str, parts: list[_FileTensors], metadata: Mapping[str, Any], notes: list[str]
) -> CheckpointInfo:
    tensors = tuple(t for part in parts for t in part.tensors)
    if not tensors:
        raise PlannerError(f"{path}: the checkpoint holds no tensors, so there are no weights to plan from")
    if len(tensors) > limits.MAX_TENSORS:
        raise PlannerError(f"{path}: {len(tensors)} tensors, over {limits.bound('MAX_TENSORS')}")
    counts = Counter(t.name for t in tensors)
    if len(counts) != len(tensors):
        dupes = sorted(n for n, c in counts.items() if c > 1)
        raise PlannerError(f"{path}: tensor {dupes[0]!r} appears in more than one file")
    bytes_by: dict[str, int] = {}
    params_by: dict[str, int] = {}
    aux = 0
    for t in tensors:
        bytes_by[t.dtype] = bytes_by.get(t.dtype, 0) + t.nbytes
        params_by[t.dtype] = params_by.get(t.dtype, 0) + t.params
        if t.params == 0 and t.nbytes:
            aux += t.nbytes
    total = sum(bytes_by.values())
    params = sum(params_by.values())
    merged_meta = dict(metadata)
    if fmt == "safetensors" and len(parts) == 1:
        merged_meta.update(parts[0].metadata)
    return CheckpointInfo(
        path=str(path),
        format=fmt,
        files=tuple(str(p.file) for p in parts),
        file_bytes=sum(p.file.stat().st_size for p in parts),
        tensor_bytes=total,
        params=params,
        bytes_by_dtype=MappingProxyType(dict(sorted(bytes_by.items()))),
        params_by_dtype=MappingProxyType({k: v for k, v in sorted(params_by.items()) if v}),
        aux_bytes=aux,
        bits_per_weight=total * 8 / params if params else 0.0,
        tensors=tensors,
        metadata=MappingProxyType(merged_meta),
        notes=tuple(notes),
    )


# ----------------------------------------------------------------------------------------------------------
# GGUF

# GGUF metadata value types: id -> struct format (scalars); 8 = string, 9 = array
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9
_KEEP_ARRAY_ITEMS = 16  # longer arrays (tokenizer vocabularies) are summarised in the metadata


class _Reader:
    """Bounded reads from a GGUF file; running past the end is a truncated file."""

    def __init__(self, fh: BinaryIO, path: pathlib.Path, size: int) -> None:
        self.fh, self.path, self.size = fh, path, size
        self.endian = "<"

    def read(self, n: int) -> bytes:
        data = self.fh.read(n)
        if len(data) != n:
            end = self.fh.tell() + n
            raise PlannerError(f"{self.path}: truncated GGUF file (the header runs past byte {end})")
        return data

    def unpack(self, fmt: str) -> Any:
        s = struct.Struct(self.endian + fmt)
        return s.unpack(self.read(s.size))[0]

    def string(self) -> str:
        length = self.unpack("Q")
        if length > self.size:
            raise PlannerError(f"{self.path}: corrupt GGUF header (a string claims {length} bytes)")
        raw = self.read(length)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise PlannerError(f"{self.path}: corrupt GGUF header (a string is not UTF-8)") from None

    def value(self, vtype: int, depth: int = 0) -> Any:
        if vtype in _GGUF_SCALARS:
            return self.unpack(_GGUF_SCALARS[vtype])
        if vtype == _GGUF_STRING:
            return self.string()
        if vtype == _GGUF_ARRAY:
            if depth > 4:
                raise PlannerError(f"{self.path}: corrupt GGUF header (arrays nested too deep)")
            item_type = self.unpack("I")
            count = self.unpack("Q")
            if count > self.size:
                raise PlannerError(f"{self.path}: corrupt GGUF header (an array claims {count} items)")
            if item_type in _GGUF_SCALARS:
                s = struct.Struct(self.endian + _GGUF_SCALARS[item_type])
                raw = self.read(s.size * count)
                if count <= _KEEP_ARRAY_ITEMS:
                    return [v[0] for v in s.iter_unpack(raw)]
                return f"<array of {count} {s.format[-1]}>"
            items = [self.value(item_type, depth + 1) for _ in range(count)]
            return items if count <= _KEEP_ARRAY_ITEMS else f"<array of {count} items>"
        raise PlannerError(f"{self.path}: corrupt GGUF header (unknown metadata value type {vtype})")


def _read_gguf(path: pathlib.Path) -> tuple[_FileTensors, dict[str, Any]]:
    fd = limits.open_regular(path, PlannerError, "GGUF file")
    try:
        size = os.fstat(fd).st_size
        fh = os.fdopen(fd, "rb")
    except OSError as exc:
        os.close(fd)
        raise PlannerError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    with fh:
        metadata, infos = _read_gguf_header(_Reader(fh, path, size))
        header_end = fh.tell()
    alignment = metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise PlannerError(f"{path}: general.alignment {alignment!r} is not a power of two")
    data_start = -(-header_end // alignment) * alignment
    tensors = [
        _gguf_tensor(path, name, dims, ggml_type, offset, alignment, data_start, size)
        for name, dims, ggml_type, offset in infos
    ]
    return _FileTensors(path, tuple(tensors), {}), metadata


def _read_gguf_header(r: _Reader) -> tuple[dict[str, Any], list[tuple[str, tuple[int, ...], int, int]]]:
    """The metadata and the tensor infos (name, dims, ggml type, offset) of a GGUF file, read from byte 0."""
    path, size = r.path, r.size
    magic = r.fh.read(4)  # not r.read: a file shorter than the magic is no GGUF, not a truncated one
    if magic != GGUF_MAGIC:
        raise PlannerError(f"{path}: not a GGUF file (magic {magic!r}, expected b'GGUF')")
    raw_version = r.read(4)
    version = struct.unpack("<I", raw_version)[0]
    if version not in (2, 3) and struct.unpack(">I", raw_version)[0] in (2, 3):
        r.endian = ">"  # big-endian GGUF (s390x builds)
        version = struct.unpack(">I", raw_version)[0]
    if version not in (2, 3):
        raise PlannerError(f"{path}: GGUF version {version} is not supported (only versions 2 and 3)")
    n_tensors = r.unpack("Q")
    n_kv = r.unpack("Q")
    if n_tensors > min(size, limits.MAX_TENSORS) or n_kv > size:
        raise PlannerError(f"{path}: corrupt GGUF header ({n_tensors} tensors, {n_kv} metadata entries)")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string()
        metadata[key] = r.value(r.unpack("I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.unpack("I")
        if n_dims > 8:
            raise PlannerError(f"{path}: corrupt GGUF header (tensor {name!r} has {n_dims} dimensions)")
        dims = tuple(r.unpack("Q") for _ in range(n_dims))
        ggml_type = r.unpack("I")
        offset = r.unpack("Q")
        infos.append((name, dims, ggml_type, offset))
    return metadata, infos


def _gguf_tensor(
    path: pathlib.Path,
    name: str,
    dims: tuple[int, ...],
    ggml_type: int,
    offset: int,
    alignment: int,
    data_start: int,
    size: int,
) -> TensorInfo:
    """One tensor of the header, checked against its type's blocks, the alignment and the file's size."""
    if ggml_type not in GGML_TYPES:
        raise PlannerError(f"{path}: tensor {name!r} has unknown ggml type {ggml_type}")
    type_name, block, block_bytes = GGML_TYPES[ggml_type]
    numel = 1
    for d in dims:
        numel *= d
    if dims and dims[0] % block:
        raise PlannerError(
            f"{path}: tensor {name!r}: row of {dims[0]} elements is not a whole number of {type_name} "
            f"blocks of {block}"
        )
    nbytes = numel // block * block_bytes
    if offset % alignment:
        raise PlannerError(f"{path}: tensor {name!r}: offset {offset} is not aligned to {alignment}")
    if data_start + offset + nbytes > size:
        raise PlannerError(
            f"{path}: truncated GGUF file: tensor {name!r} needs bytes up to "
            f"{data_start + offset + nbytes}, the file has {size}"
        )
    # GGUF lists dims fastest-first (ne[0] = row length); report them in the usual row-major order.
    return TensorInfo(name, type_name, tuple(reversed(dims)), nbytes, numel, str(path))


def _read_gguf_files(path: pathlib.Path, files: list[pathlib.Path]) -> CheckpointInfo:
    parts = []
    metadata: dict[str, Any] = {}
    for f in files:
        part, meta = _read_gguf(f)
        parts.append(part)
        if not metadata:
            metadata = meta
    return _summarise(path, "gguf", parts, metadata, [])
