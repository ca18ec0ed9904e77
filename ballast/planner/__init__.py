"""Rebalance planners: pure functions from key statistics and a routing table to a new table."""
