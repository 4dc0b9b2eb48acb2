"""Checks of the MCP surfaces of seed 000."""

KNOWLEDGE_CONFORMANCE_SUITE = True
