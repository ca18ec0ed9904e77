"""Per-key stateful processors for the Spark job: pure numpy, no Spark or Kafka here.

The worker engine calls them (see :mod:`spark_jobs.processors.interface` for the contract); the
package keeps them free of Spark so they can be tested, timed and reasoned about on their own.
"""
