from __future__ import annotations

import dataclasses
import socket

import pytest

from exporter.cli import main
from exporter.follow import run_label
from exporter.settings import ConfigError, load_settings
from exporter.state import DetectorConfig


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in ("TRAINLOG_LOG_DIR", "TRAINLOG_RUN", "TRAINLOG_NODE", "TRAINLOG_CONFIG", "TRAINLOG_WEB_LISTEN_ADDRESS",
                 "NODE_NAME"):
        monkeypatch.delenv(name, raising=False)


def test_command_line_beats_environment_beats_file(tmp_path, monkeypatch):
    config = tmp_path / "config.yaml"
    config.write_text("run: from-file\nnode: file-node\nweb.listen-address: ':9001'\nlog-dir: /file/logs\n")
    monkeypatch.setenv("TRAINLOG_RUN", "from-env")
    monkeypatch.setenv("TRAINLOG_WEB_LISTEN_ADDRESS", ":9002")
    settings = load_settings(config=str(config), web_listen_address="127.0.0.1:9003")
    assert settings.web_listen_address == "127.0.0.1:9003"  # command line
    assert settings.run == "from-env"  # environment over file
    assert settings.node == "file-node"  # file over default
    assert [str(path) for path in settings.log_dir] == ["/file/logs"]
    assert settings.listen_host_port == ("127.0.0.1", 9003)


def test_config_file_can_come_from_the_environment(tmp_path, monkeypatch):
    config = tmp_path / "config.yaml"
    config.write_text("run: from-file\n")
    monkeypatch.setenv("TRAINLOG_CONFIG", str(config))
    assert load_settings().run == "from-file"


def test_defaults(monkeypatch):
    settings = load_settings()
    assert settings.web_listen_address == ":10042"
    assert settings.node == socket.gethostname()
    monkeypatch.setenv("NODE_NAME", "k8s-node-7")
    assert load_settings().node == "k8s-node-7"
    monkeypatch.setenv("TRAINLOG_NODE", "explicit")
    assert load_settings().node == "explicit"


def test_log_dirs_from_environment_list(monkeypatch):
    monkeypatch.setenv("TRAINLOG_LOG_DIR", "/a/msrun_log,/b/msrun_log")
    assert [str(path) for path in load_settings().log_dir] == ["/a/msrun_log", "/b/msrun_log"]


def test_run_defaults_to_the_log_directory_parent_name():
    assert run_label("/jobs/llama-70b/output/msrun_log") == "output"
    assert run_label("/jobs/llama-70b/output/msrun_log", run=load_settings(run="pretrain").run) == "pretrain"
    assert run_label("/") == "default"


@pytest.mark.parametrize(
    ("argv", "env", "field"),
    [
        (["--log-dir", "/tmp", "--web.listen-address", "nonsense"], {}, "web_listen_address"),
        (["--log-dir", "/tmp"], {"TRAINLOG_MAX_LINE_BYTES": "lots"}, "max_line_bytes"),
        (["--log-dir", "/tmp", "--log-level", "chatty"], {}, "log_level"),
        (["--log-dir", "/tmp", "--poll-interval", "-1"], {}, "poll_interval"),
        (["--log-dir", "/etc/hostname"], {}, "log_dir"),
    ],
)
def test_bad_values_exit_2_naming_the_field(argv, env, field, monkeypatch, capsys):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert field in error
    assert error.count("\n") == 1  # one clear line


