"""Judging real traffic: ``knowledge-conformance observe``.

A reverse proxy (``proxy``) or a recording (``har``) hands each exchange it saw to a judge
(``judge``) through a bounded queue (``pipeline``), so forwarding never waits on judging. The
judge reuses the suite's checks (``conformance.server.checks``) on each exchange and follows
sequences across them (``traffic``: references, cursors, runs, turns) for the Core's rules
(``server_rules``, ``sequence_rules``) and the client's (``client_rules``). Every rule ends held,
violated or not observed (``tally``); ``report`` writes the suite's reports with the scope
"observed traffic". Passive observation never verifies a rule: held means only that no
violation was seen in this traffic.
"""
