"""Hostile config.toml (issue 12): each refused in one line naming the key or the limit, before anything
starts; --config on a device or FIFO is refused without reading it.
Each failed on main before these checks."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys

import pytest

from tests.conftest import run_memsight
from tui.config import ConfigError, load_config

HANG_GUARD_S = 60  # a hang guard, not a speed check


def _one_gib_address_space() -> None:  # main read /dev/zero to 8 GiB: here it fails at 1 GiB instead
    resource.setrlimit(resource.RLIMIT_AS, (2**30 * 3, 2**30 * 3))


def memsight(*args: str) -> subprocess.CompletedProcess:
    return run_memsight(*args, preexec_fn=_one_gib_address_space)


def one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("memsight: ")
    return line


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[thresholds]\nheadroom_warn_gib = inf\n", "thresholds.headroom_warn_gib must be a finite size"),
        ("[thresholds]\ngrowth_gib = nan\n", "thresholds.growth_gib must be a finite size"),
        ("[plan]\nunified_os_reserve_gib = inf\n", "plan.unified_os_reserve_gib must be a finite size"),
        ("refresh_hz = inf\n", "refresh_hz must be a finite number"),
        ("[thresholds]\ngrowth_gib = 1e15\n", "growth_gib is 1000000000000000.0, over MAX_MEASURED = 2**63"),
        ("refresh_hz = 1000.0\n", "outside MIN_REFRESH_HZ = 0.001 .. MAX_REFRESH_HZ = 100"),
        ("refresh_hz = 1e-300\n", "outside MIN_REFRESH_HZ = 0.001"),
    ],
    ids=["inf-threshold", "nan-threshold", "inf-reserve", "inf-hz", "1e15-gib", "1000-hz", "1e-300-hz"],
)
def test_non_finite_and_implausible_numbers_are_refused(tmp_path, text, message):
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(path, required=True)


def test_refresh_hz_inf_stops_run_before_the_child_starts(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("refresh_hz = inf\n")
    marker = tmp_path / "child-ran"
    proc = memsight("run", "--headless", "--config", str(path), "--", sys.executable, "-c",
                    f"open({str(marker)!r}, 'w')")  # fmt: skip
    assert "refresh_hz must be a finite number" in one_line(proc)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("hz", "message"), [("inf", "must be a finite number"), ("1e-300", "is 1e-300, outside MIN_REFRESH_HZ")]
)
def test_hz_option_inf_or_tiny_is_refused(hz, message):
    proc = memsight("replay", "--hz", hz, "x.jsonl")  # an argparse error: usage, then the reason
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"argument --hz: {message}" in proc.stderr  # the option named once


def test_config_dev_zero_is_refused_without_reading_it():
    line = one_line(memsight("replay", "--config", "/dev/zero", "x.jsonl"))
    assert "/dev/zero: not a regular file (a character device)" in line


def test_config_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "config.toml")
    line = one_line(memsight("replay", "--config", str(tmp_path / "config.toml"), "x.jsonl"))
    assert "not a regular file (a FIFO)" in line


def test_a_config_over_the_limit_is_refused(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("# padding\n" * 200_000)
    with pytest.raises(ConfigError, match="over MAX_TOML_BYTES = 1 MiB"):
        load_config(path, required=True)


def test_non_utf8_bytes_are_one_line(tmp_path):
    path = tmp_path / "config.toml"
    path.write_bytes(b"refresh_hz = 2\n# \xff\xfe\n")
    line = one_line(memsight("replay", "--config", str(path), "x.jsonl"))
    assert "is not UTF-8 text" in line


def test_an_integer_over_4300_digits_is_one_line(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("refresh_hz = " + "9" * 5000 + "\n")  # main: ValueError out of tomllib
    with pytest.raises(ConfigError, match="Exceeds the limit"):
        load_config(path, required=True)
