"""One parser for what users type (tui/options.py), used the same way by every command (issue 11, item 6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from tui import cli, cmd_watch, options
from tui.options import InputError, parse_choice, parse_count, parse_number, parse_size

GIB = 2**30


def memsight(*args: str, config: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMSIGHT_CONFIG": config or os.devnull + ".absent"}
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def watch_args(argv: list[str]):
    parser, _ = cli.build_parser(["watch", *argv])
    return parser.parse_args(["watch", "--config", os.devnull, *argv])


def plan_json(*args: str, config: str | None = None) -> dict:
    done = memsight("plan", *args, "--json", config=config)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8192", 8192),
        ("8,192", 8192),
        ("8_192", 8192),
        (" 32k ", 32768),
        ("128K", 131072),
        ("1.5k", 1536),
        ("1M", 1048576),
        ("1,048,576", 1048576),
        (4096, 4096),
        (4096.0, 4096),
    ],
)
def test_counts_as_users_write_them(text, value):
    assert parse_count(text, "context") == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("8,19", "misplaced thousands separator"),
        ("12,3456", "misplaced thousands separator"),
        ("1.3k", "not a whole number"),
        ("32x", "not a whole number"),
        ("", "not a whole number"),
        ("k", "not a whole number"),
        (True, "whole number"),
        (2.5, "whole number"),
    ],
)
def test_bad_counts_say_what_is_wrong(text, message):
    with pytest.raises(InputError, match=message) as raised:
        parse_count(text, "--context")
    assert str(raised.value).startswith("--context")


def test_count_minimum():
    with pytest.raises(InputError, match="--users must be at least 1, got 0"):
        parse_count("0", "--users", minimum=1)


@pytest.mark.parametrize("text", ["-3", "-3k", " -1,024 "])
def test_a_negative_count_is_below_the_minimum_not_other_than_a_number(text):
    with pytest.raises(InputError, match=f"--users must be at least 1, got {text}$"):
        parse_count(text, "--users", minimum=1)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("24", 24 * GIB),
        (24, 24 * GIB),
        (1.5, 3 * GIB // 2),
        ("1.5GiB", 3 * GIB // 2),
        ("1.5 gib", 3 * GIB // 2),
        ("1536MiB", 3 * GIB // 2),
        ("512M", 512 * 2**20),
        ("80GB", 80 * 10**9),
        ("2TiB", 2 * 2**40),
        ("1,024 MiB", GIB),
        ("4096b", 4096),
    ],
)
def test_sizes_as_users_write_them(text, value):
    assert parse_size(text, "--capacity-gib") == value


def test_size_unit_and_bounds():
    assert parse_size("512", "x", unit="MiB") == 512 * 2**20
    with pytest.raises(InputError, match="not a size"):
        parse_size("12 parsecs", "--frag")
    with pytest.raises(InputError, match="greater than 0 GiB"):
        parse_size("0", "--capacity-gib", strict=True)
    with pytest.raises(InputError, match="finite"):
        parse_size(float("inf"), "x")


def test_numbers_and_choices():
    assert parse_number("2.5", "--hz", strict=True) == 2.5
    for bad in ("nan", "inf", "fast"):
        with pytest.raises(InputError, match="--hz"):
            parse_number(bad, "--hz")
    assert parse_choice("Spark", ["spark", "h100"], "--machine") == "spark"
    assert parse_choice(" H100 ", ["spark", "h100"], "--machine") == "h100"
    with pytest.raises(InputError, match="'a100' is not one of spark, h100"):
        parse_choice("a100", ["spark", "h100"], "--machine")


def test_plan_takes_sizes_counts_and_choices_as_users_write_them():
    plain = plan_json("llama-3.1-8b", "--context", "32768", "--users", "8", "--machine", "h100")
    written = plan_json("llama-3.1-8b", "--ctx", "32k", "--users", "8", "--machine", "H100")
    assert written == plain
    assert plain["context"] == 32768 and plain["machine"] == "h100"
    custom = plan_json("llama-3.1-8b", "--capacity-gib", "80GB", "--overhead-gib", "1536MiB")
    assert custom["capacity_bytes"] == 80 * 10**9
    assert custom["overhead_bytes"] == 3 * GIB // 2


def test_plan_and_watch_share_option_names_and_defaults(tmp_path):
    """--context is the canonical name everywhere, --ctx its alias; the users default is the same."""
    for command in ("plan", "watch", "run", "replay", "demo"):
        argv = [command, "--help"]
        parser, _ = cli.build_parser(argv)
        sub = parser._subparsers._group_actions[0].choices[command]
        flags = {flag for action in sub._actions for flag in action.option_strings}
        assert {"--context", "--ctx", "--users", "--tp", "--format", "--kv-dtype"} <= flags, command
    default = plan_json("llama-3.1-8b")
    assert default["users"] == options.DEFAULT_USERS == 8
    assert default["context"] == options.DEFAULT_CONTEXT
    watch = cmd_watch.display_options(cmd_watch.resolve_config(watch_args([])))["plan_inputs"]
    assert (watch.users, watch.context, watch.format) == (default["users"], default["context"], None)


def test_kv_auto_help_tells_the_truth():
    """--kv-dtype auto follows the config's dtype, not --format: the help says so, and the plan does it."""
    done = memsight("plan", "--help")
    assert "NOT the --format" in " ".join(done.stdout.split())
    bf16 = plan_json("llama-3.1-8b", "--machine", "h100")
    fp8 = plan_json("llama-3.1-8b", "--machine", "h100", "--format", "fp8")
    assert fp8["weight_bytes"] < bf16["weight_bytes"]
    assert fp8["kv_bytes_per_token"] == bf16["kv_bytes_per_token"] == 131_072


def test_bad_values_are_one_line_exit_2():
    """One `memsight CMD: argument --X: reason` line, the option named once (issue 21, item 11: argparse's
    "argument --machine: " used to be followed by the parser's own "--machine: "), the lab's experiments
    included (their parsers printed argparse's usage and "error:")."""
    for argv, message in (
        (["plan", "llama-3.1-8b", "--ctx", "32q"], "memsight plan: argument --context/--ctx: '32q' is not"),
        (
            ["plan", "llama-3.1-8b", "--machine", "a100"],
            "memsight plan: argument --machine: 'a100' is not one of spark,",
        ),
        (["watch", "--headroom-warn", "lots"], "memsight watch: argument --headroom-warn: 'lots' is not a"),
        (["watch", "--hz", "abc"], "memsight watch: argument --hz: must be a number, got 'abc'"),
        (["lab", "edge", "--model", "x", "--ctx", "0x"], "memsight lab edge: argument --ctx/--context: '0x'"),
        (["lab", "two", "--model", "x", "--cap-gib", "lots"], "memsight lab two: argument --cap-gib: 'lots'"),
    ):
        done = memsight(*argv)
        assert done.returncode == 2, argv
        assert done.stderr.startswith(message), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
