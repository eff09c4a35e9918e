"""Configuration: command line > TRAINLOG_* environment > YAML file > defaults.

The only module that reads the environment.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

ENV_PREFIX = "TRAINLOG_"
DEFAULT_PORT = 10042
_LISTEN_ADDRESS = re.compile(r"^(?P<host>\[[0-9a-fA-F:.]+\]|[^:\[\]]*):(?P<port>\d{1,5})$")


class ConfigError(Exception):
    """A configuration problem, worded for the user (the CLI exits 2 with it)."""


def default_node() -> str:
    """Kubernetes downward API's NODE_NAME, else the host name."""
    return os.environ.get("NODE_NAME") or socket.gethostname()


class Settings(BaseSettings):
    """Every option of ``trainlog-exporter serve``."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", validate_default=True)

    log_dir: Annotated[list[Path], NoDecode] = Field(default_factory=list, description="Directories holding the logs.")
    web_listen_address: str = Field(f":{DEFAULT_PORT}", description="HOST:PORT to serve /metrics on.")
    run: str | None = Field(None, description="Value of the run label; default: the log directory's parent name.")
    node: str = Field(default_factory=default_node, description="Value of the node label.")
    config: Path | None = Field(None, description="YAML configuration file.")
    state_file: Path | None = Field(
        None, description="Checkpoint file for offsets and counters; default in $XDG_STATE_HOME/trainlog-exporter.")
    checkpoint_interval: float = Field(5.0, gt=0, description="Seconds between checkpoints (and one at shutdown).")
    idle_flush_seconds: float | None = Field(
        None, gt=0, description="Hand out a line left without its newline for this long (default: wait for it).")
    poll_interval: float | None = Field(None, gt=0, description="Poll files every N seconds instead of inotify.")
    rescan_interval: float = Field(2.0, gt=0, description="Seconds between safety rescans of the log directories.")
    max_line_bytes: int = Field(1 << 20, ge=1024, description="Longer lines are truncated to this many bytes.")
    log_level: str = Field("info", pattern=r"(?i)^(debug|info|warning|error)$", description="Log verbosity.")

    @field_validator("log_dir", mode="before")
    @classmethod
    def _split_dirs(cls, value: Any) -> Any:
        # TRAINLOG_LOG_DIR=/a,/b (or os.pathsep-separated), and a single string in YAML.
        if isinstance(value, str):
            return [part for part in re.split(rf"[,{re.escape(os.pathsep)}]", value) if part.strip()]
        return value

    @field_validator("web_listen_address")
    @classmethod
    def _check_listen_address(cls, value: str) -> str:
        match = _LISTEN_ADDRESS.match(value)
        if match is None or not 0 <= int(match.group("port")) <= 65535:
            raise ValueError(f"expected HOST:PORT such as ':{DEFAULT_PORT}' or '127.0.0.1:{DEFAULT_PORT}', got {value!r}")
        return value

    @field_validator("state_file")
    @classmethod
    def _check_state_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        # A log directory belongs to the trainer, is often shared by every node's exporter,
        # and gets cleaned up or rotated: no place for this exporter's checkpoint.
        directory = _containing_log_dir(value, info.data.get("log_dir", [])) if value else None
        if directory is not None:
            raise ValueError(f"{value} is inside the log directory {directory}: put the state file elsewhere")
        return value

    def checkpoint_file(self) -> Path | None:
        """--state-file, else a file named after the log directories in the state directory.

        One file per set of log directories, so two exporters on one host never share one.
        None when that default would fall inside a log directory.
        """
        if self.state_file is not None:
            return self.state_file
        directories = "\n".join(sorted(str(directory.resolve()) for directory in self.log_dir))
        digest = hashlib.sha256(directories.encode()).hexdigest()[:12]
        state_home = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
        default = state_home / "trainlog-exporter" / f"state-{digest}.json"
        return None if _containing_log_dir(default, self.log_dir) else default

    @property
    def listen_host_port(self) -> tuple[str, int]:
        match = _LISTEN_ADDRESS.match(self.web_listen_address)
        return match.group("host").strip("[]"), int(match.group("port"))

    def run_for_directory(self, directory: str) -> str:
        """The run label of a log directory: --run, else the directory's parent name."""
        if self.run:
            return self.run
        return Path(directory).resolve().parent.name or "default"

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings):
        config_file = init_settings.init_kwargs.get("config") or os.environ.get(f"{ENV_PREFIX}CONFIG")
        return init_settings, env_settings, _YamlFileSource(settings_cls, config_file)


def _containing_log_dir(path: Path, log_dirs: list[Path]) -> Path | None:
    resolved = path.resolve()
    return next((directory for directory in log_dirs if resolved.is_relative_to(directory.resolve())), None)


class _YamlFileSource(PydanticBaseSettingsSource):
    """The --config file; keys may be spelled as on the command line (web.listen-address)."""

    def __init__(self, settings_cls: type[BaseSettings], path: str | os.PathLike | None) -> None:
        super().__init__(settings_cls)
        self._values = _read_yaml(Path(path)) if path else {}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._values)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"config file {path}: {error.strerror}") from error
    except yaml.YAMLError as error:
        raise ConfigError(f"config file {path}: not valid YAML: {error}") from error
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file {path}: expected a mapping of option names to values")
    return {str(key).replace(".", "_").replace("-", "_"): value for key, value in loaded.items()}


def load_settings(**command_line: Any) -> Settings:
    """Settings from all sources; raises ConfigError naming the offending field."""
    try:
        return Settings(**command_line)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "configuration"
        if first["type"] == "extra_forbidden":
            raise ConfigError(f"unknown option {field!r}") from None
        raise ConfigError(f"invalid value for {field!r}: {first['msg']}") from None
