"""Certificates made at test time: a CA, a server certificate for 127.0.0.1 and a client certificate."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class TestPki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_pki(directory: Path) -> TestPki:
    """PEM files in ``directory``: valid for one day from an hour ago."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trainlog test CA")])
    ca = _builder(ca_name, ca_name, ca_key.public_key()).add_extension(
        x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256())
    paths = TestPki(*(directory / name for name in ("ca.crt", "server.crt", "server.key", "client.crt",
                                                    "client.key")))
    paths.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    _leaf(ca, ca_key, "127.0.0.1", ExtendedKeyUsageOID.SERVER_AUTH, paths.server_cert, paths.server_key,
          [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
    _leaf(ca, ca_key, "prometheus", ExtendedKeyUsageOID.CLIENT_AUTH, paths.client_cert, paths.client_key,
          [x509.DNSName("prometheus")])
    return paths


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1)))


def _leaf(ca: x509.Certificate, ca_key, name: str, usage, cert_path: Path, key_path: Path, sans) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (_builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]), ca.subject, key.public_key())
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
