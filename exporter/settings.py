"""Configuration: command line > TRAINLOG_* environment > YAML file > defaults.

The only module that reads the environment.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import socket
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NamedTuple
from urllib.parse import unquote, urlsplit

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticUseDefault
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict, YamlConfigSettingsSource

from exporter.export.status_page import DEFAULT_RUNBOOK_URL
from exporter.parse.custom_regex import compile_pattern
from exporter.parse.formats import BUILTIN_NAMES
from exporter.state.detectors import DetectorConfig

ENV_PREFIX = "TRAINLOG_"
DEFAULT_PORT = 10042
# Variables of other standards (OpenTelemetry, the Kubernetes downward API, XDG), read under their own names.
_STANDARD_VARIABLES = (
    "otlp_endpoint", "otel_exporter_otlp_metrics_endpoint", "otel_exporter_otlp_endpoint", "otel_exporter_otlp_headers",
    "otel_exporter_otlp_protocol",
    "otel_exporter_otlp_timeout", "otel_metric_export_interval", "otel_service_name", "otel_resource_attributes",
    "pod_name", "pod_namespace", "node_name", "xdg_state_home",
)
_LISTEN_ADDRESS = re.compile(r"^(?P<host>\[[0-9a-fA-F:.]+\]|[^:\[\]]*):(?P<port>\d{1,5})$")


class ConfigError(Exception):
    """A configuration problem, worded for the user (the CLI exits 2 with it)."""


class CustomFormat(BaseModel):
    """A user-defined line format: a regular expression with named groups (docs/formats.md)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z_][\w.-]*$", description="Name to use in formats[].format.")
    pattern: str = Field(description="Regular expression; named groups step, loss, lr, ... become fields.")
    contains: str = Field("", description="Literal text every matching line contains: checked before the regex.")

    @field_validator("pattern")
    @classmethod
    def _check_pattern(cls, value: str) -> str:
        compile_pattern(value)  # raises ValueError with a message for the user
        return value

    @field_validator("contains")
    @classmethod
    def _check_contains(cls, value: str) -> str:
        if "\n" in value or "\r" in value:  # the scan looks for it within a line (or a progress bar's segment)
            raise ValueError("a line holds no line break: contains must not either")
        return value


