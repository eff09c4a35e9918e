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
``tls_server_config`` serves plain HTTP (with basic auth if users are given), unknown
keys are an error, every bcrypt hash is checked at load (a known prefix, a cost bcrypt can
compute) and TLS versions must be in order. The file is read again when it changes (a
mounted Secret is replaced by a symlink swap): a bad edit keeps the last good config
(``WebConfigReloader``). The toolkit's settings that Python's ``ssl`` cannot express
(``RequestClientCert``, ``RequireAnyClientCert``, cipher and curve lists, SAN allow-lists)
are refused by name rather than ignored.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import hashlib
import logging
import os
import re
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import bcrypt
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

log = logging.getLogger(__name__)

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
                "client_allowed_sans"}
# $2a$, $2b$ and $2y$ with a two-digit cost and 53 characters of salt and hash; bcrypt computes
# costs 4 to 31 only (Go's bcrypt.MinCost and MaxCost): a hash outside can never match.
_BCRYPT_HASH = re.compile(r"^\$(?P<prefix>2[aby])\$(?P<cost>\d\d)\$[./A-Za-z0-9]{53}$")
_BCRYPT_COSTS = range(4, 32)
_TLS_ORDER = ("TLS10", "TLS11", "TLS12", "TLS13")
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

    @model_validator(mode="after")
    def _versions_in_order(self) -> TlsServerConfig:
        if _TLS_ORDER.index(self.min_version) > _TLS_ORDER.index(self.max_version):
            raise ValueError(f"min_version {self.min_version} is above max_version {self.max_version}: "
                             "no TLS version is left to speak")
        return self


class RateLimit(_Strict):
    """The toolkit's ``rate_limit``: at most one request per ``interval``, ``burst`` at once, else 429.

    Here it limits the requests that cost a bcrypt check (credentials not seen before): a
    scraper whose credentials are cached is never refused, whatever a flood does.
    """

    interval: str = "0s"  # a Go duration: 100ms, 1s, 1m30s; 0: no limit of this file's
    burst: int = Field(default=0, ge=0)

    @field_validator("interval")
    @classmethod
    def _duration(cls, value: str) -> str:
        go_duration(value)  # raises ValueError naming it
        return value

    @model_validator(mode="after")
    def _burst_with_interval(self) -> RateLimit:
        if go_duration(self.interval) > 0 and self.burst < 1:
            raise ValueError("burst must be at least 1 when interval is set: no request would ever pass")
        return self


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
    rate_limit: RateLimit | None = None

    @field_validator("basic_auth_users")
    @classmethod
    def _bcrypt_hashes(cls, value: dict[str, str]) -> dict[str, str]:
        for user, hashed in value.items():
            if ":" in user:
                raise ValueError(f"user name {user!r} contains ':', which basic auth cannot carry")
            problem = bcrypt_problem(hashed)
            if problem is not None:
                raise ValueError(f"the password of user {user!r} {problem}: "
                                 "make one with htpasswd -nBC 10 \"\" | tr -d ':\\n'")
        return value


