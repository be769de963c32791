"""A secured Apache Kafka for the security tests: a test CA and certificates made with `openssl`,
and one broker with three client listeners: SASL_PLAINTEXT (PLAIN and SCRAM-SHA-256), SSL with
mutual TLS, SASL_SSL (SCRAM-SHA-512); SCRAM users are created at storage-format time.

The broker's certificate names only IP 127.0.0.1, so `localhost:<port>` is a hostname mismatch
with a certificate the client trusts; a second CA that signed nothing the broker shows makes
an untrusted certificate."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.apache_kafka import (
    CLIENT,
    KafkaCluster,
    ScramUser,
    SecurityConfig,
    sasl_listener_properties,
    ssl_listener_properties,
)

SSL_LISTENER, SASL_SSL_LISTENER = "TLS", "SASLTLS"
USER, PLAIN_USER = "forwarder", "plain-forwarder"
# Generated for the test broker only; never a real credential.
PASSWORD, PLAIN_PASSWORD = "scram-pw-5d1e8f", "plain-pw-7a2c4b"
OPENSSL = shutil.which("openssl")


@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA clients trust
    other_ca: Path  # a CA that signed nothing the broker shows
    broker_keystore: Path  # the broker's PKCS#8 key and certificate (IP:127.0.0.1 only)
    client_cert: Path
    client_key: Path


def _openssl(directory: Path, *args: str) -> None:
    assert OPENSSL is not None
    subprocess.run([OPENSSL, *args], cwd=directory, check=True, capture_output=True, timeout=60)


def _ca(directory: Path, name: str) -> None:
    _openssl(directory, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN=synclib test {name}")


def _signed(directory: Path, name: str, ca: str, alt_names: str | None) -> None:
    _openssl(directory, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", "-subj", f"/CN=synclib {name}")
    extra: list[str] = []
    if alt_names:
        (directory / f"{name}.ext").write_text(f"subjectAltName={alt_names}\n")
        extra = ["-extfile", f"{name}.ext"]
    _openssl(directory, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", *extra)


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    _ca(directory, "ca")
    _ca(directory, "other-ca")
    _signed(directory, "broker", "ca", "IP:127.0.0.1")
    _signed(directory, "client", "ca", None)
    keystore = directory / "broker-keystore.pem"  # OpenSSL 3 writes PKCS#8 keys, as Kafka's PEM store wants
    keystore.write_text((directory / "broker.key").read_text() + (directory / "broker.pem").read_text())
    return Pki(ca=directory / "ca.pem", other_ca=directory / "other-ca.pem", broker_keystore=keystore,
               client_cert=directory / "client.pem", client_key=directory / "client.key")


def secured_cluster(pki: Pki, directory: Path) -> KafkaCluster:
    """One node: CLIENT = SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256), TLS = SSL with client
    certificates required, SASLTLS = SASL_SSL (SCRAM-SHA-512, no client certificate)."""
    properties = {
        **sasl_listener_properties(CLIENT, ["PLAIN", "SCRAM-SHA-256"], {PLAIN_USER: PLAIN_PASSWORD}),
        **ssl_listener_properties(SSL_LISTENER, pki.broker_keystore, pki.ca, client_auth="required"),
        **ssl_listener_properties(SASL_SSL_LISTENER, pki.broker_keystore),
        **sasl_listener_properties(SASL_SSL_LISTENER, ["SCRAM-SHA-512"]),
    }
    security = SecurityConfig(
        protocol="SASL_PLAINTEXT", broker_properties=properties,
        scram_users=[ScramUser("SCRAM-SHA-256", USER, PASSWORD), ScramUser("SCRAM-SHA-512", USER, PASSWORD)],
        listeners={SSL_LISTENER: "SSL", SASL_SSL_LISTENER: "SASL_SSL"})
    return KafkaCluster(1, security=security, directory=str(directory))