class LogDirectory(BaseModel):
    """A log directory and which of its files are followed (docs/configuration.md): ``--log-dir DIR``
    gives one with the defaults; the config file can give each its own patterns and symlink policy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path = Field(description="The directory holding the logs.")
    include: list[str] | None = Field(
        None, min_length=1, description="Patterns of the files to follow (name or relative path); "
                                        "default *.log, *.out, *.jsonl, *.txt, metrics.csv.")
    exclude: list[str] = Field(
        default_factory=list, description="Patterns of files and subdirectories not to follow (name or relative path).")
    follow_symlinks_outside: bool | None = Field(
        None, description="Follow symbolic links out of this directory; default: --follow-symlinks-outside.")

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def __str__(self) -> str:
        return str(self.path)


class FormatOverride(BaseModel):
    """Files whose path matches get this format instead of auto-detection."""

    model_config = ConfigDict(extra="forbid")

    path_pattern: str = Field(min_length=1, description="Glob on the path relative to the log directory.")
    format: str = Field(description="A built-in format name or a custom_formats name.")


DETECTOR_OPTIONS = tuple(threshold.name for threshold in dataclasses.fields(DetectorConfig))


def _detector_options() -> type[BaseSettings]:
    """A settings base with one option per DetectorConfig field: its name, type, default and
    comment, so a threshold added there is an option (flag, TRAINLOG_* variable, config key)."""
    comments = _field_comments(DetectorConfig)
    hints = typing.get_type_hints(DetectorConfig)
    defaults = DetectorConfig()
    fields: dict[str, Any] = {}
    for name in DETECTOR_OPTIONS:
        bounds = _threshold_bounds(name, hints[name])
        fields[name] = (hints[name], Field(getattr(defaults, name), description=comments.get(name, ""),
                                           ge=bounds.ge, gt=bounds.gt, le=bounds.le))
    return create_model("DetectorOptions", __base__=BaseSettings, __module__=__name__, **fields)


class _Bounds(NamedTuple):
    ge: float | None = None
    gt: float | None = None
    le: float | None = None


def _threshold_bounds(name: str, kind: type) -> _Bounds:
    # Counts of steps need at least one; smoothing factors lie in (0, 1]; margins and
    # deviations are non-negative (0: that condition alone never holds a spike back).
    if kind is int:
        return _Bounds(ge=1)
    if name.endswith("_alpha"):
        return _Bounds(gt=0, le=1)
    return _Bounds(ge=0)


def _field_comments(cls: type) -> dict[str, str]:
    """Each field's comment in the source of the class or of the base that declares it (each detector's
    thresholds are a base of DetectorConfig): the block of ``#`` lines above it, shared by the fields that
    follow the block. Empty when the source is not at hand."""
    comments: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if dataclasses.is_dataclass(base):
            comments.update(_declared_comments(base))
    return comments


def _declared_comments(cls: type) -> dict[str, str]:
    try:
        lines, _ = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return {}
    comments: dict[str, str] = {}
    block: list[str] = []
    in_block = False
    for line in map(str.strip, lines):
        if line.startswith("#"):
            block = block if in_block else []
            block.append(line.lstrip("#").strip())
            in_block = True
        elif match := re.match(r"(\w+)\s*:", line):
            comments[match.group(1)] = " ".join(block)
            in_block = False
    return comments


if TYPE_CHECKING:
    DetectorOptions = BaseSettings
else:
    DetectorOptions = _detector_options()


class Settings(DetectorOptions):
    """Every option of ``trainlog-exporter serve``."""

    # populate_by_name: the OTEL_* fields below are read from the environment under their
    # standard names (validation aliases) and from the command line and YAML by field name.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", validate_default=True, populate_by_name=True
    )

    log_dir: Annotated[list[LogDirectory], NoDecode] = Field(
        default_factory=list, description="Directories holding the logs (in the config file also "
                                          "{path, include, exclude, follow_symlinks_outside} each).")
    log_file: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Single log files to follow; - for standard input.")
    web_listen_address: str = Field(f":{DEFAULT_PORT}", description="HOST:PORT to serve /metrics on.")
    web_telemetry_path: str = Field("/metrics", pattern=r"^/[^?#\s]*$",
                                    description="Path of the metrics; /, /-/healthy and /-/ready stay where they are.")
    web_config_file: Path | None = Field(
        None, description="exporter-toolkit web configuration: TLS and basic auth (docs/security.md).")
    run: str | None = Field(None, description="Value of the run label; default: the log directory's parent name.")
    node: str | None = Field(None, description="Value of the node label; default: NODE_NAME, then the host name.")
    config: Path | None = Field(None, description="YAML configuration file.")
    state_file: Path | None = Field(
        None, description="Checkpoint file for offsets and counters; default in $XDG_STATE_HOME/trainlog-exporter.")
    checkpoint_interval: float = Field(5.0, gt=0, description="Seconds between checkpoints (and one at shutdown).")
    idle_flush_seconds: float | None = Field(
        None, gt=0, description="Hand out a line left without its newline for this long (default: wait for it).")
    poll_interval: float | None = Field(None, gt=0, description="Poll files every N seconds instead of inotify.")
    rescan_interval: float = Field(2.0, gt=0, description="Seconds between safety rescans of the log directories.")
    follow_symlinks_outside: bool = Field(
        False, description="Follow symbolic links that lead out of the log directory (default: skip, with a warning).")
    max_line_bytes: int = Field(1 << 20, ge=1024, description="Longer lines are truncated to this many bytes.")
    log_level: str = Field("info", pattern=r"(?i)^(debug|info|warning|error)$", description="Log verbosity.")
    plog_ranks: bool = Field(
        False, description="Count a CANN process log plog-<pid>_*.log on the rank whose worker log names that pid "
                           "(MindSpore's and CANN's records carry it); default: a series of its own.")
    rank_offset: int = Field(
        0, ge=0, description="Global rank of this node's local rank 0 (node_rank x nproc_per_node), "
                             "for [defaultN]: prefixes and torchrun's attempt_K/N/ directories.")
    # custom_formats before formats: validating a format name needs the custom names.
    custom_formats: list[CustomFormat] = Field(default_factory=list, description="User-defined line formats.")
    formats: list[FormatOverride] = Field(
        default_factory=list, description="Per-path format overrides, first match wins.")

    # OpenTelemetry push (docs/opentelemetry.md). --otlp-endpoint wins over the standard
    # OTEL_* variables, which the SDK would otherwise read behind our back.
    otlp_endpoint: str | None = Field(
        None, description="OTLP/HTTP collector base URL; /v1/metrics is appended unless a path is given.")
    otel_exporter_otlp_metrics_endpoint: str | None = Field(
        None, validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"),
        description="Full OTLP metrics URL.")
    otel_exporter_otlp_endpoint: str | None = Field(
        None, validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_ENDPOINT"),
        description="OTLP base URL (+ /v1/metrics).")
    otel_exporter_otlp_protocol: Literal["http/protobuf", "grpc"] = Field(
        "http/protobuf",
        validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"),
        description="http/protobuf (port 4318) or grpc (port 4317); http/json is not supported.")
    otel_exporter_otlp_headers: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"),
        description="key=value,key2=value2 headers sent with each export (e.g. authorization).")
    otel_exporter_otlp_timeout: float = Field(
        10000, gt=0, validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"),
        description="Milliseconds one export may take before it counts as failed.")
    otel_metric_export_interval: float = Field(
        60000, gt=0, validation_alias=AliasChoices("OTEL_METRIC_EXPORT_INTERVAL"),
        description="Milliseconds between pushes.")
    otel_service_name: str | None = Field(
        None, validation_alias=AliasChoices("OTEL_SERVICE_NAME"),
        description="service.name (default trainlog-exporter).")
    otel_resource_attributes: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, validation_alias=AliasChoices("OTEL_RESOURCE_ATTRIBUTES"),
        description="key=value,... resource attributes.")
    # Kubernetes downward API (fieldRef metadata.name, metadata.namespace, spec.nodeName).
    pod_name: str | None = Field(None, validation_alias=AliasChoices("POD_NAME"), description="k8s.pod.name.")
    pod_namespace: str | None = Field(
        None, validation_alias=AliasChoices("POD_NAMESPACE"), description="k8s.namespace.name.")
    node_name: str | None = Field(None, validation_alias=AliasChoices("NODE_NAME"), description="k8s.node.name.")
    # The XDG base directory of state files, for the default --state-file.
    xdg_state_home: Path | None = Field(
        None, validation_alias=AliasChoices("XDG_STATE_HOME"), description="State home.")

    demo: bool = Field(False, description="Also follow a live simulated run written to a temporary directory.")
    runbook_url: str = Field(
        DEFAULT_RUNBOOK_URL,
        description="Base URL of the runbooks the status page links (<base>/<AlertName>.md), e.g. an internal mirror.")
    process_pattern: str | None = Field(None, description="Regex over process command lines: training_process_up.")
    process_check_interval: float = Field(
        5.0, gt=0, description="Scrapes within this many seconds of a --process-pattern check reuse its answer.")
    # The detector thresholds (docs/detectors.md) come from DetectorConfig, through DetectorOptions.

    @field_validator("log_dir", mode="before")
    @classmethod
    def _bare_directories(cls, value: Any) -> Any:
        # A bare path (--log-dir DIR) is a directory with the default rules. (pydantic runs the
        # "before" validators last defined first: this one after _split_paths.)
        if isinstance(value, list):
            return [{"path": item} if isinstance(item, (str, os.PathLike)) else item for item in value]
        return value

    @field_validator("log_dir", "log_file", mode="before")
    @classmethod
    def _split_paths(cls, value: Any) -> Any:
        # TRAINLOG_LOG_DIR=/a,/b (or os.pathsep-separated), and a single string in YAML.
        if isinstance(value, str):
            return [part for part in re.split(rf"[,{re.escape(os.pathsep)}]", value) if part.strip()]
        return value

    @field_validator("log_dir")
    @classmethod
    def _no_files(cls, value: list[LogDirectory]) -> list[LogDirectory]:
        # A directory that does not exist yet is waited for; a file in its place is a mistake.
        for directory in value:
            if directory.path.exists() and not directory.path.is_dir():
                raise ValueError(f"{directory.path} is a file, not a directory: give the directory that holds the logs")
        return value

    @field_validator("custom_formats")
    @classmethod
    def _unique_custom_names(cls, value: list[CustomFormat]) -> list[CustomFormat]:
        names = [custom.name for custom in value]
        clashes = sorted({name for name in names if names.count(name) > 1 or name in BUILTIN_NAMES})
        if clashes:
            raise ValueError(
                f"custom format names must be unique and differ from the built-in ones: {', '.join(clashes)}")
        return value

    @field_validator("formats")
    @classmethod
    def _known_format_names(cls, value: list[FormatOverride], info: ValidationInfo) -> list[FormatOverride]:
        known = (*BUILTIN_NAMES, *(custom.name for custom in info.data.get("custom_formats", [])))
        for override in value:
            if override.format not in known:
                raise ValueError(f"unknown format {override.format!r}; known: {', '.join(known)}")
        return value

    @field_validator("web_listen_address")
    @classmethod
    def _check_listen_address(cls, value: str) -> str:
        match = _LISTEN_ADDRESS.match(value)
        if match is None or not 0 <= int(match.group("port")) <= 65535:
            raise ValueError(
                f"expected HOST:PORT such as ':{DEFAULT_PORT}' or '127.0.0.1:{DEFAULT_PORT}', got {value!r}")
        return value

    @field_validator("web_telemetry_path")
    @classmethod
    def _free_telemetry_path(cls, value: str) -> str:
        if value in ("/", "/-/healthy", "/-/ready"):
            raise ValueError(f"{value} is taken by another endpoint: choose another path such as /metrics")
        return value

    @field_validator(*_STANDARD_VARIABLES, mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        # The OpenTelemetry and XDG specifications treat an empty variable like an unset one.
        if isinstance(value, str) and not value.strip():
            raise PydanticUseDefault()
        return value

    @field_validator("otlp_endpoint", "otel_exporter_otlp_metrics_endpoint", "otel_exporter_otlp_endpoint")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected an http:// or https:// URL such as 'http://otel-collector:4318', got {value!r}")
        return value.strip()

    @field_validator("otel_exporter_otlp_headers", "otel_resource_attributes", mode="before")
    @classmethod
    def _parse_key_values(cls, value: Any) -> Any:
        return _key_value_list(value) if isinstance(value, str) else value

    @field_validator("process_pattern")
    @classmethod
    def _check_process_pattern(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as error:
                raise ValueError(f"not a regular expression: {error}") from None
        return value

    @model_validator(mode="after")
    def _default_node(self) -> Settings:
        # The node label defaults to the downward API's NODE_NAME (read once, as node_name,
        # which also names k8s.node.name over OTLP), else the host name.
        if self.node is None:
            self.node = self.node_name or socket.gethostname()
        return self

    @property
    def node_label(self) -> str:
        """The node label, as _default_node filled it in (typed without the None it never is)."""
        assert self.node is not None
        return self.node

    @property
    def detector_config(self) -> DetectorConfig:
        return DetectorConfig(**{field.name: getattr(self, field.name) for field in dataclasses.fields(DetectorConfig)})

    @field_validator("state_file")
    @classmethod
    def _check_state_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if value is None:
            return None
        # Imported here: the checkpoint module brings the follower (and watchdog) along.
        from exporter.checkpoint import containing_log_dir

        directory = containing_log_dir(value, [directory.path for directory in info.data.get("log_dir", [])])
        if directory is not None:
            raise ValueError(f"{value} is inside the log directory {directory}: put the state file elsewhere")
        return value

    @property
    def log_dir_paths(self) -> list[Path]:
        """The log directories' paths, without their rules."""
        return [directory.path for directory in self.log_dir]

    @property
    def state_home(self) -> Path:
        """$XDG_STATE_HOME, else ~/.local/state (the XDG base directory specification)."""
        return self.xdg_state_home or Path.home() / ".local" / "state"

    @property
    def listen_host_port(self) -> tuple[str, int]:
        match = _LISTEN_ADDRESS.match(self.web_listen_address)
        if match is None:  # refused by _check_listen_address
            raise ValueError(f"not HOST:PORT: {self.web_listen_address!r}")
        return match.group("host").strip("[]"), int(match.group("port"))

    @classmethod
    def settings_customise_sources(
        cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings
    ):
        config_file = init_settings.init_kwargs.get("config") or os.environ.get(f"{ENV_PREFIX}CONFIG")
        if not config_file:
            return init_settings, env_settings
        _check_readable(Path(config_file))
        return init_settings, env_settings, _YamlFile(settings_cls, yaml_file=config_file)


