"""riverlog: a partitioned, replicated commit log that speaks the Apache Kafka protocol."""

__version__ = "0.1.0"
