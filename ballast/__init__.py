"""Ballast: Kafka-centric stream processing that stays balanced under key skew and drift.

This package is the library, organised by concern so that an import name says where its file is
(``ballast.kafka.admin`` is ``ballast/kafka/admin.py``); the deployable services that use it live
in the top-level ``services`` package, the Spark side in ``spark_jobs``. The library never imports
a service; only the ``ballast`` command (:mod:`ballast.cli`) composes them.
"""

__version__ = "0.1.0"
