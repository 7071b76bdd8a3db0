"""Adapter: the outbox relay's events on NATS JetStream, de-duplicated by the broker."""

from orderflow_nats.sink import NatsSink, StreamMismatch, covers, event_body, redacted

__all__ = ["NatsSink", "StreamMismatch", "covers", "event_body", "redacted"]
