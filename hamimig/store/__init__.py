"""Durable node state: ownership records, intents, CDI specs and queues, the node lock."""
