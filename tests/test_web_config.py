"""--web.config.file: TLS, client certificates and basic auth, as a real Prometheus meets them."""

from __future__ import annotations

import base64
import socket
import ssl
import time

import bcrypt
import pytest
import yaml

from exporter.cli import main
from tests.support.certs import make_pki
from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually, free_port, http_get
from tests.support.prometheus import PrometheusServer
from tests.support.runs import copy_example

USER, PASSWORD = "prometheus", "correct horse battery staple"


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _web_config(directory, pki, **tls) -> str:
    """A web config beside the certificates, naming them relative to itself (as the toolkit resolves them)."""
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()
    config = {"tls_server_config": {"cert_file": pki.server_cert.name, "key_file": pki.server_key.name, **tls},
              "basic_auth_users": {USER: hashed}}
    path = directory / "web-config.yml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _client_context(pki, with_certificate: bool = True) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if with_certificate:
        context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    return context


def test_prometheus_scrapes_over_mutual_tls_with_basic_auth_and_nobody_else_gets_in(tmp_path):
    pki = make_pki(tmp_path / "pki")
    web_config = _web_config(tmp_path / "pki", pki, client_ca_file="ca.crt",
                             client_auth_type="RequireAndVerifyClientCert")
    log_dir = copy_example(tmp_path / "logs", mtime=None)
    client_files = {"cert_file": str(pki.client_cert), "key_file": str(pki.client_key)}
    scrape = {"scheme": "https", "tls_config": {"ca_file": str(pki.ca), **client_files},
              "basic_auth": {"username": USER, "password": PASSWORD}}
    with ExporterProcess("--log-dir", str(log_dir), "--node", "node-a", "--web.config.file", web_config,
                         tls=_client_context(pki), headers=_basic(USER, PASSWORD)) as exporter, \
            PrometheusServer(tmp_path / "prometheus", [f"127.0.0.1:{exporter.port}"],
                             scrape_settings=scrape) as prometheus:
        result = eventually(lambda: prometheus.query('training_loss{rank="3"}'), timeout=30, interval=0.5,
                            what=lambda: f"training_loss over TLS; targets: {prometheus.targets()}")
        assert result[0]["metric"]["run"] == "deepseek-moe-8rank"
        assert float(prometheus.query('up{job="trainlog-exporter"}')[0]["value"][1]) == 1
        assert prometheus.query("trainlog_build_info")[0]["metric"]["version"] == "0.1.0"
        assert prometheus.query("process_resident_memory_bytes")

        client = _client_context(pki)
        for path in ("/metrics", "/", "/-/healthy", "/-/ready", "/nothing-here"):
            for headers in ({}, _basic(USER, "wrong"), _basic("intruder", PASSWORD), {"Authorization": "Bearer x"}):
                status, body = http_get(exporter.url + path, headers=headers, context=client)
                assert (status, body) == (401, "Unauthorized\n"), (path, headers)
        status, _ = http_get(exporter.url + "/metrics", headers=_basic(USER, PASSWORD), context=client)
        assert status == 200
        _assert_www_authenticate(exporter.port, client)
        # Without a client certificate the handshake itself fails, credentials or not.
        with pytest.raises(OSError):
            http_get(exporter.url + "/metrics", headers=_basic(USER, PASSWORD),
                     context=_client_context(pki, with_certificate=False))
        # Plain HTTP on the TLS port gets nothing.
        with pytest.raises(OSError):
            http_get(f"http://127.0.0.1:{exporter.port}/metrics", headers=_basic(USER, PASSWORD))


def _assert_www_authenticate(port: int, context: ssl.SSLContext) -> None:
    import http.client

    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    connection.request("GET", "/metrics")
    response = connection.getresponse()
    assert response.status == 401
    assert response.getheader("WWW-Authenticate") == "Basic"
    assert response.version == 11  # HTTP/1.1
    connection.close()


