"""Helpers shared by the benchmarks (and the tests that run them)."""

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from sqlalchemy import make_url, text
from starlette.types import ASGIApp

from app.db import make_engine


def fresh_postgres(url: str, name: str) -> str:
    """Drop and create database ``name`` on the server of ``url``; return its URL."""
    parsed = make_url(url)
    admin = make_engine(
        parsed.set(database="postgres").render_as_string(hide_password=False),
        isolation_level="AUTOCOMMIT",
    )
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return parsed.set(database=name).render_as_string(hide_password=False)


@contextmanager
def serve(app: ASGIApp) -> Iterator[str]:
    """Serve ``app`` (lifespan included) on a free port, uvicorn in a thread, until the
    block ends; yields its base URL."""
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, name="served-app", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the app did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(60)
        assert not thread.is_alive(), "the app did not shut down"
