"""Checks of the Core HTTP surface."""

KNOWLEDGE_CONFORMANCE_SUITE = True