def test_connections_that_never_shake_hands_do_not_hold_up_a_scrape(tmp_path):
    pki = make_pki(tmp_path / "pki")
    log_dir = copy_example(tmp_path / "logs", mtime=None)
    with ExporterProcess("--log-dir", str(log_dir), "--web.config.file", _web_config(tmp_path / "pki", pki),
                         tls=_client_context(pki, with_certificate=False), headers=_basic(USER, PASSWORD)) as exporter:
        silent = [socket.create_connection(("127.0.0.1", exporter.port)) for _ in range(30)]
        try:
            started = time.monotonic()
            status, body = http_get(exporter.url + "/metrics", headers=_basic(USER, PASSWORD), timeout=5,
                                    context=exporter.tls)
            assert status == 200 and "training_loss" in body
            assert time.monotonic() - started < 2
        finally:
            for connection in silent:
                connection.close()


@pytest.mark.parametrize(("content", "message"), [
    (None, "web config file {path}: No such file or directory"),
    ("tls_server_config: [", "web config file {path}: not valid YAML"),
    ("basic_auth_users: {alice: secret}", "the password of user 'alice' is not a bcrypt hash"),
    ("tls_server_confg: {}", "web config file {path}: tls_server_confg: Extra inputs are not permitted"),
    ("tls_server_config: {cert_file: missing.crt, key_file: missing.key}", "cannot load cert_file"),
    ("tls_server_config: {cert_file: server.crt, key_file: server.key, client_ca_file: ca.crt}",
     "client_ca_file is set but client_auth_type is NoClientCert"),
    ("tls_server_config: {cert_file: server.crt, key_file: server.key, client_auth_type: RequestClientCert}",
     "client_auth_type RequestClientCert"),
    ("tls_server_config: {cert_file: server.crt, key_file: server.key, cipher_suites: [TLS_AES_128_GCM_SHA256]}",
     "tls_server_config.cipher_suites is not supported"),
    ("tls_server_config: {cert_file: server.crt}", "tls_server_config.key_file: Field required"),
])
def test_an_unreadable_or_invalid_web_config_exits_2_with_one_line(tmp_path, capsys, content, message):
    make_pki(tmp_path)
    path = tmp_path / "web-config.yml"
    if content is not None:
        path.write_text(content)
    status = main(["--log-dir", str(tmp_path / "logs"), "--web.config.file", str(path),
                   "--web.listen-address", f"127.0.0.1:{free_port()}"])
    error = capsys.readouterr().err
    assert status == 2
    assert error.count("\n") == 1 and error.startswith("trainlog-exporter: ")
    assert message.format(path=path) in error


def test_basic_auth_without_tls_serves_plain_http_with_credentials(tmp_path):
    path = tmp_path / "web-config.yml"
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    path.write_text(yaml.safe_dump({"basic_auth_users": {USER: hashed},
                                    "http_server_config": {"headers": {"X-Content-Type-Options": "nosniff"}}}))
    with ExporterProcess("--log-dir", str(tmp_path), "--web.config.file", str(path),
                         headers=_basic(USER, PASSWORD)) as exporter:
        assert http_get(exporter.url + "/-/healthy")[0] == 401
        import urllib.request

        request = urllib.request.Request(exporter.url + "/-/healthy", headers=_basic(USER, PASSWORD))
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 200
            assert response.headers["X-Content-Type-Options"] == "nosniff"


_SALT_AND_HASH = "a" * 53


@pytest.mark.parametrize(("content", "message"), [
    (f"basic_auth_users: {{alice: '$2b$03${_SALT_AND_HASH}'}}", "user 'alice' is a bcrypt hash of cost 3"),
    (f"basic_auth_users: {{bob: '$2y$32${_SALT_AND_HASH}'}}", "user 'bob' is a bcrypt hash of cost 32"),
    (f"basic_auth_users: {{carol: '$2$10${_SALT_AND_HASH}'}}", "user 'carol' has the bcrypt prefix $2$"),
    (f"basic_auth_users: {{dave: '$2x$10${_SALT_AND_HASH}'}}", "user 'dave' has the bcrypt prefix $2x$"),
    ("tls_server_config: {cert_file: server.crt, key_file: server.key, min_version: TLS13, max_version: TLS12}",
     "tls_server_config: Value error, min_version TLS13 is above max_version TLS12"),
    ("rate_limit: {interval: 1x, burst: 3}", "rate_limit.interval: Value error, '1x' is not a duration"),
    ("rate_limit: {interval: 1s}", "rate_limit: Value error, burst must be at least 1"),
])
def test_hashes_that_can_never_match_and_impossible_settings_are_refused_by_name(tmp_path, capsys, content, message):
    make_pki(tmp_path)
    path = tmp_path / "web-config.yml"
    path.write_text(content)
    status = main(["--log-dir", str(tmp_path / "logs"), "--web.config.file", str(path),
                   "--web.listen-address", f"127.0.0.1:{free_port()}"])
    error = capsys.readouterr().err
    assert status == 2 and error.count("\n") == 1
    assert message in error, error


