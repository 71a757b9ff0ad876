"""The optional config file and the shared command-line options (refresh rate, thresholds, plan inputs)."""

from __future__ import annotations

import argparse

import pytest

from collectors.alerts import AlertOptions
from tui import cli, cmd_watch
from tui.config import ConfigError, config_from_dict, default_path, load_config

GIB = 2**30


def test_no_file_gives_the_defaults(tmp_path):
    config = load_config(tmp_path / "absent.toml")
    assert config.refresh_hz == 2.0
    assert config.thresholds == AlertOptions()
    assert config.plan.model == "llama-3.1-8b" and config.plan.users == 8 and config.plan.context == 8192


def test_explicit_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "absent.toml", required=True)


def test_file_values_in_their_units(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(
        "refresh_hz = 10\n"
        "[thresholds]\nheadroom_warn_gib = 4\ngrowth_gib = 0.5\nfragmentation_fraction = 0.25\n"
        "[plan]\nmodel = 'qwen3-8b'\nformat = 'default'\ncontext = 32768\nunified_os_reserve_gib = 12\n"
    )
    config = load_config(path)
    assert config.refresh_hz == 10.0
    assert config.thresholds.headroom_warning_bytes == 4 * GIB
    assert config.thresholds.growth_bytes == GIB // 2
    assert config.thresholds.fragmentation_fraction == 0.25
    assert config.thresholds.headroom_critical_bytes == AlertOptions().headroom_critical_bytes
    assert (config.plan.model, config.plan.format, config.plan.context) == ("qwen3-8b", None, 32768)
    assert config.plan.unified_os_reserve_bytes == 12 * GIB


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"refresh": 2}, "unknown key 'refresh'"),
        ({"thresholds": {"headroom_gib": 1}}, "thresholds.headroom_gib"),
        ({"thresholds": {"growth_gib": "two"}}, "thresholds.growth_gib: 'two' is not a size"),
        ({"plan": {"users": 0}}, "plan.users must be at least 1"),
        ({"plan": {"context": "8q"}}, "plan.context: '8q' is not a whole number"),
        ({"refresh_hz": 0}, "refresh_hz must be greater than 0"),
    ],
)
def test_bad_config_names_the_key(raw, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict(raw, "test.toml")


def test_bad_toml_is_a_config_error(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("refresh_hz = = 2\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(path)


def test_default_path_follows_the_environment(tmp_path):
    assert default_path({"MEMSIGHT_CONFIG": "/x/y.toml"}).as_posix() == "/x/y.toml"
    assert default_path({"XDG_CONFIG_HOME": "/cfg"}).as_posix() == "/cfg/memsight/config.toml"


def parse(argv: list[str], name: str = "watch") -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cmd_watch.add_arguments(parser, name)
    return parser.parse_args(argv)


def test_options_override_the_file(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("refresh_hz = 5\n[thresholds]\nheadroom_warn_gib = 4\n[plan]\nusers = 2\n")
    args = parse(["--config", str(path), "--hz", "10", "--growth", "3", "--users", "16", "--format", "fp8"])
    config = cmd_watch.resolve_config(args)
    assert config.refresh_hz == 10.0
    assert config.thresholds.headroom_warning_bytes == 4 * GIB  # from the file
    assert config.thresholds.growth_bytes == 3 * GIB  # from the option
    options = cmd_watch.display_options(config)
    assert options["refresh_hz"] == 10.0
    assert options["plan_inputs"].users == 16 and options["plan_inputs"].format == "fp8"
    assert options["thresholds"] is config.thresholds


def test_bad_option_exits_2_with_a_message(tmp_path, capsys):
    args = parse(["--config", str(tmp_path / "absent.toml")])
    assert cmd_watch.main(args, "watch") == 2
    assert "memsight: config file" in capsys.readouterr().err
    for argv, message in (
        (["--hz", "0"], "must be greater than 0"),  # the option named once
        (["--users", "0"], "must be at least 1"),
    ):
        with pytest.raises(SystemExit) as exited:
            cli.main(["watch", *argv])
        assert exited.value.code == 2
        assert capsys.readouterr().err.startswith(f"memsight watch: argument {argv[0]}: {message}")


def test_watch_keeps_every_process_for_the_processes_screen():
    monitor, options = cmd_watch.app_arguments(parse([]), "watch")
    assert monitor.os_collector.top_n == cmd_watch.ALL_PROCESSES
    assert options["source_label"] == "this machine (live)"
    monitor, _ = cmd_watch.app_arguments(parse(["--processes", "20"]), "watch")
    assert monitor.os_collector.top_n == 20
    with pytest.raises(ConfigError, match="--processes must be at least 1"):
        cmd_watch.app_arguments(parse(["--processes", "0"]), "watch")


def test_the_file_takes_the_options_names_at_the_top_level(tmp_path):
    """Issue 11 item 9: the first guess (the flags' names, no section) works, with values written as on the
    command line (one parser: tui/options.py)."""
    path = tmp_path / "config.toml"
    path.write_text(
        'model = "qwen3-8b"\nformat = "fp8"\nkv-dtype = "fp8"\nctx = "32k"\nusers = "1,024"\nhz = 4\n'
        'headroom_warn = "1.5GiB"\nfrag = "512MiB"\n'
    )
    config = load_config(path)
    assert (config.plan.model, config.plan.format, config.plan.kv_dtype) == ("qwen3-8b", "fp8", "fp8")
    assert (config.plan.context, config.plan.users, config.refresh_hz) == (32768, 1024, 4.0)
    assert config.thresholds.headroom_warning_bytes == 3 * GIB // 2
    assert config.thresholds.fragmentation_min_bytes == 512 * 2**20
    args = parse(["--config", str(path), "--context", "4k"])
    resolved = cmd_watch.resolve_config(args)
    assert resolved.plan.context == 4096 and resolved.plan.model == "qwen3-8b"  # the option wins


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('modle = "x"\n', r"unknown key 'modle' \(known: context, format, .*model.*\); did you mean model\?"),
        ("[plan]\nheadroom_warn = 3\n", r"unknown key 'plan.headroom_warn' .*did you mean thresholds"),
        ("context = 4096\n[plan]\ncontext = 8192\n", "plan.context repeats context"),
        ('model = ""\n', "model must be a non-empty string"),
        ("users = inf\n", "users"),
    ],
)
def test_config_errors_name_the_known_keys(tmp_path, text, message):
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(path)
