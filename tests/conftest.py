"""Session fixtures: one local-mode SparkSession, one Kafka-protocol broker, unique topics.

SYNCLIB_TEST_BROKER picks the broker: `apache-kafka` (the default and the reference: a
single-node KRaft Apache Kafka 4.x from jvm/ivy.xml, `harness.apache_kafka`),
`apache-kafka-3.9`, `tansu` (the embedded default's broker) or `librdkafka-mock`
(librdkafka's mock cluster, tests/mock_cluster.py); KAFKA_BOOTSTRAP_SERVERS names a running
Kafka instead. A test that a broker cannot support is marked
`@pytest.mark.unsupported_on(BROKER, reason)` and skips there; `requires_kafka(reason)`
marks a test that only Apache Kafka can run.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Producer

from harness import apache_kafka, jvm
from harness.fault_proxy import FaultProxy
from harness.object_store import S3Server
from synclib.embedded.broker import EmbeddedBroker, TopicAdmin
from synclib.source.datasource import register
from tests import librdkafka, mock_cluster

EXTERNAL_BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
TANSU = "tansu"
APACHE_KAFKA = {"apache-kafka": apache_kafka.KAFKA_4, "apache-kafka-3.9": apache_kafka.KAFKA_3_9}
BROKERS = (*APACHE_KAFKA, TANSU, mock_cluster.NAME)
BROKER = "kafka" if EXTERNAL_BOOTSTRAP else os.environ.get("SYNCLIB_TEST_BROKER", "apache-kafka")
if BROKER not in (*BROKERS, "kafka"):
    raise pytest.UsageError(f"SYNCLIB_TEST_BROKER={BROKER!r}: expected one of {', '.join(BROKERS)}")
IS_APACHE_KAFKA = BROKER in APACHE_KAFKA or BROKER == "kafka"
# Python workers must use this interpreter (the one with synclib's dependencies).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# Every Spark JVM the tests start (the session's, each spark-submit's) reads tests/spark-conf:
# C1 JIT only, as the tests' brokers run (its spark-defaults.conf says why).
os.environ.setdefault("SPARK_CONF_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "spark-conf"))
logging.getLogger("kafka").setLevel(logging.WARNING)
TEST_GROUPS = ("unit", "broker", "spark", "e2e")  # directories under tests/, markers in pyproject.toml
# What a group may not use: the session broker (and what builds on it) or Spark.
FORBIDDEN_FIXTURES = {"unit": ("bootstrap_servers", "spark"), "broker": ("spark",)}


# The files that take longest (CI's --durations: minutes each, most of it spark-submit runs), in the
# order they start; the rest follow by group, tests/unit (seconds) last. With `--dist loadfile
# --no-loadscope-reorder` (pyproject.toml) a worker takes the next file in this order when it is
# almost done with its own: the long files run while the other worker has work too, and the
# short ones fill the end, so the two workers end close together.
LONGEST_FIRST = ("e2e/test_maintenance.py", "e2e/test_faults.py", "e2e/test_dead_letters.py", "e2e/test_two_runs.py",
                 "spark/test_interop.py", "e2e/test_job.py", "e2e/test_librdkafka.py", "e2e/test_failover.py",
                 "broker/test_operations.py")
GROUP_ORDER = TEST_GROUPS[::-1]  # the longest groups first


def _file_rank(item: pytest.Item) -> tuple[int, int]:
    file = f"{item.path.parent.name}/{item.path.name}"
    group = item.path.parent.name
    return (LONGEST_FIRST.index(file) if file in LONGEST_FIRST else len(LONGEST_FIRST),
            GROUP_ORDER.index(group) if group in GROUP_ORDER else len(GROUP_ORDER))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the files longest first (a stable sort: each file's tests stay together, in their
    order), mark every test with its directory's group, so `pytest -m unit` selects tests/unit, and
    refuse a test that needs more than its group provides."""
    items.sort(key=_file_rank)
    for item in items:
        group = item.path.parent.name
        if group in TEST_GROUPS:
            item.add_marker(group)
        used = [name for name in FORBIDDEN_FIXTURES.get(group, ()) if name in getattr(item, "fixturenames", ())]
        if used:
            raise pytest.UsageError(f"{item.nodeid} is in tests/{group} but uses {', '.join(used)}: "
                                    "move it to the group that provides it")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "unsupported_on(broker, reason): skip the test on that test broker")
    config.addinivalue_line("markers", "requires_kafka(gap): only Apache Kafka runs it; elsewhere skip naming the gap")


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker in item.iter_markers("unsupported_on"):
        if marker.args[0] == BROKER:
            pytest.skip(marker.args[1])
    for marker in item.iter_markers("requires_kafka"):
        if not IS_APACHE_KAFKA:
            pytest.skip(f"{BROKER}: {marker.args[0]} (runs on Apache Kafka)")


