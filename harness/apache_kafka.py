"""Apache Kafka itself on loopback: a KRaft cluster of one or more nodes from the jars of `jvm/fetch`.

Each node is a combined broker and controller (`process.roles=broker,controller`) with its own
free ports and log directory, formatted with `kafka.tools.StorageTool` and run as `kafka.Kafka`.
Three nodes keep a controller quorum with one of them down, so a node can be killed (SIGKILL)
and restarted under a running job. Clients connect to the `CLIENT` listener, whose security
protocol is chosen per cluster (`SecurityConfig`), and more client listeners with other
protocols can be added (`SecurityConfig.listeners`, reached through `bootstrap_for`); brokers
talk to each other on a PLAINTEXT `INTERNAL` listener and to the quorum on `CONTROLLER`, so a
client's security settings are what a test exercises. `ssl_listener_properties` and
`sasl_listener_properties` build a listener's broker settings (PEM key and trust stores; SASL
mechanisms with PLAIN users in the JAAS config, SCRAM users added at format time).
Used by the tests (the suite's reference broker) and the benchmark;
the embedded default keeps Tansu (README, "Tests").
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.jvm import jars
from synclib.embedded.broker import LOOPBACK, free_port, tied_to_this_process, wait_for_port

logger = logging.getLogger(__name__)

KAFKA_4 = "kafka"  # jvm/ivy.xml configurations
KAFKA_3_9 = "kafka-3.9"
VERSIONS = (KAFKA_4, KAFKA_3_9)


@dataclass(frozen=True)
class ScramUser:
    mechanism: str  # SCRAM-SHA-256 or SCRAM-SHA-512
    name: str
    password: str


@dataclass(frozen=True)
class SecurityConfig:
    """The CLIENT listener's protocol and the broker settings it needs (keystores, SASL)."""

    protocol: str = "PLAINTEXT"
    broker_properties: Mapping[str, str] = field(default_factory=dict)
    scram_users: Sequence[ScramUser] = ()
    # More client listeners: name (upper case, e.g. "SSL_CLIENT") -> security protocol.
    listeners: Mapping[str, str] = field(default_factory=dict)

    def client_listeners(self) -> dict[str, str]:
        return {CLIENT: self.protocol, **self.listeners}


CLIENT = "CLIENT"


def ssl_listener_properties(listener: str, keystore_pem: str | Path, truststore_pem: str | Path | None = None,
                            client_auth: str = "none") -> dict[str, str]:
    """A listener's TLS settings from PEM files: `keystore_pem` holds the broker's private key
    (PKCS#8, unencrypted) followed by its certificate chain; `truststore_pem` the CAs that sign
    client certificates (needed with `client_auth` `required` or `requested`)."""
    prefix = f"listener.name.{listener.lower()}."
    properties = {prefix + "ssl.keystore.type": "PEM", prefix + "ssl.keystore.location": str(keystore_pem),
                  prefix + "ssl.client.auth": client_auth}
    if truststore_pem is not None:
        properties |= {prefix + "ssl.truststore.type": "PEM", prefix + "ssl.truststore.location": str(truststore_pem)}
    return properties


def sasl_listener_properties(listener: str, mechanisms: Sequence[str],
                             plain_users: Mapping[str, str] | None = None) -> dict[str, str]:
    """A listener's SASL settings: the enabled `mechanisms` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512),
    PLAIN's users (name -> password) in its JAAS config; SCRAM users are `SecurityConfig.scram_users`."""
    prefix = f"listener.name.{listener.lower()}."
    properties = {prefix + "sasl.enabled.mechanisms": ",".join(mechanisms)}
    for mechanism in mechanisms:
        if mechanism == "PLAIN":
            users = "".join(f' user_{name}="{password}"' for name, password in (plain_users or {}).items())
            jaas = f"org.apache.kafka.common.security.plain.PlainLoginModule required{users};"
        elif mechanism.startswith("SCRAM-"):
            jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        else:
            raise ValueError(f"unsupported SASL mechanism {mechanism!r}")
        properties[f"{prefix}{mechanism.lower()}.sasl.jaas.config"] = jaas
    return properties


_LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
"""
_LOG4J1 = """log4j.rootLogger={level}, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


_HANDED_OUT: set[int] = set()


