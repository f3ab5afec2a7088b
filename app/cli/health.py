"""``specledger health``: the serving hosts' engine health (issue 16).

specledger health numa [--threads-bind 0-31|32-63] [--gpus 0,1] [--json]
specledger health draft-memory record --deployment D --log WITH.log --baseline-log WITHOUT.log
specledger health draft-memory list [--json]
specledger health draft-memory findings [--window 30d] [--json]
"""

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from app.cli._support import open_engine, user_errors
from app.domain.money import format_micros

health_app = typer.Typer(
    help="Engine health of the serving hosts: the draft model's memory measured from vLLM's "
    "start-up logs and priced, and the NUMA placement of a replica checked against its host.",
    no_args_is_help=True,
)
draft_app = typer.Typer(
    help="The drafter's memory: from two vLLM start-up logs (with and without the drafter), "
    "stored per deployment, priced as its share of the replica's memory.",
    no_args_is_help=True,
)
health_app.add_typer(draft_app, name="draft-memory")

_JSON = typer.Option("--json", help="Print JSON.")


def _gpu_list(text: str | None, option: str) -> tuple[int, ...] | None:
    from app.engine_health.rules.numa import TopologyError, parse_cpulist

    if text is None:
        return None
    try:
        return tuple(sorted(parse_cpulist(text, what=option)))
    except TopologyError as exc:
        raise typer.BadParameter(exc.message, param_hint=option) from None


