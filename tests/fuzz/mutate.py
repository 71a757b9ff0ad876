"""Mutators for the fuzz suite: real files (../shared/ configs and fixtures, the bundled recording, files the
real writers produce) changed the ways broken downloads, bad disks, other programs and attackers change them.

Every mutator takes a random.Random (hypothesis draws it, so failures shrink and replay) and returns bytes.
"""

from __future__ import annotations

import json
import random
import re
import struct
from typing import Any

# Raw JSON text dropped in place of a value: each once crashed a reader, or could.
HOSTILE_JSON = (
    "Infinity", "-Infinity", "NaN", "1e999", "-1e999", "1e300", "-1", "0", "0.5", "-0.0", "1" + "0" * 30,
    "9" * 400, "9" * 5000, str(2**63), str(2**64), str(-(2**63) - 1), '"2"', '""', '"' + "x" * 5000 + '"',
    "[]", "{}", "null", "true", "false", "[0, 0]", "[-1, 5]", '{"a": 1}', "[" * 3000 + "]" * 3000,
    '"\\u0000"', '"\\ud800"', "1000000", "4294967296",
)  # fmt: skip

STRUCTURAL = (b"[", b"]", b"{", b"}", b'"', b",", b":", b"\n", b"\\", b"\x00", b"\xff", b"=", b"#", b" ")


def mutate_bytes(data: bytes, rnd: random.Random, rounds: int | None = None) -> bytes:
    """Byte-level damage: flips, inserts, deletes, truncation, duplicated chunks, structural characters."""
    buf = bytearray(data)
    for _ in range(rounds or rnd.randint(1, 4)):
        op = rnd.randrange(8)
        n = len(buf)
        pos = rnd.randrange(n + 1)
        if op == 0 and n:
            buf[min(pos, n - 1)] ^= 1 << rnd.randrange(8)
        elif op == 1:
            buf[pos:pos] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 8)))
        elif op == 2 and n:
            del buf[pos : pos + rnd.randint(1, 64)]
        elif op == 3:
            del buf[pos:]
        elif op == 4 and n:
            start = rnd.randrange(n)
            chunk = buf[start : start + rnd.randint(1, 256)]
            buf[pos:pos] = chunk * rnd.randint(1, 50)
        elif op == 5:
            buf[pos:pos] = rnd.choice(STRUCTURAL) * rnd.randint(1, 3)
        elif op == 6 and n:
            buf[min(pos, n - 1)] = rnd.randrange(256)
        else:
            buf[pos:pos] = rnd.choice(HOSTILE_JSON).encode()
    return bytes(buf)


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value[:64]):
            out.extend(_paths(v, (*prefix, i)))
    return out


def mutate_json_value(value: Any, rnd: random.Random, rounds: int | None = None) -> str:
    """Structure-aware damage to parsed JSON: a value replaced by a hostile one, a key deleted, a list
    emptied or blown up; returned as text (hostile numbers spliced in as raw JSON)."""
    value = json.loads(json.dumps(value))  # a private copy
    raw: dict[str, str] = {}
    for i in range(rounds or rnd.randint(1, 3)):
        paths = [p for p in _paths(value) if p]
        if not paths:
            break
        path = rnd.choice(paths)
        parent = value
        for key in path[:-1]:
            parent = parent[key]
        last = path[-1]
        op = rnd.randrange(4)
        if op == 0 and isinstance(parent, dict):
            del parent[last]
        elif op == 1 and isinstance(parent[last], list) and parent[last]:
            parent[last] = parent[last] * rnd.choice((0, 2, 100))
        else:
            token = f"\u0001hostile{i}\u0001"
            raw[json.dumps(token)] = rnd.choice(HOSTILE_JSON)
            parent[last] = token
    text = json.dumps(value)
    for token, hostile in raw.items():
        text = text.replace(token, hostile)
    return text


def mutate_json_text(data: bytes, rnd: random.Random) -> bytes:
    """Either structure-aware (when the seed parses) or byte-level damage, at random."""
    if rnd.random() < 0.6:
        try:
            return mutate_json_value(json.loads(data), rnd).encode()
        except (ValueError, RecursionError):  # the seed line is already broken: damage its bytes
            pass
    return mutate_bytes(data, rnd)


