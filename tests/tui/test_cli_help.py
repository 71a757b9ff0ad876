"""The help memsight prints (issue 20: `plan --help` under 0.05 s of CPU): a usage line of the positionals
after `[options]` (argparse's own listed every option, 47 lines for `plan`, before the help listed them
again), the help's text wrapped by wrap_words as textwrap wraps it, and only the chosen subcommand's parser
built. bench/cli_cost.py measures the CPU; these hold what it prints."""

from __future__ import annotations

import argparse
import random
import textwrap

import pytest

from tui import cli


def subcommand_parser(name: str) -> argparse.ArgumentParser:
    parser, _ = cli.build_parser([name])
    return parser._subparsers._group_actions[0].choices[name]


def every_parser() -> list[argparse.ArgumentParser]:
    """The top-level parser, each subcommand's and each of their own subcommands' (lab's experiments)."""
    found = [cli.build_parser([])[0]]
    for name in cli.SUBCOMMANDS:
        found.append(subcommand_parser(name))
        for action in found[-1]._actions:
            if isinstance(action, argparse._SubParsersAction):
                found.extend(action.choices.values())
    return found


def help_texts() -> list[str]:
    """Every help and description memsight's parsers print, whitespace collapsed as argparse collapses it."""
    texts = []
    for parser in every_parser():
        texts += [parser.description or ""] + [action.help or "" for action in parser._actions]
    return sorted({" ".join(text.split()) for text in texts if text.strip()})


def test_help_texts_are_found():
    texts = help_texts()
    assert len(texts) > 150 and any("catalog name, config.json" in text for text in texts)


def textwrap_lines(text: str, width: int) -> list[str]:
    """textwrap.wrap(text, width, break_on_hyphens=False), less a space it leaves at the end of a line
    before a word longer than a line that starts on the next (its _handle_long_word drops the empty head it
    cut, not the space: "the pool given directly " at 24)."""
    return [line.rstrip(" ") for line in textwrap.wrap(text, width, break_on_hyphens=False)]


@pytest.mark.parametrize("width", [11, 13, 20, 24, 37, 54, 78, 100])
def test_wrap_words_wraps_every_help_text_as_textwrap_does(width):
    for text in help_texts():
        assert cli.wrap_words(text, width) == textwrap_lines(text, width), text


def test_wrap_words_cuts_words_longer_than_a_line_as_textwrap_does():
    rng = random.Random(20)
    for _ in range(3000):
        words = ["x" * rng.choice((1, 2, 3, 5, 8, 13, 21, 34)) + str(i) for i in range(rng.randint(1, 12))]
        text, width = " ".join(words), rng.randint(1, 40)
        assert cli.wrap_words(text, width) == textwrap_lines(text, width), (text, width)


def test_wrap_words_keeps_a_no_break_space_and_never_hangs():
    assert cli.wrap_words("64\u00a0GiB of weights", 8) == ["64\u00a0GiB", "of", "weights"]
    assert cli.wrap_words("abc", 0) == ["a", "b", "c"]  # (argparse gives at least 11: no endless loop)


@pytest.mark.parametrize(
    ("name", "usage"),
    [
        ("watch", "usage: memsight watch [options]"),
        ("plan", "usage: memsight plan [options] [MODEL]"),
        ("run", "usage: memsight run [options] -- CMD ..."),
        ("replay", "usage: memsight replay [options] file"),
        ("demo", "usage: memsight demo [options]"),
        ("explain", "usage: memsight explain [options] LOG"),
        ("lab", "usage: memsight lab [options] EXPERIMENT ..."),
    ],
)
def test_usage_is_one_line_and_every_option_is_in_the_help(name, usage, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    parser = subcommand_parser(name)
    assert parser.format_usage() == usage + "\n"
    shown = parser.format_help()
    for action in parser._actions:
        for option in action.option_strings:
            assert f"  {option}" in shown or f", {option}" in shown, option


def test_only_the_chosen_subcommands_parser_is_built():
    chosen, modules = cli.build_parser(["plan", "--help"])
    assert set(chosen._subparsers._group_actions[0].choices) == {"plan"} and set(modules) == {"plan"}
    listing, modules = cli.build_parser(["--help"])
    assert list(listing._subparsers._group_actions[0].choices) == list(cli.SUBCOMMANDS) and not modules


def test_an_unknown_command_lists_them_all(capsys):
    parser, _ = cli.build_parser(["bogus"])
    with pytest.raises(SystemExit):
        parser.parse_args(["bogus"])
    err = capsys.readouterr().err
    assert "invalid choice: 'bogus'" in err and all(repr(name) in err for name in cli.SUBCOMMANDS)
