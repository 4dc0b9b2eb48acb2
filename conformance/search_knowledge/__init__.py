"""The ``search_knowledge`` MCP tool of seed 003: reading its answers, and its stateful model."""
