"""The `memsight` command: a thin dispatcher.

Each subcommand lives in its own module and is imported only when chosen, so `memsight plan` never pays for
textual, psutil or pynvml (and nothing here ever imports torch). A subcommand module imports at module level
only what its options need (argparse, tui/options.py, light tables): `memsight --help` and `memsight plan
--help` pay for the help they print, not for the planner or the collectors (issue 20;
tests/tui/test_cli_imports.py).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: `--help` does not pay for it
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

# subcommand -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "watch": ("tui.cmd_watch", "live monitor of this machine, its GPUs and every memsight agent (default)"),
    "plan": ("tui.cmd_plan", "memory plan for a model: four buckets, fits / max users, per-rank rows"),
    "run": ("tui.cmd_run", "run a command with the in-process agent injected, and watch it"),
    "replay": ("tui.cmd_replay", "open a recording made with `memsight run --headless --record FILE`"),
    "demo": ("tui.cmd_watch", "the live view fed by a bundled real recording"),
    "explain": (
        "tui.cmd_explain",
        "a vLLM, SGLang, Ollama or llama.cpp startup log: each logged memory figure next to the prediction",
    ),
    "lab": ("tui.cmd_lab", "predict, then measure: the edge search and the lesson's Break It experiments"),
}


def one_line(message: str) -> str:
    """An error message as one printable line: a line break, control character or escape sequence it quotes
    from the input (a log line, a file name) is shown escaped (\\x1b), never sent to the terminal."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in message)


def one_line_error(name: str) -> Callable[[str], NoReturn]:
    """argparse's errors as one `memsight NAME: ...` line (exit 2), like every other memsight error."""

    def error(message: str) -> NoReturn:
        print(f"memsight {name}: {one_line(message)}", file=sys.stderr)
        raise SystemExit(2)

    return error


def require_terminal() -> None:
    """The live view draws with escape codes and reads keys: with stdout or stdin not a terminal (`memsight >
    out.txt`, a pipe, cron) it would write escape codes into a file. Say so instead (CollectorError: one
    `memsight: ...` line, exit 2), naming the outputs that suit a file."""
    from collectors.errors import CollectorError  # noqa: PLC0415

    for stream, name in ((sys.stdout, "stdout"), (sys.stdin, "stdin")):
        if not stream.isatty():
            raise CollectorError(
                f"the live view needs a terminal, and {name} is not one; for a file or a pipe: "
                "memsight run --headless --record FILE -- CMD, memsight run --json -- CMD, "
                "memsight replay FILE --json, memsight plan MODEL --json"
            )


