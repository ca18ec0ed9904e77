"""Avro on every topic: the single-object codec, and the hand-spliced wire format of the hot path."""
