"""The job's and the status command's Kafka check before anything else starts, with the job's
settings (`synclib.kafka.preflight` does the checking)."""

from __future__ import annotations

from synclib.kafka.preflight import check_kafka
from synclib.settings import ForwarderConfig
from synclib.settings.kafka import kafka_client_config


def check_job_kafka(config: ForwarderConfig, bootstrap_servers: str | None = None,
                    timeout_s: float | None = None) -> None:
    """Raise `KafkaUnavailable` (one line) unless the brokers answer with the job's security
    settings within `kafka.connect_timeout` and the topics it names exist: the subscribed or
    assigned topics and, with `remote_offsets: commit_log`, the commit-log topic."""
    source = config.source
    setting = "source.subscribe" if source.subscribe is not None else "source.assign"
    topics = {topic: setting for topic in source.topics}
    if source.remote_offsets == "commit_log" and source.commit_log_topic:
        topics[source.commit_log_topic] = "source.commit_log_topic"
    client = kafka_client_config({"kafka.bootstrap.servers": bootstrap_servers or config.kafka.bootstrap_servers,
                                  **config.kafka.client_options()})
    check_kafka(client, topics, config.kafka.connect_timeout if timeout_s is None else timeout_s)
