"""Per log directory: which files are followed (include, exclude) and whether symbolic links out
of it are, from the config file, through a real exporter process; every directory skipped is said."""

from __future__ import annotations

import pytest

from exporter.follow.discover import DirectoryRules
from exporter.settings import ConfigError, load_settings
from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually


def steps(count: int) -> str:
    return "".join(f"step={step} loss=2.5\n" for step in range(1, count + 1))


@pytest.mark.parametrize(
    ("path", "followed"),
    [
        ("worker_0.log", True),
        ("debug-worker_0.log", False),  # excluded by name
        ("old/worker_1.log", False),  # under an excluded directory
        ("runs/old/worker_1.log", False),  # the directory's name matches, however deep
        ("runs/new/worker_1.log", True),
        ("worker_0.log.1", False),  # rotated: never a new file
        ("notes.md", False),  # not included
        ("metrics/train.csv", True),  # included by its relative path
    ],
)
def test_directory_rules(path, followed):
    rules = DirectoryRules(include=("*.log", "metrics/*.csv"), exclude=("debug-*", "old/"))
    assert rules.follows(path) is followed


def test_log_dirs_in_the_config_file_take_rules_and_bare_paths(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(f"log_dirs:\n  - {tmp_path / 'a'}\n"
                      f"  - {{path: {tmp_path / 'b'}, include: ['*.txt'], exclude: [old], "
                      f"follow_symlinks_outside: true}}\n")
    first, second = load_settings(config=str(config)).log_dir
    assert (first.path, first.include, first.exclude, first.follow_symlinks_outside) == (tmp_path / "a", None, [], None)
    assert (second.include, second.exclude, second.follow_symlinks_outside) == (["*.txt"], ["old"], True)
    # --log-dir DIR on the command line still gives a directory with the defaults, and wins over the file.
    (only,) = load_settings(config=str(config), log_dir=[str(tmp_path / "c")]).log_dir
    assert (str(only), only.include) == (str(tmp_path / "c"), None)
    config.write_text(f"log_dirs: [{{path: {tmp_path}, includes: ['*.log']}}]\n")
    with pytest.raises(ConfigError, match="unknown option 'log_dir.0.includes'"):
        load_settings(config=str(config))


def test_each_directory_follows_its_own_patterns_and_symlink_policy_and_says_what_it_skips(tmp_path):
    strict, lenient = tmp_path / "strict" / "logs", tmp_path / "lenient" / "logs"
    for directory in (strict / "old", strict / "new", lenient):
        directory.mkdir(parents=True)
    (strict / "worker_0.log").write_text(steps(10))
    (strict / "debug-worker_1.log").write_text(steps(3))
    (strict / "old" / "worker_2.log").write_text(steps(3))
    (strict / "new" / "worker_3.log").write_text(steps(10))
    (strict / "linked").symlink_to(strict / "new")  # a linked directory: not walked, said
    outside = tmp_path / "elsewhere.log"
    outside.write_text(steps(10))
    (strict / "worker_4.log").symlink_to(outside)
    (lenient / "worker_5.log").symlink_to(outside)
    config = tmp_path / "config.yaml"
    config.write_text(f"log_dirs:\n  - {{path: {strict}, exclude: ['debug-*', old]}}\n"
                      f"  - {{path: {lenient}, follow_symlinks_outside: true}}\n")
    with ExporterProcess("--config", str(config), "--node", "n", "--state-file", str(tmp_path / "state.json"),
                         wait_for="/-/ready") as exporter:
        eventually(lambda: exporter.total("training_steps_total", rank="5") >= 10, 15,
                   what=lambda: exporter.output()[-3000:])
        assert exporter.total("training_steps_total", run="strict", rank="0") == 10
        assert exporter.total("training_steps_total", run="strict", rank="3") == 10
        assert exporter.total("trainlog_files_followed") == 3  # worker_0, new/worker_3, lenient's worker_5
        output = exporter.output()
        assert f"not following the logs under {strict / 'old'}: excluded by the pattern 'old'" in output
        assert f"not following the logs under {strict / 'linked'}: a symbolic link to a directory" in output
        assert f"not following {strict / 'worker_4.log'}: a symbolic link out of the log directory" in output
        assert "debug-worker_1.log" not in output  # a file left out by a pattern is not news
