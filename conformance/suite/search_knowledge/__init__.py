"""Checks of the ``search_knowledge`` MCP tool of seed 003."""

KNOWLEDGE_CONFORMANCE_SUITE = True
