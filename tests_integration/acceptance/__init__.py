"""Acceptance suite for the whole specification (issue 7)."""
