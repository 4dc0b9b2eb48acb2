"""Conformance suite for the agent knowledge search/read contract.

Runs against the bundled simulator (found through the
``knowledge_conformance.targets`` entry point, never imported) or any live Core
(``pytest --pyargs conformance.suite --target=URL``). Its model of the contract
is its own.
"""

__version__ = "0.1.0"
