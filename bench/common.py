"""Helpers shared by the benchmarks."""

from sqlalchemy import make_url, text

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
