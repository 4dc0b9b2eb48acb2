"""The conformance tests. Each names the requirement IDs it verifies."""
