"""Run as ``python -m tests.cli_pages [--import-only]`` in a fresh interpreter: imports the
command line, renders every help page (at the width in COLUMNS) and prints JSON: the heavy
libraries the import loaded, and per page its text and the heavy libraries loaded by then.
Used by tests/test_cli_startup.py and tests/test_cli_help.py."""

import json
import sys
from typing import Any

HEAVY = (
    "alembic",
    "anyio",
    "boto3",
    "botocore",
    "duckdb",
    "fastapi",
    "google.protobuf",
    "httpx",
    "ibis",
    "numpy",
    "opentelemetry",
    "pandas",
    "plotly",
    "prometheus_client",
    "psycopg",
    "pyarrow",
    "pydantic",
    "pydantic_settings",
    "pyspark",
    "scipy",
    "sqlalchemy",
    "sqlglot",
    "starlette",
    "uvicorn",
    "yaml",
)
"""Libraries that cost tens to hundreds of milliseconds to import: only commands load them."""


def heavy_loaded() -> list[str]:
    return [name for name in HEAVY if name in sys.modules]


def walk(command: Any, path: list[str]) -> list[tuple[list[str], Any]]:
    """Every (path, command) below ``command``, groups included (Typer's Click objects)."""
    found = [(path, command)]
    for name, sub in getattr(command, "commands", {}).items():
        found += walk(sub, [*path, name])
    return found


def main(module: str, import_only: bool) -> None:
    __import__(module)
    report: dict[str, Any] = {"import": heavy_loaded(), "pages": []}
    if not import_only:
        from typer.main import get_command
        from typer.testing import CliRunner

        from app.cli import app

        runner = CliRunner()
        for path, command in walk(get_command(app), []):
            result = runner.invoke(app, [*path, "--help"])
            report["pages"].append(
                {
                    "path": path,
                    "help": command.help or "",
                    "exit_code": result.exit_code,
                    "output": result.output,
                    "heavy": heavy_loaded(),
                }
            )
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    args = sys.argv[1:]
    main(
        next((a for a in args if not a.startswith("--")), "app.cli"),
        import_only="--import-only" in args,
    )
