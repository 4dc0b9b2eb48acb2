"""The MCP surfaces: where the endpoints are, and a synchronous client session on the ``mcp`` SDK."""