def node_port() -> int:
    """A free loopback port for a node's listener, none handed out before in this process: a port
    found free is bound only when its node starts, so two asked in a row could be the same one."""
    while (port := free_port()) in _HANDED_OUT:
        pass
    _HANDED_OUT.add(port)
    return port


class KafkaNode:
    """One broker+controller process of a `KafkaCluster`."""

    def __init__(self, node_id: int, directory: Path, version: str) -> None:
        self.node_id = node_id
        self.port, self.internal_port, self.controller_port = node_port(), node_port(), node_port()
        self.listener_ports: dict[str, int] = {CLIENT: self.port}
        self.directory = directory
        self.log_path = directory / "server.log"
        self._version = version
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def address_of(self, listener: str) -> str:
        """host:port of one of the client listeners (`SecurityConfig.listeners`)."""
        return f"{LOOPBACK}:{self.listener_ports[listener]}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def properties(self, quorum: str, security: SecurityConfig, replication: int) -> dict[str, str]:
        min_isr = str(min(2, replication))
        protocols = security.client_listeners()
        for name in protocols:
            self.listener_ports.setdefault(name, node_port())
        clients = ",".join(f"{name}://{LOOPBACK}:{self.listener_ports[name]}" for name in protocols)
        return {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": quorum,
            "listeners": f"{clients},INTERNAL://{LOOPBACK}:{self.internal_port},"
                         f"CONTROLLER://{LOOPBACK}:{self.controller_port}",
            "advertised.listeners": f"{clients},INTERNAL://{LOOPBACK}:{self.internal_port}",
            "listener.security.protocol.map": ",".join(f"{name}:{protocol}" for name, protocol in protocols.items())
                                              + ",INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(self.directory / "data"),
            "num.partitions": "1",
            "default.replication.factor": str(replication),
            "offsets.topic.replication.factor": str(replication),
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": str(replication),
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": "4",
            "min.insync.replicas": min_isr if replication > 1 else "1",
            "group.initial.rebalance.delay.ms": "0",
            # Topics exist when a test or the job creates them: a client's metadata request must not
            # bring back a topic a test just deleted (as production clusters usually configure).
            "auto.create.topics.enable": "false",
            # Tests delete many topics and run the log cleaner on purpose: do it promptly.
            "file.delete.delay.ms": "1000",
            "log.cleaner.backoff.ms": "500",
            "log.segment.delete.delay.ms": "1000",
            "unclean.leader.election.enable": "false",
            **security.broker_properties,
        }

    def write_config(self, properties: Mapping[str, str]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "server.properties").write_text(
            "".join(f"{key}={value}\n" for key, value in properties.items()))
        level = os.environ.get("SYNCLIB_KAFKA_LOG_LEVEL", "WARN")
        template = _LOG4J1 if self._version == KAFKA_3_9 else _LOG4J2
        (self.directory / "log4j.properties").write_text(template.format(log=self.log_path, level=level))

    def _java(self, main: str, *args: str, heap: str = "512m") -> list[str]:
        java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
        logging_option = (f"-Dlog4j.configuration=file:{self.directory / 'log4j.properties'}"
                          if self._version == KAFKA_3_9
                          else f"-Dlog4j2.configurationFile={self.directory / 'log4j.properties'}")
        return [java, f"-Xmx{heap}", "-Xss1m", "-XX:+UseG1GC", "-XX:TieredStopAtLevel=1",
                "-Djava.awt.headless=true", logging_option,
                "-cp", os.pathsep.join(jars(self._version)), main, *args]

    def format(self, cluster_id: str, scram_users: Iterable[ScramUser]) -> None:
        command = self._java("kafka.tools.StorageTool", "format", "-t", cluster_id,
                             "-c", str(self.directory / "server.properties"), heap="256m")
        for user in scram_users:
            command += ["--add-scram", f"{user.mechanism}=[name={user.name},password={user.password}]"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"formatting Kafka node {self.node_id} failed: {result.stdout}{result.stderr}")

    def start(self) -> None:
        if self.running:
            return
        with open(self.directory / "stdout.log", "ab") as out:
            self._process = subprocess.Popen(
                tied_to_this_process(self._java("kafka.Kafka", str(self.directory / "server.properties"))),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def wait_ready(self, timeout_s: float) -> None:
        """Until every client listener accepts connections."""
        deadline = time.monotonic() + timeout_s
        try:
            for port in self.listener_ports.values():
                wait_for_port(LOOPBACK, port, max(0.5, deadline - time.monotonic()))
        except TimeoutError as exc:
            raise TimeoutError(f"Kafka node {self.node_id} did not open {self.address} in {timeout_s}s "
                               f"(log: {self.log_path})") from exc

    def kill(self) -> None:
        """SIGKILL, as a crashed machine: no controlled shutdown, nothing flushed."""
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()
            self._process = None

    def terminate(self) -> None:
        """SIGTERM: a controlled shutdown (leadership moves away first); `stop` waits for it."""
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGTERM)

    def stop(self, timeout_s: float = 30.0) -> None:
        if self._process is None:
            return
        self.terminate()
        try:
            self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
        self._process = None


