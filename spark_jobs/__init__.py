"""The Spark side: PySpark Structured Streaming jobs and their session wiring."""