@pytest.fixture(scope="session")
def mock_kafka() -> Iterator[mock_cluster.MockCluster]:
    with mock_cluster.MockCluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def bootstrap_servers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if EXTERNAL_BOOTSTRAP:
        yield EXTERNAL_BOOTSTRAP
    elif BROKER == mock_cluster.NAME:
        yield request.getfixturevalue("mock_kafka").bootstrap_servers
    elif BROKER in APACHE_KAFKA:
        with apache_kafka.KafkaCluster(version=APACHE_KAFKA[BROKER],
                                       directory=str(tmp_path_factory.mktemp("kafka"))) as cluster:
            yield cluster.bootstrap_servers
    else:
        log = tmp_path_factory.mktemp("broker") / "tansu.log"
        with EmbeddedBroker(log_path=str(log)) as broker:
            yield broker.bootstrap_servers


@pytest.fixture(scope="session")
def admin(request: pytest.FixtureRequest, bootstrap_servers: str) -> Iterator[TopicAdmin]:
    topic_admin = (mock_cluster.MockTopicAdmin(request.getfixturevalue("mock_kafka"))
                   if BROKER == mock_cluster.NAME else TopicAdmin(bootstrap_servers))
    yield topic_admin
    topic_admin.close()


@pytest.fixture(scope="session")
def producer(bootstrap_servers: str) -> Iterator[Producer]:
    """librdkafka, lz4-compressed and batched, as production producers write. (kafka-python 3.0's
    producer spins a core once a topic it wrote to is deleted, as `new_topic` does after each test.)"""
    kafka = librdkafka.producer(bootstrap_servers, compression_type="lz4")
    yield kafka
    kafka.flush(librdkafka.DELIVERY_TIMEOUT_S)


_topic_counter = itertools.count()


@pytest.fixture
def new_topic(admin: TopicAdmin) -> Iterator[Callable[..., str]]:
    """Create uniquely named topics for one test; deleted afterwards except on Tansu (memory only)."""
    created: list[str] = []

    def create(prefix: str = "t", partitions: int = 1) -> str:
        name = f"{prefix}-{next(_topic_counter)}-{uuid.uuid4().hex[:8]}"
        admin.create(name, partitions)
        created.append(name)
        return name

    yield create
    if BROKER != TANSU and created:
        admin.delete(created)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One local-mode SparkSession for the whole test session, with the source registered,
    Delta's writer and reader (delta-spark), S3A and Spark's own Kafka source on the classpath."""
    from pyspark.sql import SparkSession

    from synclib.app.session import with_session_defaults

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    builder = with_session_defaults(SparkSession.builder)  # as the job's own session
    for key, value in jvm.DELTA_SESSION_CONF.items():
        builder = builder.config(key, value)
    session = (
        builder.master("local[2]")
        .config("spark.jars", ",".join(jvm.jars(jvm.DELTA) + jvm.jars(jvm.SPARK_KAFKA) + jvm.jars(jvm.S3A)))
        .appName("synclib-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={warehouse}")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """S3Proxy on a free loopback port for the whole session (harness/object_store.py)."""
    with S3Server(tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture
def faulty_s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[S3Server, FaultProxy]]:
    """The session's S3 server behind a fault-injecting proxy (harness/fault_proxy.py), this process's
    `AWS_*` variables pointing at the proxy with a short retry deadline (5 s): the server as the
    clients reach it, and the proxy."""
    from synclib.settings.storage import S3Config

    with FaultProxy(s3_server.port) as proxy:
        behind = s3_server.behind(proxy.port)
        for name, value in S3Config(**behind.storage_settings(), retry_deadline="5s").environment().items():
            monkeypatch.setenv(name, value)
        yield behind, proxy


@pytest.fixture
def s3(s3_server: S3Server, spark):  # type: ignore[no-untyped-def]
    """The session's S3 server, configured for the Spark session as the job configures `storage.s3`;
    again for each test, since a test may set and unset `AWS_*` in this process (`monkeypatch`)."""
    from synclib.app.session import use_storage
    from synclib.settings.storage import S3Config

    use_storage(spark, S3Config(**s3_server.storage_settings()))
    # PySpark gives a data source the session's environment as it is when the source is registered:
    # registered again, the source's planner (a Python process Spark starts) reaches the server too,
    # as in the job, which sets its storage before it registers the source.
    register(spark)
    return s3_server
