"""The simulator's MCP servers: the Agent Session tools, the job path, and their SDK servers."""
