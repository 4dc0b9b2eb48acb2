"""blindcore: an independent, spec-only Core for the agent knowledge search/read contract (seed 000)."""
__version__ = "0.1.0"
