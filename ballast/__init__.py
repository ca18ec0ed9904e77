"""Ballast: Kafka-centric stream processing that stays balanced under key skew and drift.

Layout: this package (``services/common``) holds the code every service shares (config, topics,
Avro codec, local stack); each service lives in its own folder and imports as ``ballast.<service>``.
"""

__version__ = "0.1.0"