def new_cluster_id() -> str:
    """A random Kafka cluster id (a base64url UUID) that does not start with '-': the storage
    tool would take such an id for an option (1 in 64 ids; Kafka's own Uuid.randomUuid skips them)."""
    while (cluster_id := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        pass
    return cluster_id


MEMORY_DIRECTORY = "/dev/shm"
MEMORY_DIRECTORY_BYTES = 2 << 30


def _memory_directory() -> str | None:
    """/dev/shm when it exists with room for a broker's logs; None (the temporary directory) otherwise."""
    try:
        free = shutil.disk_usage(MEMORY_DIRECTORY).free
    except OSError:
        free = 0
    if free >= MEMORY_DIRECTORY_BYTES:
        return MEMORY_DIRECTORY
    logger.warning("Apache Kafka's logs in the temporary directory: %s has %d MiB free", MEMORY_DIRECTORY, free >> 20)
    return None


class KafkaCluster:
    """A KRaft cluster of `nodes` combined broker+controller processes on loopback.

    `replication` (default: min(nodes, 3)) is the default replication factor of new topics and
    of Kafka's internal topics; `min.insync.replicas` is 2 when topics are replicated.
    `in_memory`: the log directories on /dev/shm when it has `MEMORY_DIRECTORY_BYTES` free (else
    the temporary directory, said in a log line), for the benchmark: on a virtual machine's disk
    the broker's first writes to a new topic's memory-mapped index files stall its produce
    requests (a new 1,024-partition topic: flushes of 8-13 s, the request handlers in
    `OffsetIndex.append`; on /dev/shm none), which is the disk's cost, not the job's.
    """

    def __init__(self, nodes: int = 1, *, version: str = KAFKA_4, security: SecurityConfig | None = None,
                 directory: str | None = None, replication: int | None = None, in_memory: bool = False) -> None:
        if version not in VERSIONS:
            raise ValueError(f"Kafka version must be one of {', '.join(VERSIONS)}, not {version!r}")
        self.version = version
        self.security = security or SecurityConfig()
        self.replication = replication or min(nodes, 3)
        self._owns_directory = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="synclib-kafka-",
                                                            dir=_memory_directory() if in_memory else None))
        self.nodes = [KafkaNode(i + 1, self.directory / f"node-{i + 1}", version) for i in range(nodes)]

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.address for node in self.nodes)

    def bootstrap_for(self, listener: str) -> str:
        """The bootstrap servers of another client listener (`SecurityConfig.listeners`)."""
        return ",".join(node.address_of(listener) for node in self.nodes)

    def node(self, node_id: int) -> KafkaNode:
        return self.nodes[node_id - 1]

    def start(self, timeout_s: float = 90.0) -> KafkaCluster:
        quorum = ",".join(f"{n.node_id}@{LOOPBACK}:{n.controller_port}" for n in self.nodes)
        cluster_id = new_cluster_id()
        started = time.monotonic()
        try:
            for node in self.nodes:
                node.write_config(node.properties(quorum, self.security, self.replication))
                node.format(cluster_id, self.security.scram_users)
            for node in self.nodes:
                node.start()
            for node in self.nodes:
                node.wait_ready(max(1.0, timeout_s - (time.monotonic() - started)))
        except BaseException:
            self.stop()
            raise
        logger.info("Apache Kafka (%s, %d node(s)) on %s after %.1fs", self.version, len(self.nodes),
                    self.bootstrap_servers, time.monotonic() - started)
        return self

    def stop(self) -> None:
        for node in self.nodes:  # all at once: a node waits for the quorum while it shuts down
            node.terminate()
        for node in self.nodes:
            node.stop(timeout_s=15.0)
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
