"""A deployment: its topics (the layout) and the genesis of its control log, created as one step."""
