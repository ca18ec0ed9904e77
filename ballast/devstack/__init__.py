"""The local development stack: Kafka brokers (KRaft) and Kafka Connect as plain processes on loopback."""
