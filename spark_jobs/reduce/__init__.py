"""The stateful reduce: per-worker keyed state that follows the routing table (docs/reduce.md)."""
