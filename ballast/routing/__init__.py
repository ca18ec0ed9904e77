"""The routing function F(k): Kafka's murmur2 partitioner and the routing table of pinned keys."""
