"""Where engine configs and vLLM's interpreter live by default. A module of its own, without
pydantic, so that the command line's option defaults cost nothing to import."""

from pathlib import Path

DEFAULT_ENGINES_DIR = Path(".specledger/engines")
DEFAULT_VLLM_PYTHON = Path(".venv-vllm/bin/python")
