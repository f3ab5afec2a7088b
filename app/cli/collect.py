"""``specledger collect``: meter vLLM from its OpenTelemetry request spans, with no proxy
in the path (uvicorn). Mounted on the main CLI with ``register(app)``."""

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

if TYPE_CHECKING:
    from serving.collector.timeline import ReplicaInfo

_err = Console(stderr=True)

_REPLICA_KEYS = ("deployment", "name", "gpus", "model", "spec", "k")


def parse_replica(text: str) -> "tuple[str, ReplicaInfo]":
    """Parse ``IDENTITY[,deployment=D][,name=R][,gpus=N][,model=M][,spec=METHOD][,k=K]``.

    Raises:
        typer.BadParameter: On an unknown key or a bad value.
    """
    from serving.collector.timeline import ReplicaInfo

    identity, *items = (part.strip() for part in text.split(","))
    if not identity or "=" in identity:
        raise typer.BadParameter(
            f"{text!r}: the first item must be the replica's identity (its service.name)"
        )
    fields: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in _REPLICA_KEYS or not value:
            raise typer.BadParameter(
                f"{item!r} in {text!r}: expected one of {', '.join(_REPLICA_KEYS)} as key=value"
            )
        fields[key] = value
    try:
        gpus = int(fields.get("gpus", "1"))
        k = int(fields["k"]) if "k" in fields else None
    except ValueError as exc:
        raise typer.BadParameter(f"{text!r}: gpus and k are integers ({exc})") from None
    if gpus < 1:
        raise typer.BadParameter(f"{text!r}: gpus must be at least 1")
    return identity, ReplicaInfo(
        deployment=fields.get("deployment", identity),
        replica=fields.get("name", identity),
        gpus=gpus,
        model=fields.get("model", "unknown"),
        spec_method=fields.get("spec", "none"),
        spec_k=k,
    )


def collect(
    replica: Annotated[
        list[str] | None,
        typer.Option(
            "--replica",
            help="A vLLM replica: IDENTITY[,deployment=D][,name=R][,gpus=N][,model=M]"
            "[,spec=METHOD][,k=K] (repeatable). IDENTITY is the value of the --replica-key "
            "resource attributes its spans carry (set OTEL_SERVICE_NAME in the engine's "
            "environment). An identity not listed is metered as its own deployment.",
        ),
    ] = None,
    replica_key: Annotated[
        list[str] | None,
        typer.Option(
            "--replica-key",
            help="Resource attribute(s) that name a replica, joined by '/' "
            "(repeatable; default service.name).",
        ),
    ] = None,
    default_gpus: Annotated[
        int, typer.Option(min=1, help="GPUs of a replica not listed with --replica.")
    ] = 1,
    strict_replicas: Annotated[
        bool,
        typer.Option("--strict-replicas", help="Refuse spans of replicas not listed."),
    ] = False,
    port: Annotated[int, typer.Option(help="Port (OTLP/HTTP's usual is 4318).")] = 4318,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    jsonl: Annotated[
        Path | None,
        typer.Option("--jsonl", help="Also append every usage record to this JSONL file."),
    ] = None,
    no_db: Annotated[
        bool, typer.Option("--no-db", help="Write usage only to --jsonl, not the database.")
    ] = False,
    spool: Annotated[
        Path | None,
        typer.Option(
            help="Folder of the durable usage spool (one collector per folder). "
            "Default: SPECLEDGER_DATA_DIR/usage-spool/collect-PORT."
        ),
    ] = None,
    require_key: Annotated[
        bool,
        typer.Option(
            "--require-key",
            help="Refuse trace exports that present no proxy key (`Authorization: Bearer "
            "slk_...`, set with OTEL_EXPORTER_OTLP_TRACES_HEADERS in the engine's "
            "environment). The key then decides team and cost center.",
        ),
    ] = False,
    trust_callers: Annotated[
        bool,
        typer.Option(
            "--trust-callers",
            help="For exports without a key: bill the team and cost center that the caller "
            "put in its trace context (tracestate `specledger=team:T;session:S`). Only for "
            "platforms that trust their own callers: anyone who can reach the engine can "
            "then bill any team. Without it such requests go to '(unattributed)'.",
        ),
    ] = False,
    lateness: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Seconds a request's span may arrive after later-starting ones: the longest "
            "request plus the export delay. Records are final this long after a request ends.",
        ),
    ] = 60.0,
    idle_window: Annotated[
        float,
        typer.Option(help="Seconds after which an idle replica's metering window is closed."),
    ] = 300.0,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Receive vLLM's OpenTelemetry request spans (OTLP/HTTP protobuf, POST /v1/traces) and
    write the same usage records as the proxy, GPU-seconds split the same way.

    Start vLLM with `--otlp-traces-endpoint http://HOST:PORT/v1/traces` and
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf (and OTEL_SERVICE_NAME=<replica>).

    Attribution: the caller's trace context is a claim nobody checked. With a key on the
    export (--require-key) the key decides team and cost center, as at the proxy, and the
    caller's session narrows; a --gateway key lets the caller's team through. Without a key,
    the team is '(unattributed)' unless --trust-callers.
    """
    import uvicorn

    from app.cli._support import open_engine, user_errors
    from app.settings import get_settings
    from serving.collector.app import CollectorConfig, create_collector_app

    settings = get_settings()
    if no_db and jsonl is None:
        raise typer.BadParameter("--no-db needs --jsonl, or the usage would go nowhere")
    if no_db and require_key:
        raise typer.BadParameter("--require-key checks keys in the database; drop --no-db")
    database_url = None if no_db else settings.database_url
    if database_url is not None:
        with user_errors(), open_engine(settings):
            pass  # the schema is current (SQLite is migrated on first use)
    replicas = dict(parse_replica(text) for text in replica or [])
    config = CollectorConfig(
        replicas=replicas,
        replica_keys=tuple(replica_key or ["service.name"]),
        default_gpus=default_gpus,
        strict_replicas=strict_replicas,
        database_url=database_url,
        jsonl_path=jsonl,
        spill_path=settings.data_dir / "usage-spill.jsonl",
        spool_dir=spool or settings.data_dir / "usage-spool" / f"collect-{port}",
        require_key=require_key,
        trust_callers=trust_callers,
        lateness_s=lateness,
        idle_window_s=idle_window,
    )
    for identity, info in replicas.items():
        _err.print(f"replica {identity!r}: {info.deployment}/{info.replica}, {info.gpus} GPU")
    _err.print(f"OTLP/HTTP endpoint: http://{host}:{port}/v1/traces")
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    uvicorn.run(
        create_collector_app(config),
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=30,
    )


def register(app: typer.Typer) -> None:
    """Add the ``collect`` command to a Typer app."""
    app.command("collect")(collect)
