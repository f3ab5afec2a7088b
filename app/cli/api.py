"""CLI commands for the HTTP API: API keys and ``serve`` (mounted by app.cli)."""

import json
from typing import Annotated

import typer
from sqlalchemy.orm import Session

from app.auth import service as keys
from app.cli._support import open_engine, out, user_errors
from app.db import read_session
from app.settings import get_settings

keys_app = typer.Typer(help="Create, list and revoke API keys.", no_args_is_help=True)


@keys_app.command("create")
def keys_create(
    team: Annotated[
        str | None, typer.Option(help="The team whose data the key may read (and nothing else).")
    ] = None,
    admin: Annotated[
        bool,
        typer.Option(
            "--admin",
            help="An admin key: reads every team's data, ingests, allocates and closes months.",
        ),
    ] = False,
    name: Annotated[str | None, typer.Option(help="A label for listings.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Create an API key and print it. It is shown this once: only its hash is stored."""
    with (
        user_errors(),
        open_engine(get_settings()) as engine,
        Session(engine) as session,
        session.begin(),
    ):
        created = keys.create_key(session, team=team, admin=admin, name=name)
        record = created.record
        summary = {
            "id": record.id,
            "prefix": record.prefix,
            "name": record.name,
            "team": record.team,
            "admin": record.is_admin,
            "key": created.secret,
        }
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    scope = "admin" if summary["admin"] else f"team {summary['team']}"
    typer.echo(f"created key {summary['id']} ({scope}); store it now, it is not shown again:")
    typer.echo(created.secret)


@keys_app.command("list")
def keys_list(
    all_keys: Annotated[bool, typer.Option("--all", help="Include revoked keys.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List API keys by id and prefix (the keys themselves are not stored)."""
    with open_engine(get_settings()) as engine, read_session(engine) as session:
        rows = [
            {
                "id": k.id,
                "prefix": k.prefix,
                "name": k.name,
                "team": k.team,
                "admin": k.is_admin,
                "created_at": f"{k.created_at:%Y-%m-%dT%H:%M:%SZ}",
                "revoked_at": f"{k.revoked_at:%Y-%m-%dT%H:%M:%SZ}" if k.revoked_at else None,
            }
            for k in keys.list_keys(session, include_revoked=all_keys)
        ]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        scope = "admin" if row["admin"] else f"team={row['team']}"
        revoked = f"  revoked {row['revoked_at']}" if row["revoked_at"] else ""
        typer.echo(
            f"{row['id']:>4}  {row['prefix']}...  {scope:<24} {row['name']}  "
            f"created {row['created_at']}{revoked}"
        )


@keys_app.command("revoke")
def keys_revoke(
    key: Annotated[str, typer.Argument(help="The key's id or prefix (see `keys list`).")],
) -> None:
    """Revoke an API key: requests with it are refused from now on."""
    with (
        user_errors(),
        open_engine(get_settings()) as engine,
        Session(engine) as session,
        session.begin(),
    ):
        record = keys.revoke_key(session, key)
        ident = f"{record.id} ({record.prefix}...)"
    typer.echo(f"key {ident} revoked")


def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes.")] = 1,
) -> None:
    """Serve the REST API (docs at /docs) with uvicorn. The embedded SQLite database is
    migrated first; PostgreSQL must be current (`specledger db upgrade`)."""
    import uvicorn

    with user_errors(), open_engine(get_settings()):
        pass  # migrates SQLite, or says what to run
    out.print(f"SpecLedger API on http://{host}:{port}/v1 (docs: http://{host}:{port}/docs)")
    uvicorn.run(
        "app.main:create_app", factory=True, host=host, port=port, workers=workers, log_level="info"
    )


def register(app: typer.Typer) -> None:
    app.add_typer(keys_app, name="keys")
    app.command("serve")(serve)
