"""The client checks: each drives the client through its harness into one branch of seed 000
and judges what the client answered and what reached the wire (the Core's transcript)."""

KNOWLEDGE_CONFORMANCE_SUITE = True