@pytest.mark.parametrize(
    ("content", "message"),
    [("run: [unclosed\n", "not valid YAML"), ("- a\n- b\n", "expected a mapping"),
     ("colour: blue\n", "unknown option 'colour'")],
)
def test_bad_config_files_exit_2(tmp_path, content, message, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text(content)
    assert main(["--log-dir", "/tmp", "--config", str(config)]) == 2
    assert message in capsys.readouterr().err


def test_an_empty_config_file_is_all_defaults_and_a_directory_is_no_config_file(tmp_path, capsys):
    config = tmp_path / "empty.yaml"
    config.write_text("# nothing set yet\n")
    assert load_settings(config=str(config)).web_listen_address == ":10042"
    assert main(["--log-dir", "/tmp", "--config", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert f"config file {tmp_path}: Is a directory" in error and error.count("\n") == 1


def test_missing_config_file_and_missing_log_dir(tmp_path, capsys):
    assert main(["--log-dir", "/tmp", "--config", str(tmp_path / "absent.yaml")]) == 2
    assert "absent.yaml" in capsys.readouterr().err
    assert main([]) == 2
    assert "--log-dir" in capsys.readouterr().err


def test_unknown_command_line_option_exits_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--log-dir", "/tmp", "--no-such-flag"])
    assert exit_info.value.code == 2


def test_config_error_is_an_exception_type():
    with pytest.raises(ConfigError):
        load_settings(web_listen_address="1.2.3.4")


def test_formats_and_custom_formats_from_the_config_file(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        "rank-offset: 8\n"
        "custom-formats:\n"
        "  - name: my_loop\n"
        "    pattern: 'it (?P<step>\\d+) loss=(?P<loss>\\S+)'\n"
        "    contains: 'loss='\n"
        "formats:\n"
        "  - {path_pattern: 'attempt_*/*/stdout.log', format: my_loop}\n"
        "  - {path_pattern: '*.txt', format: megatron}\n")
    settings = load_settings(config=str(config))
    assert settings.rank_offset == 8
    assert [(custom.name, custom.contains) for custom in settings.custom_formats] == [("my_loop", "loss=")]
    assert [(override.path_pattern, override.format) for override in settings.formats] == [
        ("attempt_*/*/stdout.log", "my_loop"), ("*.txt", "megatron")]


def test_formats_from_the_environment_as_json(monkeypatch):
    monkeypatch.setenv("TRAINLOG_FORMATS", '[{"path_pattern": "*.log", "format": "hf_trainer"}]')
    monkeypatch.setenv("TRAINLOG_RANK_OFFSET", "16")
    settings = load_settings()
    assert settings.formats[0].format == "hf_trainer"
    assert settings.rank_offset == 16


@pytest.mark.parametrize(
    ("content", "field", "reason"),
    [
        ("custom_formats: [{name: x, pattern: 'loss=(?P<loss'}]\n", "custom_formats.0.pattern",
         "not a valid regular expression"),
        ("custom_formats: [{name: x, pattern: 'loss=(\\S+)'}]\n", "custom_formats.0.pattern", "needs a named group"),
        ("custom_formats: [{name: megatron, pattern: '(?P<loss>\\S+)'}]\n", "custom_formats", "unique"),
        ("custom_formats: [{name: x, pattern: '(?P<loss>\\S+)', contains: \"a\\nb\"}]\n", "custom_formats.0.contains",
         "no line break"),
        ("formats: [{path_pattern: '*.log', format: nope}]\n", "formats", "unknown format 'nope'"),
        ("formats: [{path_pattern: '*.log', fmt: megatron}]\n", "formats.0", ""),
        ("rank_offset: -1\n", "rank_offset", ""),
    ],
)
def test_bad_format_config_exits_2_naming_the_field(tmp_path, capsys, content, field, reason):
    config = tmp_path / "bad.yaml"
    config.write_text(content)
    assert main(["--log-dir", "/tmp", "--config", str(config)]) == 2
    error = capsys.readouterr().err
    assert f"'{field}" in error
    assert reason in error
    assert error.count("\n") == 1


@pytest.mark.parametrize("threshold", dataclasses.fields(DetectorConfig), ids=lambda threshold: threshold.name)
def test_every_detector_threshold_is_an_option_of_each_kind(threshold, tmp_path, monkeypatch, capsys):
    default = getattr(DetectorConfig(), threshold.name)
    assert getattr(load_settings().detector_config, threshold.name) == default
    value = default + 1 if isinstance(default, int) else default / 2  # in bounds: counts >= 1, factors in (0, 1]
    config = tmp_path / "config.yaml"
    config.write_text(f"{threshold.name.replace('_', '-')}: {value}\n")
    assert getattr(load_settings(config=str(config)).detector_config, threshold.name) == value
    monkeypatch.setenv(f"TRAINLOG_{threshold.name.upper()}", str(value))
    assert getattr(load_settings().detector_config, threshold.name) == value
    flag = "--" + threshold.name.replace("_", "-")
    assert main(["--log-dir", str(tmp_path), flag, "-1"]) == 2  # below every bound
    error = capsys.readouterr().err
    assert f"'{threshold.name}'" in error and flag in error and f"TRAINLOG_{threshold.name.upper()}" in error
    assert error.count("\n") == 1


def test_detector_flags_carry_the_comment_and_default_of_their_threshold(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--spike-warmup-steps N Steps observed before a spike can be declared: the baseline must settle first. " \
           "(default 20)" in help_text
    assert "+-5 % noise is not. (default 0.5)" in help_text
