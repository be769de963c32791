"""synclib: forward Kafka events only after a leader consumer group has committed them."""

__version__ = "0.1.0"
