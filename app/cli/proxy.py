"""``specledger proxy``: run the metering proxy in front of vLLM replicas (uvicorn).

Mounted on the main CLI with ``register(app)``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:  # the command imports what it serves with only when it runs
    from serving.proxy.config import ReplicaSpec

_REPLICA_KEYS = {
    "gpus": "gpus",
    "deployment": "deployment",
    "name": "name",
    "spec": "spec_method",
    "k": "spec_k",
    "model": "model",
    "engine": "engine",
}


def parse_replica(text: str) -> ReplicaSpec:
    """Parse ``URL[,gpus=N][,deployment=D][,name=R][,spec=METHOD][,k=K][,model=M]
    [,engine=vllm|trtllm|triton]``.

    Raises:
        typer.BadParameter: On an unknown key or a bad value.
    """
    from pydantic import ValidationError

    from serving.proxy.config import ReplicaSpec

    url, *items = (part.strip() for part in text.split(","))
    if not url.startswith(("http://", "https://")):
        raise typer.BadParameter(f"{text!r}: the first item must be the replica's http(s) URL")
    fields: dict[str, str] = {"url": url}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in _REPLICA_KEYS:
            raise typer.BadParameter(
                f"{item!r} in {text!r}: expected one of {', '.join(_REPLICA_KEYS)} as key=value"
            )
        fields[_REPLICA_KEYS[key]] = value
    try:
        return ReplicaSpec.model_validate(fields)
    except ValidationError as exc:
        raise typer.BadParameter(f"{text!r}: {exc}") from None


def proxy(
    replica: Annotated[
        list[str] | None,
        typer.Option(
            "--replica",
            help="An inference server: URL[,gpus=N][,deployment=NAME][,name=REPLICA]"
            "[,spec=METHOD][,k=K][,model=SERVED_NAME][,engine=vllm|trtllm|triton] "
            "(repeatable; engine defaults to vllm).",
        ),
    ] = None,
    engine: Annotated[
        list[str] | None,
        typer.Option(
            "--engine",
            help="A deployment started with `engine start` (its saved config gives "
            "URL, speculation and model; repeatable).",
        ),
    ] = None,
    engine_gpus: Annotated[int, typer.Option(min=1, help="GPUs of each --engine replica.")] = 1,
    port: Annotated[int, typer.Option(help="Port the proxy listens on.")] = 8080,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    jsonl: Annotated[
        Path | None,
        typer.Option("--jsonl", help="Also append every usage record to this JSONL file."),
    ] = None,
    no_db: Annotated[
        bool,
        typer.Option(
            "--no-db", help="Write usage only to --jsonl or --store, not to the database."
        ),
    ] = False,
    store: Annotated[
        str | None,
        typer.Option(
            help="Write usage records as hourly Parquet files to this store (a folder or "
            "s3://bucket/prefix: usage/month=/deployment=/hour=), not to the database; "
            "default SPECLEDGER_LEDGER_STORE. Pair it with --jsonl: records of an hour not "
            "yet written at a crash are in the log."
        ),
    ] = None,
    spool: Annotated[
        Path | None,
        typer.Option(
            help="Folder of the durable usage spool: records are on disk (fsync'd) before the "
            "database is tried and leave it once stored, so a slow, locked or stopped "
            "database or a kill -9 loses nothing spooled; a proxy replays what an earlier one "
            "left. One proxy per folder. Default: SPECLEDGER_DATA_DIR/usage-spool/PORT."
        ),
    ] = None,
    read_timeout: Annotated[
        float,
        typer.Option(help="Seconds to wait for a response or between two chunks of a stream."),
    ] = 600.0,
    idle_window: Annotated[
        float,
        typer.Option(
            help="Seconds after which an idle replica's metering window is closed and its idle "
            "time written."
        ),
    ] = 300.0,
    speculate_up_to: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Route by load: while at most N requests are in flight, send new ones to "
            "the speculating replicas, above N to the plain (spec=none) ones. Set N to the fitted "
            "breakeven concurrency. Default: the replica with the fewest in flight.",
        ),
    ] = None,
    engines_dir: Annotated[
        Path | None,
        typer.Option(
            help="Folder of engine configs (for --engine); default: SPECLEDGER_DATA_DIR/engines."
        ),
    ] = None,
    allow_anonymous: Annotated[
        bool,
        typer.Option(
            "--allow-anonymous",
            help="Also serve requests that present no proxy key, billed to team "
            "'(unattributed)' (for a demo on one machine). A key that is presented is still "
            "checked, and an anonymous request may not name a team.",
        ),
    ] = False,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            help="Proxy processes on the port (SO_REUSEPORT). Above 1, this process runs the "
            "meters, the usage sink and the spool for all of them, and the workers send it "
            "their requests' events.",
        ),
    ] = 1,
    meter_listen: Annotated[
        list[str] | None,
        typer.Option(
            "--meter-listen",
            help="Also serve the meters at this address (tcp://HOST:PORT or unix:/PATH), for "
            "proxies on other hosts in front of the same replicas (their --meter-url). "
            "Implies the meter process even with --workers 1. Over TCP every proxy must "
            "present the shared secret in SPECLEDGER_METER_TOKEN (set it here and on each "
            "--meter-url proxy): the records it sends decide who pays.",
        ),
    ] = None,
    meter_url: Annotated[
        str | None,
        typer.Option(
            help="Meter through the meter service of another proxy (its --meter-listen "
            "address) instead of running meters here: every proxy in front of a replica must "
            "share one meter for its GPU time to be split exactly.",
        ),
    ] = None,
    budget_shares: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="How many proxy processes, on every host, admit requests against the same "
            "budgets: each admits against this share of what a hard limit has left at its "
            "refresh, so together they stay within it. Default: --workers.",
        ),
    ] = None,
    meter_metrics_port: Annotated[
        int | None,
        typer.Option(
            help="With --workers or --meter-listen: serve the meter process's Prometheus "
            "metrics (GPU seconds of requests and idle, counter checks, usage sink) on this "
            "port; each worker's /metrics has what it relayed.",
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Serve an OpenAI-compatible API that forwards to vLLM and meters every request.

    Usage records (tokens, drafted and accepted tokens, timings, GPU-seconds) go to the
    database (SPECLEDGER_DATABASE_URL) and, with --jsonl, to a file that
    `specledger ingest usage` loads.

    Every request presents a proxy key (`Authorization: Bearer slk_...`, made with
    `specledger keys create --proxy --team T`): the key decides the team and cost center.
    X-Session-Id and X-Tags (k=v,...) add detail; X-Team and X-Cost-Center may only repeat
    the key's, except through a key made with --gateway. Keys are checked in memory and
    reloaded from the database within half a second of a change.
    """
    from pydantic import ValidationError
    from rich.console import Console

    from app.cli._support import open_engine, user_errors
    from app.settings import get_settings
    from serving.engine.config import engine_config_path, load_engine_config
    from serving.proxy.config import ProxyConfig, ReplicaSpec

    err = Console(stderr=True)

    settings = get_settings()
    engines_dir = engines_dir or settings.engines_dir
    replicas = [parse_replica(text) for text in replica or []]
    for name in engine or []:
        try:
            engine_config = load_engine_config(engine_config_path(name, engines_dir))
        except (FileNotFoundError, ValidationError) as exc:
            raise typer.BadParameter(f"engine {name!r}: {exc}") from None
        replicas.append(ReplicaSpec.from_engine(engine_config, gpus=engine_gpus))
    if not replicas:
        raise typer.BadParameter("give at least one --replica or --engine")
    store = store or settings.ledger_store
    if no_db and jsonl is None and store is None:
        raise typer.BadParameter("--no-db needs --jsonl or --store, or the usage would go nowhere")
    database_url = None if no_db else settings.database_url
    if database_url is not None:
        with user_errors(), open_engine(settings):
            pass  # the schema is current (SQLite is migrated on first use)
    try:
        config = ProxyConfig(
            replicas=tuple(replicas),
            database_url=database_url,
            jsonl_path=jsonl,
            spill_path=settings.data_dir / "usage-spill.jsonl",
            spool_dir=spool or settings.data_dir / "usage-spool" / str(port),
            store_uri=store,
            s3_endpoint_url=settings.s3_endpoint_url,
            read_timeout_s=read_timeout,
            idle_window_s=idle_window,
            speculate_up_to=speculate_up_to,
            allow_anonymous=allow_anonymous,
            meter_url=meter_url,
            budget_shares=budget_shares or workers,
        )
        if meter_url is None and (workers > 1 or meter_listen):
            ProxyConfig.model_validate(config.model_dump() | {"meter_url": "unix:/check"})
    except ValidationError as exc:
        raise typer.BadParameter(str(exc.errors()[0]["msg"])) from None
    if meter_url is not None and meter_listen:
        raise typer.BadParameter("--meter-url and --meter-listen: a proxy either runs the meters "
                                 "or uses another's")  # fmt: skip
    if any(url.startswith("tcp://") for url in meter_listen or []):
        from serving.proxy.meter_service import METER_TOKEN_ENV, meter_token

        if meter_token() is None:
            raise typer.BadParameter(
                f"--meter-listen tcp://: set {METER_TOKEN_ENV} to a shared secret (here and "
                "on every --meter-url proxy); without it anyone who reaches the port could "
                "book usage to any team"
            )
    for spec in replicas:
        err.print(
            f"replica {spec.replica_name} ({spec.deployment}, {spec.spec_method}"
            f"{f' k={spec.spec_k}' if spec.spec_k else ''}, {spec.gpus} GPU) "
            f"at {spec.base_url}"
        )
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    _serve(config.model_dump_json(), workers=workers, host=host, port=port,
           listen=meter_listen or [], own_meters=meter_url is None,
           metrics_port=meter_metrics_port, log_level=log_level)  # fmt: skip


def _serve(
    config_json: str,
    *,
    workers: int,
    host: str,
    port: int,
    listen: list[str],
    own_meters: bool,
    metrics_port: int | None,
    log_level: str,
) -> None:
    """One process (its own meters, or another's), or a meter process and its workers."""
    from serving.proxy import workers as fleet

    if own_meters and (workers > 1 or listen):
        fleet.run_fleet(config_json, workers=workers, host=host, port=port, listen=listen,
                        metrics_port=metrics_port, log_level=log_level)  # fmt: skip
    elif workers > 1:  # metered elsewhere: the workers need no process of ours in between
        fleet.run_workers(config_json, workers=workers, host=host, port=port, log_level=log_level)
    else:
        import uvicorn

        from serving.proxy.app import create_proxy_app
        from serving.proxy.config import ProxyConfig

        uvicorn.run(
            create_proxy_app(ProxyConfig.model_validate_json(config_json)),
            host=host,
            port=port,
            log_level=log_level,
            timeout_graceful_shutdown=30,
            loop=fleet.event_loop(),
            http="httptools",
        )


def register(app: typer.Typer) -> None:
    """Add the ``proxy`` command to a Typer app."""
    app.command("proxy")(proxy)