def bcrypt_problem(hashed: str) -> str | None:
    """Why a hash can never match any password (None when it can), as the toolkit checks at load."""
    match = _BCRYPT_HASH.match(hashed)
    if match is None:
        prefix = hashed.split("$")[1] if hashed.startswith("$") and hashed.count("$") >= 2 else None
        if prefix is not None and prefix.startswith("2"):
            return f"has the bcrypt prefix ${prefix}$, which is not $2a$, $2b$ or $2y$"
        return "is not a bcrypt hash ($2y$10$...)"
    cost = int(match["cost"])
    if cost not in _BCRYPT_COSTS:
        return f"is a bcrypt hash of cost {cost}, outside the costs 4 to 31 that bcrypt computes"
    return None


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration(text: str) -> float:
    """Seconds of a Go duration (``1m30s``, ``250ms``, ``0``); raises ValueError naming it."""
    text = text.strip()
    if text in ("0", ""):
        return 0.0
    position, seconds = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            break
        seconds += float(match[1]) * _DURATION_UNITS[match[2]]
        position = match.end()
    if position != len(text):
        raise ValueError(f"{text!r} is not a duration such as 1s, 250ms or 1m30s")
    return seconds


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

    bcrypt is slow on purpose (about 50-130 ms at cost 10): as in the toolkit, checks run one at
    a time and their outcome is cached by a digest of (user, hash, password), so a scraper
    that sends the same credentials every 15 s costs one check. The cache is looked up before
    the lock that serialises bcrypt (``cached``), so known credentials never wait behind
    unknown ones; only ``check`` takes it.
    """

    def __init__(self, users: dict[str, str]) -> None:
        self._users = {user: hashed.encode() for user, hashed in users.items()}
        self._checked: OrderedDict[bytes, bool] = OrderedDict()
        self._cache_lock = threading.Lock()  # held for a dictionary operation, never for bcrypt
        self._bcrypt_lock = threading.Lock()

    def allows(self, authorization: str | bytes | None) -> bool:
        """The cache, else a bcrypt check (blocking)."""
        cached = self.cached(authorization)
        return cached if cached is not None else self.check(authorization)

    def cached(self, authorization: str | bytes | None) -> bool | None:
        """The cached answer for these credentials (False for a header that is not Basic), None if unknown."""
        key = self._key(authorization)
        if key is None:
            return False
        with self._cache_lock:
            allowed = self._checked.get(key[0])
            if allowed is not None:
                self._checked.move_to_end(key[0])
        return allowed

    def check(self, authorization: str | bytes | None) -> bool:
        """Check with bcrypt, one check at a time, and cache the outcome."""
        key = self._key(authorization)
        if key is None:
            return False
        digest, password, hashed, known = key
        with self._bcrypt_lock:
            allowed = self.cached(authorization)  # another check may have just answered it
            if allowed is None:
                allowed = _matches(password, hashed) and known
                with self._cache_lock:
                    self._checked[digest] = allowed
                    if len(self._checked) > _CACHE_SIZE:
                        self._checked.popitem(last=False)
        return allowed

    def _key(self, authorization: str | bytes | None) -> tuple[bytes, bytes, bytes, bool] | None:
        credentials = _basic_credentials(authorization)
        if credentials is None:
            return None
        user, password = credentials
        hashed = self._users.get(user)
        known = hashed is not None
        hashed = hashed if hashed is not None else _DECOY_HASH
        return hashlib.sha256(b"\0".join((user.encode(), hashed, password))).digest(), password, hashed, known


# bcrypt checks of credentials not seen before: at most this many per second and client, and
# overall (unless the file's rate_limit says otherwise), and this many waiting at once. At cost
# 10 one check takes 50-130 ms of one core: 10 a second is the most a flood can cost.
CHECKS_PER_CLIENT = (1.0, 5)  # (per second, burst)
CHECKS_OVERALL = (10.0, 10)
CHECKS_WAITING = 4
_CLIENTS_KEPT = 4096  # per-client buckets remembered (the oldest forgotten first)


@dataclass
class TokenBucket:
    """``rate`` tokens a second up to ``burst``; ``take`` spends one if there is one."""

    rate: float
    burst: float
    tokens: float = -1.0
    stamp: float = 0.0

    def __post_init__(self) -> None:
        if self.tokens < 0:
            self.tokens = self.burst

    def available(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        return self.tokens >= 1

    def take(self) -> None:
        self.tokens -= 1


class CheckLimiter:
    """Token buckets per client address and overall, for the bcrypt checks (429 when empty)."""

    def __init__(self, per_client: tuple[float, int] = CHECKS_PER_CLIENT,
                 overall: tuple[float, int] = CHECKS_OVERALL, clock: Callable[[], float] = time.monotonic) -> None:
        self._per_client = per_client
        self._clock = clock
        self._clients: OrderedDict[str, TokenBucket] = OrderedDict()
        self.overall = TokenBucket(*overall, stamp=clock())
        self.limited = 0  # checks refused so far (trainlog_http_auth_limited_total)

    def set_overall(self, rate: float, burst: int) -> None:
        self.overall = TokenBucket(rate, burst, stamp=self._clock())

    def allow(self, client: str) -> bool:
        now = self._clock()
        bucket = self._clients.pop(client, None) or TokenBucket(*self._per_client, stamp=now)
        self._clients[client] = bucket
        if len(self._clients) > _CLIENTS_KEPT:
            self._clients.popitem(last=False)
        if bucket.available(now) and self.overall.available(now):
            bucket.take()
            self.overall.take()
            return True
        self.limited += 1
        return False


class Decision:
    """What the gate says of a request's credentials."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


ALLOWED, DENIED, LIMITED = Decision("allowed"), Decision("denied"), Decision("limited")


class Checks:
    """What outlives a reload: the limiter and the one thread bcrypt runs on."""

    def __init__(self, limiter: CheckLimiter | None = None) -> None:
        self.limiter = limiter or CheckLimiter()
        self.waiting = 0
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None

    @property
    def thread(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._thread is None:
            self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="bcrypt")
        return self._thread


