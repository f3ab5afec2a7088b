"""``specledger mcp`` as a real process, reached with the SDK's own clients: over stdio (the
key from SPECLEDGER_MCP_KEY or --key-file) and over streamable HTTP (the key in each
request's Authorization header), team-scoped, refusing bad arguments and bad keys clearly,
and never writing a key to its output."""

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.auth.service import revoke_key
from tests.mcp.conftest import Seeded, body, error_text, run_with

ROOT = Path(__file__).resolve().parents[2]
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
CLI = ["-c", "from app.cli import main; main()", "mcp"]


def child_env(db_url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "PYTHONPATH": str(ROOT),
        "SPECLEDGER_DATABASE_URL": db_url,
        "SPECLEDGER_DATA_DIR": str(tmp_path / "data"),
        **extra,
    }


def stdio(db_url: str, tmp_path: Path, *args: str, **env: str) -> tuple[Any, Path]:
    """The stdio transport to a fresh ``specledger mcp``, and the file its stderr goes to."""
    params = StdioServerParameters(
        command=sys.executable, args=[*CLI, *args], env=child_env(db_url, tmp_path, **env),
        cwd=str(ROOT),
    )  # fmt: skip
    log = tmp_path / "stderr.log"
    return stdio_client(params, errlog=log.open("w")), log


def test_stdio_team_key_reads_its_own_team_only(
    seeded: Seeded, db_url: str, tmp_path: Path
) -> None:
    transport, log = stdio(db_url, tmp_path, SPECLEDGER_MCP_KEY=seeded.keys.orchid)

    async def calls(session: Client) -> dict[str, Any]:
        listed = await session.list_tools()
        return {
            "tools": sorted(tool.name for tool in listed.tools),
            "who": await session.call_tool("whoami", {}),
            "costs": await session.call_tool("unit_costs", {"month": "2026-10"}),
            "other": await session.call_tool("unit_costs", {"month": "2026-10", "team": "walrus"}),
            "reconcile": await session.call_tool("reconciliation", {"month": "2026-10"}),
            "limit": await session.call_tool("unit_costs", {"month": "2026-10", "limit": 0}),
            "month": await session.call_tool("unit_costs", {"month": "Oct"}),
            "missing": await session.call_tool("allocation", {}),
            "nothing": await session.call_tool("breakeven", {}),
            "unknown": await session.call_tool("breakeven", {"deployment": "d9"}),
        }

    got = run_with(transport, calls)
    assert got["tools"] == ["allocation", "anomalies", "breakeven", "budgets", "reconciliation",
                            "sessions", "unit_costs", "waste", "whoami"]  # fmt: skip
    assert body(got["who"]) == {"key_name": "team orchid", "team": "orchid", "admin": False}
    assert {item["properties"]["team"] for item in body(got["costs"])["items"]} == {"orchid"}
    assert "forbidden: a team key can only read its own team's data" in error_text(got["other"])
    assert "forbidden: this endpoint needs an admin key" in error_text(got["reconcile"])
    limit = error_text(got["limit"])
    assert "limit" in limit
    assert "greater than or equal to 1" in limit
    assert "invalid_parameter: month:" in error_text(got["month"])
    assert "window" in error_text(got["missing"])
    assert "required" in error_text(got["missing"])
    assert "give exactly one of deployment and sweep_id" in error_text(got["nothing"])
    assert "'d9'" in error_text(got["unknown"])
    assert seeded.keys.orchid not in log.read_text()


