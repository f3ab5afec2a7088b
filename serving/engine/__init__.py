"""The vLLM engine: its config, the launcher (the only code that knows vLLM's flags), model
preparation, and writing a fitted schedule into an engine config.
"""
