"""The conformance tests. Each names the requirement IDs it verifies."""

KNOWLEDGE_CONFORMANCE_SUITE = True  # the plugin holds every test of a package that sets this to its rules