def test_stdio_admin_key_from_a_key_file(seeded: Seeded, db_url: str, tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(seeded.keys.admin + "\n")
    transport, _ = stdio(db_url, tmp_path, "--key-file", str(key_file))

    async def calls(session: Client) -> tuple[Any, Any]:
        return (
            await session.call_tool("unit_costs", {"month": "2026-10"}),
            await session.call_tool("reconciliation", {"month": "2026-10"}),
        )

    costs, reconciled = run_with(transport, calls)
    assert {item["properties"]["team"] for item in body(costs)["items"]} >= {"orchid", "walrus"}
    assert body(reconciled)["month"] == "2026-10"


@pytest.mark.parametrize(
    ("env", "args", "says"),
    [
        ({}, [], "no API key: set SPECLEDGER_MCP_KEY or give --key-file"),
        ({"SPECLEDGER_MCP_KEY": "slk_" + "x" * 43}, [], "invalid or revoked API key"),
        ({}, ["--key-file", "/nonexistent/key"], "--key-file /nonexistent/key: cannot read it"),
        ({}, ["--http", "localhost"], "give HOST:PORT"),
        ({}, ["--http", "127.0.0.1:8765", "--key-file", "k"], "--key-file is for stdio"),
    ],
)
def test_a_server_without_a_usable_key_does_not_start(
    env: dict[str, str], args: list[str], says: str, engine: Engine, db_url: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, *CLI, *args],
        env={**os.environ, **child_env(db_url, tmp_path, **env)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr
    assert says in " ".join(done.stderr.split()), done.stderr
    assert "x" * 43 not in done.stderr + done.stdout


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture
def http_server(seeded: Seeded, db_url: str, tmp_path: Path) -> Iterator[str]:
    """``specledger mcp --http`` on a free port; its URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, *CLI, "--http", f"127.0.0.1:{port}"],
        env={**os.environ, **child_env(db_url, tmp_path)},
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, "specledger mcp --http exited"
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, "specledger mcp --http did not listen"
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)


def over_http(url: str, key: str, calls: Any) -> Any:
    async def main() -> Any:
        headers = {"Authorization": f"Bearer {key}"}
        async with (
            httpx2.AsyncClient(headers=headers) as http,
            Client(streamable_http_client(url, http_client=http)) as session,
        ):
            return await calls(session)

    import anyio

    return anyio.run(main)


def test_http_scopes_each_request_by_its_bearer_key(
    http_server: str, seeded: Seeded, engine: Engine
) -> None:
    async def team_calls(session: Client) -> dict[str, Any]:
        got = {
            "who": await session.call_tool("whoami", {}),
            "costs": await session.call_tool("unit_costs", {"month": "2026-10", "by": "team"}),
            "waste": await session.call_tool("waste", {"window": "2026-10", "team": "orchid"}),
            "bad": await session.call_tool("waste", {"window": "2026-10", "confidence": 2}),
        }
        with Session(engine) as db, db.begin():
            revoke_key(db, seeded.keys.walrus[:12])
        with pytest.raises(MCPError):  # the HTTP layer answers 401 now
            await session.call_tool("whoami", {})
        return got

    team = over_http(http_server, seeded.keys.walrus, team_calls)
    assert body(team["who"])["team"] == "walrus"
    assert {item["properties"]["team"] for item in body(team["costs"])["items"]} == {"walrus"}
    assert "forbidden" in error_text(team["waste"])
    assert "confidence" in error_text(team["bad"])
    refused = httpx.post(
        http_server,
        json=INITIALIZE,
        headers={"Authorization": f"Bearer {seeded.keys.walrus}"},
        timeout=30,
    )
    assert (refused.status_code, refused.json()["error"]["message"]) == (
        401,
        "invalid or revoked API key",
    )

    async def admin_calls(session: Client) -> Any:
        return await session.call_tool("reconciliation", {"month": "2026-10"})

    assert body(over_http(http_server, seeded.keys.admin, admin_calls))["month"] == "2026-10"


def test_http_refuses_a_request_without_a_live_key(http_server: str) -> None:
    for headers in ({}, {"Authorization": "Bearer slk_" + "y" * 43}, {"X-API-Key": "nope"}):
        response = httpx.post(http_server, json=INITIALIZE, headers=headers, timeout=30)
        assert response.status_code == 401, headers
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json()["error"]["code"] == "unauthorized"
        assert "y" * 43 not in response.text
