"""``--web.config.file``: TLS and basic auth in the Prometheus exporter-toolkit format.

The same YAML node_exporter and Prometheus itself read (exporter-toolkit's
docs/web-configuration.md), so one file and one Secret serve a fleet of exporters::

    tls_server_config:
      cert_file: server.crt          # relative paths: from the web config file's directory
      key_file: server.key
      client_ca_file: ca.crt         # optional, with client_auth_type
      client_auth_type: RequireAndVerifyClientCert
    basic_auth_users:
      prometheus: $2y$10$...          # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\\n')

As in the toolkit, every path asks for the credentials (probes too), a file without
``tls_server_config`` serves plain HTTP (with basic auth if users are given), and unknown
keys are an error. The toolkit's settings that Python's ``ssl`` cannot express
(``RequestClientCert``, ``RequireAnyClientCert``, cipher and curve lists, SAN allow-lists)
are refused by name rather than ignored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import ssl
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Literal

import bcrypt
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

# The toolkit's client_auth_type values that Python's ssl module can enforce.
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                 "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
# Toolkit keys with no equivalent here: named in the error instead of "extra inputs are not permitted".
_UNSUPPORTED = {"cert", "key", "client_ca", "cipher_suites", "curve_preferences", "prefer_server_cipher_suites",
                "client_allowed_sans", "rate_limit"}
_BCRYPT_HASH = re.compile(r"^\$2[abxy]?\$\d\d\$[./A-Za-z0-9]{53}$")
# A bcrypt hash (cost 10) of a random password nobody knows: checked for unknown users too, so the
# answer takes as long as for a known one and does not tell which user names exist (as the toolkit does).
_DECOY_HASH = b"$2b$10$85qz2.roUXsN2QY1V5xNROonE30o3BYitidoTGPOcTwp/jKBsNf1O"
_CACHE_SIZE = 100  # the toolkit's, too


class WebConfigError(Exception):
    """An unreadable or invalid web config file, worded for the user (exit 2)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TlsServerConfig(_Strict):
    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None
    client_auth_type: Literal["NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"] = "NoClientCert"
    min_version: Literal["TLS10", "TLS11", "TLS12", "TLS13"] = "TLS12"
    max_version: Literal["TLS10", "TLS11", "TLS12", "TLS13"] = "TLS13"


class HttpServerConfig(_Strict):
    # Accepted for files shared with Go exporters; this server speaks HTTP/1.1 only.
    http2: bool = True
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("headers")
    @classmethod
    def _no_reserved_headers(cls, value: dict[str, str]) -> dict[str, str]:
        # The toolkit refuses the headers its server sets itself.
        reserved = {"authorization", "content-type", "content-encoding", "server", "www-authenticate"}
        clashes = sorted(name for name in value if name.lower() in reserved)
        if clashes:
            raise ValueError(f"headers set by the server itself cannot be configured: {', '.join(clashes)}")
        return value


class WebConfig(_Strict):
    """The parsed file; paths resolved against its directory."""

    tls_server_config: TlsServerConfig | None = None
    http_server_config: HttpServerConfig = HttpServerConfig()
    basic_auth_users: dict[str, str] = Field(default_factory=dict)

    @field_validator("basic_auth_users")
    @classmethod
    def _bcrypt_hashes(cls, value: dict[str, str]) -> dict[str, str]:
        for user, hashed in value.items():
            if ":" in user:
                raise ValueError(f"user name {user!r} contains ':', which basic auth cannot carry")
            if not _BCRYPT_HASH.match(hashed):
                raise ValueError(f"the password of user {user!r} is not a bcrypt hash ($2y$10$...): "
                                 "make one with htpasswd -nBC 10 \"\" | tr -d ':\\n'")
        return value


