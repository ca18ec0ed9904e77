"""Talking to Kafka: client configuration and factories, admin calls, the topic layout, reading back."""
