"""SpecLedger: cost allocation and breakeven analytics for speculative LLM serving."""

__version__ = "0.1.0"
