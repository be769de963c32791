"""Before Spark starts: can the job reach Kafka with its settings, and do its topics exist?

`check_kafka` connects to each bootstrap server as the job's clients will (TCP, then TLS with
the configured CA, client certificate and hostname check, then Kafka with SASL), and looks
the needed topics up. A failure raises `KafkaUnavailable` whose message is one line naming
the broker, the security protocol and SASL mechanism, the cause and the setting to check,
never a secret, e.g. `cannot reach Kafka at 127.0.0.1:1 (connection refused) after 10s;
check kafka.bootstrap_servers`. A refused or unanswered connection is retried until the
deadline (a broker may be restarting); a certificate or a credential the broker rejects is
not. The clients' own log lines and tracebacks go to DEBUG only.
"""

from __future__ import annotations

import logging
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kafka import KafkaAdminClient
from kafka.errors import KafkaError

from synclib.kafka.client_config import for_admin

logger = logging.getLogger(__name__)

SSL_PROTOCOLS = ("SSL", "SASL_SSL")
DEFAULT_CONNECT_TIMEOUT_S = 10.0
_LISTED_TOPICS = 20
# Kafka's error codes for DescribeTopics answers.
_UNKNOWN_TOPIC, _TOPIC_AUTHORIZATION_FAILED = 3, 29


class KafkaUnavailable(RuntimeError):
    """Kafka cannot be used with these settings; the message is one line for the operator."""


@dataclass(frozen=True)
class _Failure:
    server: str
    cause: str
    hint: str
    final: bool  # retrying cannot help (a certificate, a credential)


def describe_security(config: Mapping[str, Any]) -> str:
    """`SASL_SSL, SCRAM-SHA-512 as user 'x'` or `PLAINTEXT`: what the client presents, no secret."""
    protocol = str(config.get("security_protocol", "PLAINTEXT"))
    if protocol.startswith("SASL_"):
        return f"{protocol}, {config.get('sasl_mechanism')} as user {config.get('sasl_plain_username')!r}"
    return protocol


