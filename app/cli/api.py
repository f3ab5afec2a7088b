"""CLI commands for the HTTP API: API keys and ``serve`` (mounted by app.cli)."""

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.cli._support import open_engine, out, user_errors
from app.domain.attribution import parse_tags

if TYPE_CHECKING:
    from app.models import ApiKey

keys_app = typer.Typer(
    help="Create, list and revoke API keys (read the REST API) and proxy keys (decide who "
    "pays for requests through the metering proxy).",
    no_args_is_help=True,
)


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
    proxy: Annotated[
        bool,
        typer.Option(
            "--proxy",
            help="A proxy key: presented to the metering proxy, which bills every request "
            "with it to --team (and --cost-center). It cannot read the API.",
        ),
    ] = False,
    cost_center: Annotated[
        str | None, typer.Option(help="Proxy keys: the cost center their requests are billed to.")
    ] = None,
    tags: Annotated[
        str | None,
        typer.Option(
            help="Proxy keys: tags k=v,k2=v2 set on every request (a header cannot change them)."
        ),
    ] = None,
    deployments: Annotated[
        str | None,
        typer.Option(
            help="Proxy keys: the deployments (comma-separated) the key may use; default: all."
        ),
    ] = None,
    gateway: Annotated[
        bool,
        typer.Option(
            "--gateway",
            help="Proxy keys: a trusted gateway (e.g. an internal LLM gateway), which may pass "
            "its end user's team and cost center on in X-Team / X-Cost-Center; records say so.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Create an API key (or, with --proxy, a proxy key) and print it. It is shown this once:
    only its hash is stored."""
    from sqlalchemy.orm import Session

    from app.auth import service as keys
    from app.settings import get_settings

    proxy_only = {"--cost-center": cost_center, "--tags": tags, "--deployments": deployments,
                  "--gateway": gateway or None}  # fmt: skip
    given = [option for option, value in proxy_only.items() if value is not None]
    if given and not proxy:
        raise typer.BadParameter(f"{given[0]} is for proxy keys: add --proxy")
    options = None
    if proxy:
        try:
            tag_map = parse_tags(tags)
        except ValueError as exc:
            raise typer.BadParameter(f"--tags: {exc}") from None
        names = tuple(d.strip() for d in (deployments or "").split(",") if d.strip())
        options = keys.ProxyKeyOptions(
            cost_center=cost_center, tags=tag_map or None, deployments=names or None,
            gateway=gateway,
        )  # fmt: skip
    with (
        user_errors(),
        open_engine(get_settings()) as engine,
        Session(engine) as session,
        session.begin(),
    ):
        created = keys.create_key(session, team=team, admin=admin, name=name, proxy=options)
        summary = _summary(created.record) | {"key": created.secret}
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    typer.echo(
        f"created key {summary['id']} ({_scope(summary)}); store it now, it is not shown again:"
    )
    typer.echo(created.secret)


def _summary(key: "ApiKey") -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": key.id,
        "prefix": key.prefix,
        "name": key.name,
        "purpose": key.purpose,
        "team": key.team,
        "admin": key.is_admin,
        "created_at": f"{key.created_at:%Y-%m-%dT%H:%M:%SZ}",
        "revoked_at": f"{key.revoked_at:%Y-%m-%dT%H:%M:%SZ}" if key.revoked_at else None,
    }
    if key.purpose == "proxy":
        row |= {
            "cost_center": key.cost_center,
            "tags": key.tags or {},
            "deployments": key.deployments,
            "gateway": key.is_gateway,
        }
    return row


def _scope(row: dict[str, Any]) -> str:
    if row["admin"]:
        return "admin"
    if row["purpose"] != "proxy":
        return f"team={row['team']}"
    extra = [f"cost_center={row['cost_center']}"] if row["cost_center"] else []
    extra += [f"deployments={','.join(row['deployments'])}"] if row["deployments"] else []
    extra += ["gateway"] if row["gateway"] else []
    return " ".join([f"proxy team={row['team']}", *extra])


@keys_app.command("list")
def keys_list(
    all_keys: Annotated[bool, typer.Option("--all", help="Include revoked keys.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List API keys by id and prefix (the keys themselves are not stored)."""
    from app.auth import service as keys
    from app.db import read_session
    from app.settings import get_settings

    with open_engine(get_settings()) as engine, read_session(engine) as session:
        rows = [_summary(k) for k in keys.list_keys(session, include_revoked=all_keys)]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        scope = _scope(row)
        revoked = f"  revoked {row['revoked_at']}" if row["revoked_at"] else ""
        typer.echo(
            f"{row['id']:>4}  {row['prefix']}...  {scope:<24} {row['name']}  "
            f"created {row['created_at']}{revoked}"
        )


@keys_app.command("revoke")
def keys_revoke(
    key: Annotated[str, typer.Argument(help="The key's id or prefix (see `keys list`).")],
) -> None:
    """Revoke an API key or proxy key: requests with it are refused from now on (a running
    proxy notices within half a second)."""
    from sqlalchemy.orm import Session

    from app.auth import service as keys
    from app.settings import get_settings

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

    from app.settings import get_settings

    with user_errors(), open_engine(get_settings()):
        pass  # migrates SQLite, or says what to run
    out.print(f"SpecLedger API on http://{host}:{port}/v1 (docs: http://{host}:{port}/docs)")
    uvicorn.run(
        "app.main:create_app", factory=True, host=host, port=port, workers=workers, log_level="info"
    )


def register(app: typer.Typer) -> None:
    app.add_typer(keys_app, name="keys")
    app.command("serve")(serve)