@dataclass(frozen=True)
class Gate:
    """Basic auth as the event loop asks it: cached answers at once, bcrypt on its own thread, limited."""

    auth: BasicAuth
    checks: Checks

    async def decide(self, authorization: bytes | None, client: str) -> Decision:
        cached = self.auth.cached(authorization)
        if cached is not None:
            return ALLOWED if cached else DENIED
        checks = self.checks
        if checks.waiting >= CHECKS_WAITING or not checks.limiter.allow(client):
            if checks.waiting >= CHECKS_WAITING:
                checks.limiter.limited += 1
            return LIMITED
        checks.waiting += 1
        try:
            allowed = await asyncio.get_running_loop().run_in_executor(checks.thread, self.auth.check, authorization)
        finally:
            checks.waiting -= 1
        return ALLOWED if allowed else DENIED


@dataclass(frozen=True)
class Served:
    """What the server applies, from one web config: TLS, credentials, extra headers."""

    context: ssl.SSLContext | None = None
    gate: Gate | None = None
    headers: tuple[tuple[str, str], ...] = ()


def static_served(served: Served) -> Callable[[], Served]:
    return lambda: served


def served_from(config: WebConfig, path: Path, checks: Checks) -> Served:
    """The server's view of a loaded config; the limiter follows its rate_limit."""
    rate = config.rate_limit
    interval = go_duration(rate.interval) if rate is not None else 0.0
    if interval > 0 and rate is not None:
        checks.limiter.set_overall(1 / interval, rate.burst)
    else:
        checks.limiter.set_overall(*CHECKS_OVERALL)
    context = server_context(config.tls_server_config, path) if config.tls_server_config is not None else None
    gate = Gate(BasicAuth(config.basic_auth_users), checks) if config.basic_auth_users else None
    return Served(context, gate, tuple(config.http_server_config.headers.items()))


RECHECK_SECONDS = 1.0  # the file's identity is looked at no more often than this


@dataclass
class WebConfigReloader:
    """The latest good web config, read again when the file or a file it names changes.

    Kubernetes replaces a mounted Secret by swapping a symlink: ``os.stat`` follows it, so the
    identity (device, inode, size, mtime) of what the path leads to changes. A config that
    fails to load is logged and the last good one kept, as Prometheus does with its own.
    """

    path: Path
    checks: Checks = field(default_factory=Checks)
    clock: Callable[[], float] = time.monotonic
    last_reload_successful: bool = True
    last_reload_seconds: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        config = load_web_config(self.path)  # raises WebConfigError: the start fails
        self._served = served_from(config, self.path, self.checks)
        self._identity = _identity(self.path, config)
        self._config = config
        self._checked_at = self.clock()
        self._lock = threading.Lock()

    def served(self) -> Served:
        now = self.clock()
        if now - self._checked_at >= RECHECK_SECONDS and self._lock.acquire(blocking=False):
            try:
                self._checked_at = now
                identity = _identity(self.path, self._config)
                if identity != self._identity:
                    self._identity = identity
                    self._reload()
            finally:
                self._lock.release()
        return self._served

    def _reload(self) -> None:
        try:
            config = load_web_config(self.path)
            served = served_from(config, self.path, self.checks)
        except WebConfigError as error:
            self.last_reload_successful = False
            log.error("%s; keeping the last good web config", error)
            return
        self._served, self._config = served, config
        self._identity = _identity(self.path, config)
        self.last_reload_successful, self.last_reload_seconds = True, time.time()
        log.info("web config file %s reloaded", self.path)


def _identity(path: Path, config: WebConfig) -> tuple[tuple[int, ...] | None, ...]:
    tls = config.tls_server_config
    files = [path] if tls is None else [path, tls.cert_file, tls.key_file, *filter(None, [tls.client_ca_file])]
    return tuple(_stat(file) for file in files)


def _stat(path: Path) -> tuple[int, ...] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns


def _matches(password: bytes, hashed: bytes) -> bool:
    try:
        return bcrypt.checkpw(password, hashed)
    except ValueError:  # bcrypt takes at most 72 bytes of password
        return False


def _basic_credentials(authorization: str | bytes | None) -> tuple[str, bytes] | None:
    """(user, password) of an ``Authorization: Basic ...`` header, None for anything else."""
    if isinstance(authorization, bytes):
        authorization = authorization.decode("latin-1")
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