def _secret_volume(directory, generation: str, password: str | None) -> None:
    """A Kubernetes Secret volume: web-config.yml -> ..data/web-config.yml, ..data swapped atomically."""
    data = directory / generation
    data.mkdir()
    users = {USER: bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()} if password else None
    content = yaml.safe_dump({"basic_auth_users": users}) if users else "basic_auth_users: ["
    (data / "web-config.yml").write_text(content)
    link = directory / "..data_tmp"
    link.symlink_to(generation)
    link.replace(directory / "..data")
    if not (directory / "web-config.yml").is_symlink():
        (directory / "web-config.yml").symlink_to("..data/web-config.yml")


def _reload_gauge(exporter: ExporterProcess, password: str) -> float:
    status, body = http_get(exporter.url + "/metrics", headers=_basic(USER, password))
    assert status == 200, body
    line = next(line for line in body.splitlines() if line.startswith("trainlog_web_config_last_reload_successful "))
    return float(line.split()[1])


def test_a_replaced_secret_is_read_again_and_a_bad_edit_keeps_the_last_good_config(tmp_path):
    secret = tmp_path / "secret"
    secret.mkdir()
    _secret_volume(secret, "..2026_01", "first")
    with ExporterProcess("--log-dir", str(tmp_path), "--web.config.file", str(secret / "web-config.yml"),
                         headers=_basic(USER, "first")) as exporter:
        assert _reload_gauge(exporter, "first") == 1
        _secret_volume(secret, "..2026_02", "second")
        eventually(lambda: http_get(exporter.url + "/-/ready", headers=_basic(USER, "second"))[0] == 200, timeout=5,
                   what="the rotated password")
        assert http_get(exporter.url + "/-/ready", headers=_basic(USER, "first"))[0] == 401
        assert _reload_gauge(exporter, "second") == 1

        _secret_volume(secret, "..2026_03", None)  # not valid YAML
        eventually(lambda: _reload_gauge(exporter, "second") == 0, timeout=5, what="the failed reload")
        assert http_get(exporter.url + "/-/ready", headers=_basic(USER, "second"))[0] == 200
        assert "keeping the last good web config" in exporter.output()
        assert "Traceback" not in exporter.output()

        _secret_volume(secret, "..2026_04", "third")
        eventually(lambda: http_get(exporter.url + "/-/ready", headers=_basic(USER, "third"))[0] == 200, timeout=5,
                   what="the password after the bad edit")
        assert _reload_gauge(exporter, "third") == 1


def test_pure_checks_of_hashes_durations_and_buckets():
    from exporter.export.web_config import TokenBucket, bcrypt_problem, go_duration

    assert bcrypt_problem(bcrypt.hashpw(b"x", bcrypt.gensalt(rounds=4)).decode()) is None
    assert bcrypt_problem("$2y$31$" + _SALT_AND_HASH) is None
    assert "cost 3" in bcrypt_problem("$2a$03$" + _SALT_AND_HASH)
    assert "not a bcrypt hash" in bcrypt_problem("secret")
    assert [go_duration(text) for text in ("0", "1s", "250ms", "1m30s", "1.5h", "2us")] == [
        0, 1, 0.25, 90, 5400, pytest.approx(2e-6)]
    for bad in ("1", "1x", "s", "1s 2s", "-1s"):
        with pytest.raises(ValueError, match="is not a duration"):
            go_duration(bad)
    bucket = TokenBucket(rate=2.0, burst=2, stamp=0.0)
    taken = []
    for now in (0.0, 0.0, 0.0, 0.4, 0.5, 1.5, 1.5, 1.5):
        ok = bucket.available(now)
        if ok:
            bucket.take()
        taken.append(ok)
    assert taken == [True, True, False, False, True, True, True, False]
