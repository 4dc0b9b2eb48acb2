"""The client (SDK) and host transport rules: each registered once, by its catalogue ID (see conformance.common.rules).

Written by tools/generate_rules.py from schemas/requirements.yaml: add a requirement there and
run it; this file is not edited by hand."""

from conformance.common.rules import rule

DSH_001 = rule("DSH-001")
DSH_002 = rule("DSH-002")
DSH_003 = rule("DSH-003")
DSH_004 = rule("DSH-004")
DSH_005 = rule("DSH-005")
HOST_001 = rule("HOST-001")
HOST_002 = rule("HOST-002")
HOST_003 = rule("HOST-003")
HOST_004 = rule("HOST-004")
HOST_005 = rule("HOST-005")
HOST_006 = rule("HOST-006")
MCP_003 = rule("MCP-003")
MCP_007 = rule("MCP-007")
NEG_001 = rule("NEG-001")
NEG_002 = rule("NEG-002")
NEG_003 = rule("NEG-003")
NEG_004 = rule("NEG-004")
READ_012 = rule("READ-012")
READ_017 = rule("READ-017")
READ_018 = rule("READ-018")
READ_021 = rule("READ-021")
REF_010 = rule("REF-010")
REF_013 = rule("REF-013")
SRCH_012 = rule("SRCH-012")
TRUST_001 = rule("TRUST-001")
TURN_001 = rule("TURN-001")
TURN_002 = rule("TURN-002")
TURN_005 = rule("TURN-005")
TURN_009 = rule("TURN-009")
TURN_010 = rule("TURN-010")
TURN_014 = rule("TURN-014")
