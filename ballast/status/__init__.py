"""``ballast status``: one deployment's state as its services publish it (metrics topic, control log)."""
