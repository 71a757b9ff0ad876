"""The README's command reference matches the commands (issue 11): every flag the README writes for a memsight
command is one that command's parser knows, and the README's example config file is read as it says."""

from __future__ import annotations

import argparse
import re
import tomllib

import pytest

from tests.conftest import REPO_ROOT
from tui import cli
from tui.config import config_from_dict

README = REPO_ROOT / "README.md"
COMMON = ("watch", "run", "replay", "demo")  # "Options common to `watch`, `run`, `replay` and `demo`"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# `memsight` as a command (not `memsight:` opening one of its messages), with its subcommand if one follows
MEMSIGHT = re.compile(r"(?:^|[\s`$(])memsight(?=\s|$|`)(?:\s+(\w+))?")


def command_flags(command: str) -> set[str]:
    """Every option string of `memsight COMMAND`, and of its own subcommands (`memsight lab edge ...`)."""
    parser, _ = cli.build_parser([command])
    found: set[str] = set()

    def walk(p) -> None:
        for action in p._actions:
            found.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    walk(child)

    top = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    walk(top.choices[command])
    return found


def readme_uses() -> list[tuple[str, str, str]]:
    """(command, flag, where) for every flag the README writes after `memsight [COMMAND]`: in inline code
    spans and code-block lines (a block that starts with a memsight command keeps it for its continuation
    lines). Flags after a bare ` -- ` belong to the wrapped command (memsight run -- vllm serve ...)."""
    text = README.read_text(encoding="utf-8")
    segments: list[str] = []
    blocks = re.split(r"^```[a-z]*\n", text, flags=re.MULTILINE)
    for index, block in enumerate(blocks):
        if index % 2:  # inside a fenced code block
            command_line = None
            for line in block.splitlines():
                if MEMSIGHT.search(line):
                    command_line = line
                    segments.append(line)
                elif command_line is not None and line.startswith(" ") and FLAG.search(line):
                    segments.append(MEMSIGHT.search(command_line).group(0) + " " + line)
                else:
                    command_line = None
        else:
            segments.extend(re.findall(r"`([^`\n]+)`", block))
    uses = []
    for segment in segments:
        match = MEMSIGHT.search(segment)
        if match is None:
            continue
        command = match.group(1) if match.group(1) in cli.SUBCOMMANDS else "watch"
        own = segment[match.end() :].split(" -- ")[0]
        uses.extend((command, flag, segment.strip()) for flag in FLAG.findall(own))
    return uses


def test_the_readme_names_flags_at_all():
    uses = readme_uses()
    commands = {command for command, _, _ in uses}
    assert {"plan", "run", "replay"} <= commands, commands  # the scan reads the reference, not nothing
    assert len(uses) > 40


@pytest.mark.parametrize("command", sorted(cli.SUBCOMMANDS))
def test_every_flag_in_the_readme_exists_in_help(command):
    known = command_flags(command)
    missing = sorted(
        {(flag, where) for c, flag, where in readme_uses() if c == command and flag not in known}
    )
    assert not missing, f"README flags `memsight {command} --help` does not know: {missing}"


def test_the_options_common_to_the_screens_exist_in_each():
    text = " ".join(README.read_text(encoding="utf-8").split())
    start = text.index("Options common to `watch`, `run`, `replay` and `demo`")
    paragraph = text[start : text.index("`--vllm-url", start)]
    paragraph = re.sub(r"`memsight \w+[^`]*`", "", paragraph)  # an example of another command's option
    flags = set(FLAG.findall(paragraph))
    assert {"--hz", "--context", "--ctx", "--os-reserve-gib", "--frag"} <= flags
    for command in COMMON:
        assert flags <= command_flags(command), (command, sorted(flags - command_flags(command)))


def test_the_readme_example_config_file_reads_as_documented():
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### Config file") :]
    example = re.search(r"```toml\n(.*?)```", section, flags=re.DOTALL).group(1)
    config = config_from_dict(tomllib.loads(example), "README example")
    assert (config.plan.model, config.plan.format, config.plan.context) == ("qwen3-8b", None, 32768)
    assert config.refresh_hz == 2.0 and config.thresholds.headroom_warning_bytes == 8 * 2**30
    for line in example.splitlines():
        key = line.split("=")[0].strip().lstrip("# ")
        flag = re.search(r"# (--[a-z-]+)", line)
        if key and flag:  # each key is the name of the flag its comment gives
            assert key == flag.group(1)[2:].replace("-", "_"), line


def test_the_readme_says_what_the_command_under_memsight_run_needs():
    """Issue 21, item 12: a user ran `memsight run -- python gen.py` with a Python lacking torch and
    transformers (memsight's own has neither) and saw no model tracked. The section on `memsight run` says
    the program's own Python needs them, and what the live view does without a terminal."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Watching an experiment: `memsight run` and the agent", 1)[1].split("\n## ", 1)[0]
    flat = " ".join(section.split())
    assert "The command runs with its own Python, not memsight's" in flat
    assert "install them where the program runs (`python -m pip install torch transformers`" in flat
    assert "The live view needs a terminal" in flat
