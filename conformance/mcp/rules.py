"""The MCP surfaces' rules (the Agent Session path and the job path): each registered once, by its catalogue ID (see conformance.common.rules).

Written by tools/generate_rules.py from schemas/requirements.yaml: add a requirement there and
run it; this file is not edited by hand."""

from conformance.common.rules import rule

MCP_001 = rule("MCP-001")
MCP_002 = rule("MCP-002")
MCP_004 = rule("MCP-004")
MCP_005 = rule("MCP-005")
MCP_006 = rule("MCP-006")
MCP_008 = rule("MCP-008")
MCP_009 = rule("MCP-009")
MCP_010 = rule("MCP-010")
MCP_011 = rule("MCP-011")
MCP_012 = rule("MCP-012")
MCP_013 = rule("MCP-013")
