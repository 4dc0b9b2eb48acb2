"""The rules of the ``search_knowledge`` MCP tool (seed 003): each registered once, by its catalogue ID (see conformance.common.rules).

Written by tools/generate_rules.py from schemas/requirements.yaml: add a requirement there and
run it; this file is not edited by hand."""

from conformance.common.rules import rule

SK_001 = rule("SK-001")
SK_002 = rule("SK-002")
SK_003 = rule("SK-003")
SK_004 = rule("SK-004")
SK_005 = rule("SK-005")
SK_006 = rule("SK-006")
SK_007 = rule("SK-007")
SK_008 = rule("SK-008")
SK_009 = rule("SK-009")
SK_010 = rule("SK-010")
SK_011 = rule("SK-011")
SK_012 = rule("SK-012")
SK_013 = rule("SK-013")
SK_014 = rule("SK-014")
SK_015 = rule("SK-015")
SK_016 = rule("SK-016")
SK_017 = rule("SK-017")
SK_018 = rule("SK-018")
SK_019 = rule("SK-019")
SK_020 = rule("SK-020")
SK_021 = rule("SK-021")
SK_022 = rule("SK-022")
SK_023 = rule("SK-023")
SK_024 = rule("SK-024")
SK_025 = rule("SK-025")
SK_026 = rule("SK-026")
SK_027 = rule("SK-027")
SK_028 = rule("SK-028")
SK_029 = rule("SK-029")
SK_030 = rule("SK-030")
