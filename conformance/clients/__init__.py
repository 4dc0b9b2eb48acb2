"""Client and host conformance through a harness protocol (the bowtie pattern, for clients).

The client under test ships a small harness program that speaks JSON lines
(``schemas/harness-protocol.schema.json``); ``knowledge-conformance client --harness CMD``
spawns it against a Core with the control extension (by default a served bundled
simulator, started as a subprocess: this package never imports it) and judges both
what the client answered and what reached the wire (GET /transcript).
"""

PROTOCOL = "knowledge-harness.v1"