def _key_value_list(text: str) -> dict[str, str]:
    """``k1=v1,k2=v2`` with percent-encoded values (W3C Baggage style, as OTEL_* use)."""
    pairs = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            raise ValueError(f"expected comma-separated key=value pairs, got {item!r}")
        pairs[unquote(key.strip())] = unquote(value.strip())
    return pairs

def _check_readable(path: Path) -> None:
    # pydantic-settings skips a config file that is not there; a --config that names none is a mistake.
    try:
        path.open("rb").close()
    except OSError as error:
        raise ConfigError(f"config file {path}: {error.strerror}") from error


class _YamlFile(YamlConfigSettingsSource):
    """The --config file; keys may be spelled as on the command line (web.listen-address, log-dir)."""

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        try:
            loaded: Any = super()._read_file(file_path)
        except OSError as error:
            raise ConfigError(f"config file {file_path}: {error.strerror}") from error
        except yaml.YAMLError as error:
            raise ConfigError(f"config file {file_path}: not valid YAML: {error}") from error
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {file_path}: expected a mapping of option names to values")
        options = {str(key).replace(".", "_").replace("-", "_"): value for key, value in loaded.items()}
        if "log_dirs" in options:  # the plural reads better over a list of mappings
            if "log_dir" in options:
                raise ConfigError(f"config file {file_path}: give log_dir or log_dirs, not both")
            options["log_dir"] = options.pop("log_dirs")
        return options


