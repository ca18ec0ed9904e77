"""Ballast's deployable services; each talks to the others only through Kafka topics."""
