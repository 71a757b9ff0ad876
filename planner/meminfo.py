"""/proc/meminfo's text as numbers, the one parser of it: the planner's "this machine" (planner/machines.py,
which checks the figures), the OS collector's every sample, and the Live screen's first frame, which reads it
once before the collectors and the rest of the planner are imported (issue 20: a figure in the first frame).
Standard library only, a leaf, so that the first frame's import of it costs nothing measurable."""

from __future__ import annotations


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo text -> {key: bytes}. Values are in kB (KiB) in the file, except HugePages_* counts."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if not sep:
            continue
        parts = rest.split()
        if not parts:
            continue
        try:
            number = int(parts[0])
        except ValueError:
            continue
        out[key.strip()] = number * 1024 if len(parts) > 1 and parts[1] == "kB" else number
    return out