def terminal_columns() -> int:
    """shutil.get_terminal_size().columns, which argparse's help formatter asks for, without importing shutil
    (with bz2, lzma and fnmatch: about a tenth of `memsight --help`'s CPU): $COLUMNS when it is a positive
    number, else the width of the terminal on stdout, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80
    except (AttributeError, ValueError, OSError):  # no stdout, closed, or not a terminal
        return 80


def wrap_words(text: str, width: int) -> list[str]:
    """`text`'s words (separated by single spaces) in lines of at most `width` characters, as
    textwrap.wrap(text, width, break_on_hyphens=False) wraps them: a word longer than a line fills the
    rest of the line it starts on and goes on in the next. Without importing textwrap, whose regular
    expressions, compiled at import, were a twentieth of `memsight plan --help`'s CPU. A no-break space is
    part of its word (textwrap breaks there)."""
    width = max(width, 1)  # (textwrap refuses less; argparse gives at least 11)
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        while word:
            if not line:
                line, word = word[:width], word[width:]
                if word:
                    lines.append(line)
                    line = ""
                continue
            room = width - len(line) - 1  # after the space before the word
            if len(word) <= room:
                line, word = f"{line} {word}", ""
                continue
            if len(word) > width and room > 0:
                line, word = f"{line} {word[:room]}", word[room:]
            lines.append(line)
            line = ""
    if line:
        lines.append(line)
    return lines


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter at the same width, found without shutil (terminal_columns), and its text
    wrapped without textwrap (wrap_words)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width=None):
        width = terminal_columns() - 2 if width is None else width
        super().__init__(prog, indent_increment, max_help_position, width)

    def _split_lines(self, text: str, width: int) -> list[str]:
        return wrap_words(self._whitespace_matcher.sub(" ", text).strip(), width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(indent + line for line in self._split_lines(text, width - len(indent)))


class ArgumentParser(argparse.ArgumentParser):
    """memsight's parsers: HelpFormatter by default, and so the subcommands' parsers too (add_subparsers
    makes them of the parser's own class)."""

    def __init__(self, *args, formatter_class=HelpFormatter, **kwargs) -> None:
        super().__init__(*args, formatter_class=formatter_class, **kwargs)


def build_parser(argv: list[str]) -> tuple[argparse.ArgumentParser, object]:
    parser = ArgumentParser(
        prog="memsight",
        description="Where the memory of an LLM inference experiment goes, live, next to the plan.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    modules = {}
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        # With a subcommand chosen, only its parser is made and its module imported: the others' parsers are
        # for `memsight --help` and an unknown command's error, which list them (with none chosen, bare ones).
        if chosen is not None and name != chosen:
            continue
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.error = one_line_error(name)  # type: ignore[method-assign]
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(p, name)
            p.usage = short_usage(p)
            modules[name] = module
    return parser, modules


def short_usage(parser: argparse.ArgumentParser) -> str:
    """`%(prog)s [options] POSITIONALS`. argparse's own usage lists every option again before the help lists
    them (47 lines for `plan`), and formatting it was a sixth of `memsight plan --help`'s CPU."""
    parts = ["%(prog)s", "[options]"]
    for action in parser._actions:  # (argparse's list of them: it has no public one)
        if action.option_strings:
            continue
        name = action.metavar or action.dest
        if action.nargs == argparse.OPTIONAL:
            name = f"[{name}]"
        elif action.nargs == argparse.ZERO_OR_MORE:
            name = f"[{name} ...]"
        elif action.nargs == argparse.ONE_OR_MORE:
            name = f"{name} [{name} ...]"
        elif action.nargs == argparse.PARSER:
            name = f"{name} ..."
        parts.append(name)
    return " ".join(parts)


def untranslated_argparse() -> None:
    """argparse's own words ("usage: ", "options", "show this help message and exit") as written, like the
    rest of memsight's help: argparse asks gettext for a translation of each, every time (gettext keeps no
    record of a catalogue it did not find, and looks on disk again, importing locale on the first call); a
    twentieth of `memsight plan --help`'s CPU. Python ships no catalogue for them. The command line's own
    process only: main() calls it, not the import."""
    argparse._ = str  # (argparse reads its module's _ at each call; str of a str is that str)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    untranslated_argparse()
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["watch", *argv]
    parser, modules = build_parser(argv)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    module = modules[args.command]
    # imported after parsing: `--help` and a usage error end before this (both modules are small)
    from collectors.errors import CollectorError  # noqa: PLC0415
    from planner.errors import PlannerError  # noqa: PLC0415

    try:
        status = int(module.main(args, args.command) or 0)
        sys.stdout.flush()  # a reader gone (`| head`) shows here, inside the try, not at interpreter exit
        return status
    except BrokenPipeError:
        return quiet_broken_pipe()
    except KeyboardInterrupt:
        return 130
    except (PlannerError, CollectorError) as exc:  # a message the user can act on, not a traceback
        print(f"memsight: {one_line(str(exc))}", file=sys.stderr)
        return 2


def quiet_broken_pipe() -> int:
    """The reader of our stdout went away (`memsight replay FILE --json | head`): stop quietly, as `cat` does.
    stdout is pointed at /dev/null so the interpreter's own flush at exit cannot raise again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141  # 128 + SIGPIPE, what a shell reports for a command ended by a closed pipe


if __name__ == "__main__":
    sys.exit(main())