def check_kafka(config: Mapping[str, Any], topics: Mapping[str, str] | None = None,
                timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> None:
    """Raise `KafkaUnavailable` unless a bootstrap server of `config` (kafka-python kwargs) answers
    with these security settings within `timeout_s` and every topic of `topics` (name -> the
    setting that names it) exists."""
    servers = list(config.get("bootstrap_servers") or [])
    started = time.monotonic()
    deadline = started + timeout_s
    failures = _reach(config, servers, deadline)
    if failures is not None:
        raise _unavailable(failures, config, timeout_s)
    admin = _admin(config, servers, deadline, started)
    try:
        if topics:
            _check_topics(admin, topics, ",".join(servers))
    finally:
        admin.close()


def _reach(config: Mapping[str, Any], servers: Sequence[str], deadline: float) -> list[_Failure] | None:
    """None once a server accepts TCP (and TLS); else why none did, at the deadline or at once
    when every failure is final."""
    pause_s = 0.2
    while True:
        failures = []
        for server in servers:
            failure = _probe(config, server, max(0.5, min(5.0, deadline - time.monotonic())))
            if failure is None:
                return None
            failures.append(failure)
        if all(f.final for f in failures) or time.monotonic() + pause_s > deadline:
            return failures
        time.sleep(pause_s)
        pause_s = min(1.0, pause_s * 2)


def _probe(config: Mapping[str, Any], server: str, timeout_s: float) -> _Failure | None:
    host, _, port_text = server.rpartition(":")
    host = host.strip("[]")
    check = "check kafka.bootstrap_servers"
    try:
        port = int(port_text)
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except ValueError:
        return _Failure(server, "not host:port", check, True)
    except socket.gaierror as exc:
        return _Failure(server, f"cannot resolve {host!r}: {exc.strerror}", check, False)
    except ConnectionRefusedError:
        return _Failure(server, "connection refused", check, False)
    except TimeoutError:
        return _Failure(server, f"no answer within {timeout_s:.0f}s", check, False)
    except OSError as exc:
        return _Failure(server, exc.strerror or type(exc).__name__, check, False)
    with sock:
        if str(config.get("security_protocol", "PLAINTEXT")) not in SSL_PROTOCOLS:
            return None
        try:
            context = _ssl_context(config)
        except (OSError, ssl.SSLError) as exc:
            return _Failure(server, f"cannot load the TLS files: {_ssl_reason(exc)}",
                            "check kafka.security.ssl_cafile, ssl_certfile, ssl_keyfile and ssl_password", True)
        try:
            with context.wrap_socket(sock, server_hostname=host):
                return None
        except ssl.SSLCertVerificationError as exc:
            if exc.verify_code == 62:  # X509_V_ERR_HOSTNAME_MISMATCH
                return _Failure(server, f"the broker's certificate does not name {host!r} ({exc.verify_message})",
                                "connect by a name the certificate holds, or set "
                                "kafka.security.ssl_check_hostname: false", True)
            return _Failure(server, f"the broker's certificate is not trusted ({exc.verify_message})",
                            "check kafka.security.ssl_cafile", True)
        except ssl.SSLError as exc:
            return _Failure(server, f"TLS handshake failed ({_ssl_reason(exc)})",
                            "check kafka.security (protocol and TLS files) against the broker's listener", True)
        except OSError as exc:
            return _Failure(server, f"TLS handshake failed ({exc.strerror or type(exc).__name__})",
                            "check kafka.security.protocol against the broker's listener", True)


def _ssl_context(config: Mapping[str, Any]) -> ssl.SSLContext:
    """The TLS context kafka-python builds from the same settings."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = bool(config.get("ssl_check_hostname", True))
    if config.get("ssl_cafile"):
        context.load_verify_locations(config["ssl_cafile"])
    else:
        context.load_default_certs()
    if config.get("ssl_certfile"):
        context.load_cert_chain(config["ssl_certfile"], config.get("ssl_keyfile"), config.get("ssl_password"))
    return context


def _ssl_reason(exc: OSError) -> str:
    return str(getattr(exc, "reason", None) or exc.strerror or type(exc).__name__)


def _unavailable(failures: Sequence[_Failure], config: Mapping[str, Any], timeout_s: float) -> KafkaUnavailable:
    protocol = describe_security(config)
    over = "" if protocol == "PLAINTEXT" else f" over {protocol}"
    where = ",".join(f.server for f in failures)
    causes = "; ".join(f"{f.server}: {f.cause}" for f in failures) if len({f.cause for f in failures}) > 1 \
        else failures[0].cause
    waited = "" if all(f.final for f in failures) else f" after {timeout_s:g}s"
    return KafkaUnavailable(f"cannot reach Kafka at {where}{over} ({causes}){waited}; {failures[0].hint}")


class _ClientErrors(logging.Handler):
    """Collects the exceptions kafka-python logs while it bootstraps (its only report of why).

    A broker that rejects SCRAM credentials may close the connection instead of answering:
    with a SASL protocol, connections lost after the broker answered ApiVersions (so TCP, TLS
    and the Kafka protocol work) count as dropped during authentication."""

    def __init__(self, sasl: bool) -> None:
        super().__init__(logging.DEBUG)
        self.errors: list[BaseException] = []
        self.final = threading.Event()
        self._sasl = sasl
        self._answered = False
        self.dropped_in_sasl = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "version identified" in str(record.msg):
            self._answered = True
        args = record.args if isinstance(record.args, tuple) else ()
        for arg in args:
            if isinstance(arg, BaseException):
                self.errors.append(arg)
                if _is_authentication(arg):
                    self.final.set()
                elif self._sasl and self._answered and "Bootstrap connection" in str(record.msg):
                    self.dropped_in_sasl += 1
                    if self.dropped_in_sasl >= 2:
                        self.final.set()


def _is_authentication(exc: BaseException) -> bool:
    return "Authentication" in type(exc).__name__ or "Authorization" in type(exc).__name__


@contextmanager
def _quiet_clients(sasl: bool) -> Iterator[_ClientErrors]:
    """Route kafka-python's log records to a collector; they reach the log at DEBUG only. After
    a failure they stay there: the client that failed may go on retrying until it times out."""
    client_logger = logging.getLogger("kafka")
    collector = _ClientErrors(sasl)
    saved = client_logger.level, client_logger.propagate
    disabled = logging.root.manager.disable  # the status command disables logging: the records are needed
    logging.disable(logging.NOTSET)
    client_logger.addHandler(collector)
    client_logger.setLevel(min(saved[0] or logging.INFO, logging.INFO))
    client_logger.propagate = logger.isEnabledFor(logging.DEBUG)
    yield collector
    client_logger.removeHandler(collector)
    client_logger.setLevel(saved[0])
    client_logger.propagate = saved[1]
    logging.disable(disabled)


def _admin(config: Mapping[str, Any], servers: Sequence[str], deadline: float, started: float) -> KafkaAdminClient:
    """An admin client past bootstrap (API versions, SASL, metadata), or `KafkaUnavailable`."""
    result: dict[str, Any] = {}
    done = threading.Event()
    timeout_ms = int(max(1.0, deadline - time.monotonic()) * 1000)

    def connect() -> None:
        try:
            result["admin"] = KafkaAdminClient(**{**for_admin(config), "client_id": "synclib-preflight",
                                                  "bootstrap_timeout_ms": timeout_ms})
        except Exception as exc:  # noqa: BLE001 - reported below
            result["error"] = exc
        finally:
            done.set()

    with _quiet_clients(str(config.get("security_protocol", "")).startswith("SASL_")) as collector:
        # A thread, so that a rejected credential ends the check at once instead of being
        # retried by the client until its bootstrap timeout.
        threading.Thread(target=connect, name="synclib-preflight", daemon=True).start()
        while not done.wait(0.05) and not collector.final.is_set():
            pass
        if "admin" in result:
            return result["admin"]
        raise _rejected(config, servers, collector, result.get("error"), time.monotonic() - started)


def _rejected(config: Mapping[str, Any], servers: Sequence[str], collector: _ClientErrors,
              error: BaseException | None, elapsed_s: float) -> KafkaUnavailable:
    where = ",".join(servers)
    protocol = describe_security(config)
    errors = collector.errors
    logger.debug("Kafka client errors: %r", [*errors, error])
    hint = "check kafka.security.username and password (and the user's credentials on the brokers)"
    rejected = next((e for e in errors if _is_authentication(e)), None)
    if rejected is not None:
        return KafkaUnavailable(f"Kafka at {where} refused the connection over {protocol}: {_one_line(rejected)}; "
                                f"{hint}")
    if collector.dropped_in_sasl >= 2:
        return KafkaUnavailable(f"Kafka at {where} closed the connection during SASL authentication over "
                                f"{protocol} (a wrong password, an unknown user, or a listener without this "
                                f"mechanism); check kafka.security.username, password, sasl_mechanism and protocol")
    last = errors[-1] if errors else error
    return KafkaUnavailable(
        f"cannot reach Kafka at {where} over {protocol}: no Kafka answer after {elapsed_s:.0f}s "
        f"({_one_line(last) if last else 'no error reported'}); "
        "check kafka.bootstrap_servers and kafka.security.protocol")


def _one_line(exc: BaseException) -> str:
    """`Name: message` once, without kafka-python's repeated `[Error N] Name:` prefixes."""
    name = type(exc).__name__
    text = " ".join(str(exc).split())
    text = re.sub(rf"^(?:(?:\[Error \d+\] )?{name}:? ?)+", "", text)
    return f"{name}: {text}" if text else name


def _check_topics(admin: KafkaAdminClient, topics: Mapping[str, str], where: str) -> None:
    try:
        described = admin.describe_topics(sorted(topics))
    except KafkaError as exc:
        raise KafkaUnavailable(f"Kafka at {where} did not describe topics {sorted(topics)}: {_one_line(exc)}") from None
    errors = {topic["name"]: topic["error_code"] for topic in described}
    for name, setting in sorted(topics.items(), key=lambda item: item[1]):
        code = errors.get(name, _UNKNOWN_TOPIC)
        if code == 0:
            continue
        if code == _TOPIC_AUTHORIZATION_FAILED:
            raise KafkaUnavailable(f"topic {name!r} ({setting}) on Kafka at {where}: not authorized to describe it; "
                                   "grant the user Describe and Read on it")
        existing = sorted(t for t in admin.list_topics() if not t.startswith("__"))
        shown = ", ".join(existing[:_LISTED_TOPICS]) + (f" and {len(existing) - _LISTED_TOPICS} more"
                                                       if len(existing) > _LISTED_TOPICS else "")
        raise KafkaUnavailable(f"topic {name!r} ({setting}) does not exist on Kafka at {where}; "
                               f"topics there: {shown or 'none'}")
