"""MCP fixtures: the API's month of billing and usage for teams orchid and walrus (loaded
through the REST API), its keys, and helpers that call a tool with the SDK's own client."""

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp import Client
from mcp.types import CallToolResult

from tests.api.conftest import Keys, Seeded, client, keys, seeded


def body(result: CallToolResult) -> Any:
    """A successful call's JSON body (its one text content)."""
    assert not result.is_error, result.content
    (content,) = result.content
    assert content.type == "text"
    return json.loads(content.text)


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result.content
    (content,) = result.content
    assert content.type == "text"
    return content.text


def run_with(target: Any, calls: Callable[[Client], Awaitable[Any]]) -> Any:
    """Open the SDK client on ``target`` (a server, a URL transport, stdio parameters), run
    ``calls(client)`` and return what it returns."""

    async def main() -> Any:
        async with Client(target) as session:
            return await calls(session)

    return anyio.run(main)


__all__ = ["Keys", "Seeded", "body", "client", "error_text", "keys", "run_with", "seeded"]
