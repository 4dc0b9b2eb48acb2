"""blindcore: an independent, spec-only Core for the agent knowledge search/read contract (seeds 000 and 003) and its MCP servers."""
__version__ = "0.2.0"