def load_web_config(path: Path) -> WebConfig:
    """Read and check the file (and the TLS files it names); raises WebConfigError."""
    try:
        loaded: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise WebConfigError(f"web config file {path}: {error.strerror}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise WebConfigError(f"web config file {path}: not valid YAML: {_one_line(error)}") from None
    loaded = {} if loaded is None else loaded
    if not isinstance(loaded, dict):
        raise WebConfigError(f"web config file {path}: expected a mapping such as tls_server_config: ...")
    _refuse_unsupported(path, loaded)
    try:
        config = WebConfig.model_validate(loaded)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise WebConfigError(f"web config file {path}: {where}: {first['msg']}") from None
    config = _relative_to(config, path.parent)
    if config.tls_server_config is not None:
        server_context(config.tls_server_config, path)  # reads the files: a bad one fails now, not per connection
    return config


def _refuse_unsupported(path: Path, loaded: dict[str, Any]) -> None:
    tls = loaded.get("tls_server_config")
    keys = [*(f"tls_server_config.{key}" for key in (tls if isinstance(tls, dict) else {})),
            *map(str, loaded)]
    for key in keys:
        if key.rsplit(".", 1)[-1] in _UNSUPPORTED:
            raise WebConfigError(f"web config file {path}: {key} is not supported by trainlog-exporter")
    auth_type = tls.get("client_auth_type") if isinstance(tls, dict) else None
    if auth_type in ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert"):
        raise WebConfigError(f"web config file {path}: client_auth_type {auth_type} (a client certificate that "
                             "is not verified) is not supported: use VerifyClientCertIfGiven or "
                             "RequireAndVerifyClientCert with client_ca_file")


def _relative_to(config: WebConfig, directory: Path) -> WebConfig:
    tls = config.tls_server_config
    if tls is None:
        return config
    resolved = tls.model_copy(update={
        "cert_file": directory / tls.cert_file, "key_file": directory / tls.key_file,
        "client_ca_file": None if tls.client_ca_file is None else directory / tls.client_ca_file})
    return config.model_copy(update={"tls_server_config": resolved})


def server_context(tls: TlsServerConfig, path: Path) -> ssl.SSLContext:
    """The server's SSL context; raises WebConfigError naming the file that failed."""
    if tls.client_ca_file is not None and tls.client_auth_type == "NoClientCert":
        # As the toolkit says it: a CA nobody is asked for would look like protection.
        raise WebConfigError(f"web config file {path}: client_ca_file is set but client_auth_type is "
                             "NoClientCert: set VerifyClientCertIfGiven or RequireAndVerifyClientCert")
    if tls.client_ca_file is None and tls.client_auth_type != "NoClientCert":
        raise WebConfigError(f"web config file {path}: client_auth_type {tls.client_auth_type} needs client_ca_file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _TLS_VERSIONS[tls.min_version]
    context.maximum_version = _TLS_VERSIONS[tls.max_version]
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as error:
        raise WebConfigError(f"web config file {path}: cannot load cert_file {tls.cert_file} with key_file "
                             f"{tls.key_file}: {_reason(error)}") from None
    if tls.client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=tls.client_ca_file)
        except (OSError, ssl.SSLError) as error:
            raise WebConfigError(f"web config file {path}: cannot load client_ca_file {tls.client_ca_file}: "
                                 f"{_reason(error)}") from None
    context.verify_mode = _CLIENT_AUTH[tls.client_auth_type]
    return context


def _reason(error: OSError | ssl.SSLError) -> str:
    return error.strerror or _one_line(error) if isinstance(error, OSError) else _one_line(error)


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())


class BasicAuth:
    """Checks ``Authorization: Basic`` headers against bcrypt hashes.

    bcrypt is slow on purpose (about 50 ms at cost 10): as in the toolkit, checks run one at
    a time and their outcome is cached by a digest of (user, hash, password), so a scraper
    that sends the same credentials every 15 s costs one check, and 50 scrapers with wrong
    passwords cost one CPU at most.
    """

    def __init__(self, users: dict[str, str]) -> None:
        self._users = {user: hashed.encode() for user, hashed in users.items()}
        self._checked: OrderedDict[bytes, bool] = OrderedDict()
        self._lock = threading.Lock()

    def allows(self, authorization: str | None) -> bool:
        credentials = _basic_credentials(authorization)
        if credentials is None:
            return False
        user, password = credentials
        hashed = self._users.get(user)
        known = hashed is not None
        hashed = hashed if hashed is not None else _DECOY_HASH
        key = hashlib.sha256(b"\0".join((user.encode(), hashed, password))).digest()
        with self._lock:
            allowed = self._checked.get(key)
            if allowed is None:
                allowed = _matches(password, hashed) and known
                self._checked[key] = allowed
                if len(self._checked) > _CACHE_SIZE:
                    self._checked.popitem(last=False)
            else:
                self._checked.move_to_end(key)
        return allowed


def _matches(password: bytes, hashed: bytes) -> bool:
    try:
        return bcrypt.checkpw(password, hashed)
    except ValueError:  # bcrypt takes at most 72 bytes of password
        return False


def _basic_credentials(authorization: str | None) -> tuple[str, bytes] | None:
    """(user, password) of an ``Authorization: Basic ...`` header, None for anything else."""
    scheme, _, encoded = (authorization or "").strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, colon, password = decoded.partition(b":")
    if not colon:
        return None
    return user.decode("utf-8", "replace"), password