def mutate_lines(data: bytes, rnd: random.Random) -> bytes:
    """JSON lines: a few lines damaged (structure-aware or byte-level), lines dropped, duplicated, swapped."""
    lines = data.split(b"\n")
    for _ in range(rnd.randint(1, 4)):
        i = rnd.randrange(len(lines))
        op = rnd.randrange(5)
        if op <= 1:
            lines[i] = mutate_json_text(lines[i], rnd)
        elif op == 2:
            del lines[i]
            if not lines:
                lines = [b""]
        elif op == 3:
            lines.insert(i, lines[rnd.randrange(len(lines))])
        else:
            j = rnd.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines)


_DOUBLES = (float("inf"), float("-inf"), float("nan"), 1e300, -1e300, 2.0**64, -1.0, 5e-324, 2.0**53 + 1)
_WORDS = (0, 1, 2**32 - 1, 2**63, 2**64 - 1, 2**31, 4096, 8_000_000, 0xFFFF_FFFF_0000_0000)


def mutate_binary(data: bytes, rnd: random.Random, hot: int = 4096) -> bytes:
    """Binary formats (ring files, GGUF, safetensors): hostile doubles and integers written over aligned
    words, most often inside the first `hot` bytes (the header), plus byte-level damage."""
    buf = bytearray(data)
    for _ in range(rnd.randint(1, 4)):
        op = rnd.randrange(4)
        limit = min(len(buf), hot) if rnd.random() < 0.7 else len(buf)
        if limit < 8:
            return mutate_bytes(bytes(buf), rnd)
        pos = rnd.randrange(0, limit - 7) & ~3
        if op == 0:
            struct.pack_into("<d", buf, pos, rnd.choice(_DOUBLES))
        elif op == 1:
            struct.pack_into("<Q", buf, pos, rnd.choice(_WORDS))
        elif op == 2:
            struct.pack_into("<I", buf, pos, rnd.choice(_WORDS) & 0xFFFFFFFF)
        else:
            buf = bytearray(mutate_bytes(bytes(buf), rnd, 1))
    return bytes(buf)


def mutate_toml(data: bytes, rnd: random.Random) -> bytes:
    """config.toml: a value replaced by a hostile TOML value, or byte-level damage."""
    lines = data.split(b"\n")
    values = [i for i, line in enumerate(lines) if b"=" in line]
    if values and rnd.random() < 0.6:
        i = rnd.choice(values)
        key = lines[i].split(b"=")[0]
        hostile = rnd.choice(
            (b"inf", b"-inf", b"nan", b"+inf", b"1e999", b"-1", b"0", b"1e-300", b"1e300", b"9" * 30, b'"2"',
             b"[]", b"{}", b"true", b"[1, [2, [3]]]", b"2026-01-01", b'"\xff"', b"0x7fffffffffffffff")
        )  # fmt: skip
        lines[i] = key + b"= " + hostile
        return b"\n".join(lines)
    return mutate_bytes(data, rnd)


# Numbers written over a log's own: what a broken, edited or hostile log could say where a figure stands.
HOSTILE_NUMBERS = (
    "0", "-1", "-0.0", "1e999", "inf", "nan", "NaN", "9" * 30, "9" * 5000, "0.0000001", str(2**64),
    "1,000,000", "3.5.1", "", "1e-300",
)  # fmt: skip
_NUMBER = re.compile(rb"\d+(?:[.,]\d+)*")


def mutate_log(data: bytes, rnd: random.Random) -> bytes:
    """A text log (an engine's start-up log): figures replaced by hostile numbers, lines dropped, duplicated,
    swapped or damaged byte by byte, or the log cut short."""
    lines = data.split(b"\n")
    for _ in range(rnd.randint(1, 4)):
        op = rnd.randrange(6)
        i = rnd.randrange(len(lines))
        numbered = [k for k, line in enumerate(lines) if _NUMBER.search(line)]
        if op <= 1 and numbered:
            k = rnd.choice(numbered)
            found = list(_NUMBER.finditer(lines[k]))
            m = rnd.choice(found)
            hostile = rnd.choice(HOSTILE_NUMBERS).encode()
            lines[k] = lines[k][: m.start()] + hostile + lines[k][m.end() :]
        elif op == 2 and len(lines) > 1:
            del lines[i]
        elif op == 3:
            lines.insert(i, lines[rnd.randrange(len(lines))] * rnd.choice((1, 1, 50)))
        elif op == 4:
            j = rnd.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        else:
            lines[i] = mutate_bytes(lines[i], rnd)
    if rnd.random() < 0.1:
        del lines[rnd.randrange(len(lines)) :]
    return b"\n".join(lines)