@health_app.command("numa")
def numa(
    threads_bind: Annotated[
        str | None,
        typer.Option(
            help="VLLM_CPU_OMP_THREADS_BIND to check: auto, nobind, or CPU lists per rank "
            "joined by | (default: the environment's, else vLLM's default auto)."
        ),
    ] = None,
    gpus: Annotated[
        str | None,
        typer.Option(
            help="The replica's target GPUs, e.g. 0-3 (default: CUDA_VISIBLE_DEVICES, else all "
            "GPUs nvidia-smi lists)."
        ),
    ] = None,
    draft_gpus: Annotated[
        str | None,
        typer.Option(help="The drafter's GPUs when not the target's (vLLM shares them)."),
    ] = None,
    log: Annotated[
        Path | None,
        typer.Option(
            help="A vLLM CPU start-up log: check the binding it reports using instead.",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """Check this host's NUMA topology (/sys/devices/system/node, lscpu, nvidia-smi topo -m
    where present) against a replica's placement: its draft and target GPUs on one NUMA node
    and the path between them (NVLink, PIX best ... SYS worst), and the CPU backend's thread
    binding on the GPUs' node. Exit status 1 when something crosses sockets."""
    from app.engine_health.draft_memory import read_log
    from app.engine_health.numa import numa_check
    from app.engine_health.rules.engine_memory import parse_startup_log
    from app.engine_health.rules.numa import Severity

    with user_errors():
        bind = threads_bind
        if log is not None:
            startup = parse_startup_log(read_log(log), source=str(log))
            bind = bind or _bind_from_log(startup.threads_bind, startup.bound_cpus)
        report = numa_check(
            threads_bind=bind,
            target_gpus=_gpu_list(gpus, "--gpus"),
            draft_gpus=_gpu_list(draft_gpus, "--draft-gpus") or (),
        )
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        body = report.to_json()
        typer.echo(
            f"NUMA nodes: {body['sys_nodes']} (/sys), {body['lscpu_nodes']} (lscpu); "
            f"sockets: {body['lscpu_sockets']}"
        )
        for node, cpus in body["numa_nodes"].items():
            socket = body["node_sockets"].get(node)
            typer.echo(
                f"  node {node}: CPUs {cpus or '-'}"
                + (f", socket {socket}" if socket is not None else "")
            )
        for gpu in body["gpus"] or []:
            typer.echo(
                f"  GPU{gpu['index']}: NUMA node {gpu['numa_node']}, CPU affinity "
                f"{gpu['cpu_affinity']}"
            )
        typer.echo(f"threads bind: {body['threads_bind']}")
        for note in report.notes:
            typer.echo(f"note: {note}")
        for finding in report.findings:
            typer.echo(f"{finding.severity}: {finding.message}")
        if not any(f.severity is not Severity.info for f in report.findings):
            typer.echo("ok: nothing crosses a NUMA node or socket")
    if report.critical:
        raise typer.Exit(1)


def _bind_from_log(value: str | None, bound: tuple[tuple[int, ...], ...]) -> str | None:
    """The binding vLLM reported: its explicit lists, or the CPUs ``auto`` chose."""
    if bound:
        return "|".join(",".join(str(c) for c in rank) for rank in bound)
    return value


@draft_app.command("record")
def record(
    deployment: Annotated[str, typer.Option(help="The registered deployment.")],
    log: Annotated[
        Path,
        typer.Option(help="vLLM log of a start with the drafter.", exists=True, dir_okay=False),
    ],
    baseline_log: Annotated[
        Path,
        typer.Option(
            help="vLLM log of a start of the same engine without speculation.",
            exists=True,
            dir_okay=False,
        ),
    ],
    memory_gib: Annotated[
        float | None,
        typer.Option(
            min=0.01,
            help="The replica's memory per GPU in GiB, when the logs do not say how much vLLM "
            "was given.",
        ),
    ] = None,
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """Measure the drafter's memory from two start-up logs and store it for the deployment:
    the KV cache's tokens and memory with and without it, so its weights and its own KV
    cache. The newest measurement prices the draft's memory in the waste report."""
    from sqlalchemy.orm import Session

    from app.engine_health.draft_memory import record_draft_memory
    from app.engine_health.rules.engine_memory import GIB
    from app.settings import get_settings

    with (
        user_errors(),
        open_engine(get_settings()) as engine,
        Session(engine) as session,
        session.begin(),
    ):
        measurement = record_draft_memory(
            session,
            deployment=deployment,
            log=log,
            baseline_log=baseline_log,
            now=datetime.now(UTC),
            pool_bytes=None if memory_gib is None else round(memory_gib * GIB),
        )
    body = measurement.to_json()
    if as_json:
        typer.echo(json.dumps(body, indent=2))
        return
    typer.echo(_line(body))


def _line(body: dict[str, object]) -> str:
    return (
        f"{body['deployment']}: {body['method']} {body['draft_model'] or ''} on "
        f"{body['device']} holds {body['draft_gib']} GiB ({float(str(body['memory_share'])):.1%} "
        f"of {body['pool_gib']} GiB {body['pool_basis']}; weights and buffers "
        f"{body['out_of_budget_gib']} GiB, its KV cache {body['draft_kv_gib']} GiB); KV cache "
        f"{body['kv_tokens_with']:,} tokens with it, {body['kv_tokens_without']:,} without "
        f"(R = {body['capacity_ratio']})"
    )


@draft_app.command("list")
def list_(
    latest: Annotated[bool, typer.Option(help="Only the newest per deployment.")] = False,
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """Stored draft-memory measurements, newest first."""
    from app.db import read_session
    from app.engine_health.draft_memory import list_draft_memory
    from app.settings import get_settings

    with user_errors(), open_engine(get_settings()) as engine, read_session(engine) as session:
        rows = [m.to_json() for m in list_draft_memory(session, latest_only=latest)]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo("no draft-memory measurements; record one with `health draft-memory record`")
    for body in rows:
        typer.echo(f"{str(body['measured_at'])[:19]}Z  {_line(body)}")


@draft_app.command("findings")
def findings(
    window: Annotated[str, typer.Option(help="Window: 30d, 2026-11, or START,END (UTC).")] = "30d",
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """The waste report's draft_memory findings in the window: the draft memory's price
    (its share of the deployment's GPU cost) where that memory would serve more as KV cache
    than speculation gains, or where the drafter is loaded and nothing was speculated."""
    from app.db import read_session
    from app.domain.findings import FindingKind, Thresholds
    from app.domain.windows import parse_window
    from app.settings import get_settings
    from app.waste.service import find_waste

    settings = get_settings()
    now = datetime.now(UTC)
    with user_errors(), open_engine(settings) as engine, read_session(engine) as session:
        report = find_waste(
            session,
            window=parse_window(window, now=now),
            team=None,
            thresholds=Thresholds(),
            now=now,
            default_currency=settings.default_currency,
            s3_endpoint_url=settings.s3_endpoint_url,
        )
    found = [f for f in report.findings if f.kind is FindingKind.draft_memory]
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        "deployment": f.key,
                        "window_cost": format_micros(f.window_cost_micros),
                        "estimated_monthly_cost": format_micros(f.monthly_cost_micros),
                        "currency": report.currency,
                        "action": f.action,
                        "detail": f.detail,
                        "metrics": dict(f.metrics),
                    }
                    for f in found
                ],
                indent=2,
            )
        )
        return
    if not found:
        typer.echo("no draft-memory findings in the window")
    for f in found:
        typer.echo(
            f"{f.key}: {format_micros(f.window_cost_micros)} {report.currency} in the window "
            f"(~{format_micros(f.monthly_cost_micros)}/month): {f.detail}\n  action: {f.action}"
        )


def register(app: typer.Typer) -> None:
    """Mount ``health`` on the main CLI."""
    app.add_typer(health_app, name="health")
