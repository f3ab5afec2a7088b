"""The command line starts at once: importing it, and rendering any of its help pages, loads
none of the heavy libraries; only the commands that need them do (issue 28). Not timed:
bench/cli_start.py measures the time."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli_pages import HEAVY

ROOT = Path(__file__).resolve().parents[1]
TYPER_LOADS = ("pydantic",)
"""Typer itself (0.29) coerces option values through pydantic's TypeAdapter, so parsing any
command with options loads pydantic; importing the command line must not."""


def cli_pages(*args: str, columns: int = 100) -> dict[str, Any]:
    """``python -m tests.cli_pages ARGS`` in a fresh interpreter; its JSON report."""
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.cli_pages", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_importing_the_cli_loads_no_heavy_library() -> None:
    assert cli_pages("--import-only")["import"] == []


def test_the_check_sees_a_heavy_import() -> None:
    """The same probe on a module that needs SQLAlchemy and httpx at import finds them."""
    loaded = cli_pages("app.cli.demo_serving", "--import-only")["import"]
    assert {"sqlalchemy", "httpx"} <= set(loaded), loaded


@pytest.fixture(scope="module")
def pages() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = cli_pages()["pages"]
    return found


def test_every_help_page_renders_without_a_heavy_library(pages: list[dict[str, Any]]) -> None:
    """Each page in turn (the root, ``costs``, ``ledger``, ... every group and command): the
    heavy libraries loaded by the time it was rendered, beyond Typer's own."""
    assert len(pages) > 60
    assert all(page["exit_code"] == 0 for page in pages)
    loaded = {
        " ".join(["specledger", *page["path"]]): sorted(set(page["heavy"]) - set(TYPER_LOADS))
        for page in pages
    }
    assert {name: heavy for name, heavy in loaded.items() if heavy} == {}


def test_the_heavy_list_names_what_commands_import() -> None:
    """The list is not vacuous: the libraries the commands use are on it."""
    assert {"sqlalchemy", "pandas", "pyarrow", "fastapi", "httpx", "scipy", "duckdb"} <= set(HEAVY)
