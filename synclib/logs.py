"""The one logging setup of synclib's processes: the format on stderr, and the chatty clients
(kafka-python, py4j) kept at warnings at least."""

from __future__ import annotations

import logging
import sys

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str | int, clients_at_least: int = logging.WARNING) -> None:
    """Log at `level` to stderr in synclib's format; the Kafka client's and py4j's loggers at
    `clients_at_least` or above."""
    number = logging.getLevelName(level) if isinstance(level, str) else level
    logging.basicConfig(level=number, stream=sys.stderr, format=FORMAT)
    for client in ("kafka", "py4j"):
        logging.getLogger(client).setLevel(max(clients_at_least, number))