def load_settings(**command_line: Any) -> Settings:
    """Settings from all sources; raises ConfigError naming the offending field."""
    try:
        return Settings(**command_line)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "configuration"
        if first["type"] == "extra_forbidden":
            raise ConfigError(f"unknown option {field!r}") from None
        raise ConfigError(f"invalid value for {field!r} ({_spellings(field)}): {first['msg']}") from None


# The exporter-toolkit's spellings (--web.listen-address), by field.
_DOTTED_FLAGS = {"web_listen_address": "--web.listen-address", "web_telemetry_path": "--web.telemetry-path",
                 "web_config_file": "--web.config.file"}
# Options set only in the config file (or as JSON in the environment), never on the command line.
_CONFIG_FILE_ONLY = ("custom_formats", "formats")


def _spellings(field: str) -> str:
    """How a user may have set a field: flag (or config key) and environment variable."""
    name = field.split(".")[0]
    if name in _CONFIG_FILE_ONLY:
        return f"config key {name} or {ENV_PREFIX}{name.upper()}"
    for field_name, info in Settings.model_fields.items():
        choices = info.validation_alias.choices if isinstance(info.validation_alias, AliasChoices) else []
        aliases = [alias for alias in choices if isinstance(alias, str)]
        if name in aliases or (aliases and name == field_name):  # standard variables such as OTEL_*
            return " or ".join(aliases)
    flag = _DOTTED_FLAGS.get(name) or "--" + name.replace("_", "-")
    return f"{flag} or {ENV_PREFIX}{name.upper()}"
