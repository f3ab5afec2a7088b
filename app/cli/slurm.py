"""``specledger slurm`` and ``specledger ingest slurm``: a Slurm GPU cluster in the ledger.

The steps, once per cluster and then per month::

    specledger slurm setup cluster.toml            # the nodes as replicas of slurm-<cluster>
    specledger slurm bill cluster.toml --month 2026-12 --ingest   # the derived node bill
    specledger ingest slurm --cluster research     # job accounting (sacct), resumable
    specledger allocate --month 2026-12            # node-hours -> jobs (-> requests)
    specledger slurm usage --month 2026-12         # GPU-hours and cost by account, partition
"""

import json
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from app.cli._support import as_utc, open_engine, parse_month, user_errors
from app.domain.money import format_micros
from app.domain.periods import Month

slurm_app = typer.Typer(
    help="Slurm GPU clusters: the cluster's cost model as a derived FOCUS bill, its nodes in "
    "the registry, servers that run as Slurm jobs, GPU-hours and cost by account and "
    "partition, and a partition schedule from the breakeven curve.",
    no_args_is_help=True,
)

_MONTH = typer.Option(help="The month, YYYY-MM (UTC).", parser=parse_month)
_JSON = typer.Option("--json", help="Print JSON.")


def ingest_slurm(
    cluster: Annotated[str, typer.Option(help="The cluster's name (ClusterName in slurm.conf).")],
    command: Annotated[
        str,
        typer.Option(
            help="How to run sacct; e.g. 'ssh head env TZ=UTC sacct' for a remote cluster "
            "(it must print UTC times)."
        ),
    ] = "sacct",
    since: Annotated[
        datetime | None,
        typer.Option(
            help="Window start (UTC). Default: where the last read ended, or the start of the "
            "oldest job then still running; the month's start on a first read."
        ),
    ] = None,
    until: Annotated[datetime | None, typer.Option(help="Window end (UTC). Default: now.")] = None,
    from_file: Annotated[
        Path | None,
        typer.Option(
            help="Read this file of `sacct --parsable2` output (with its header, TZ=UTC) "
            "instead of running sacct; needs --since and --until.",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """Read job accounting with sacct and store it: per job and step, with GPU-seconds =
    allocated GPUs x ElapsedRaw. Idempotent (a job counts once per run); a job still running
    is read again next time. Finished jobs become usage records of the deployment
    slurm-CLUSTER, billed to their Slurm account. A bad line rejects the whole output,
    naming the line and field, and nothing is written."""
    from sqlalchemy.orm import Session

    from app.settings import get_settings
    from app.slurm.ingest import SacctCommand, ingest_sacct_text, ingest_slurm

    now = datetime.now(UTC)
    with (
        user_errors(),
        open_engine(get_settings()) as engine,
        Session(engine) as session,
        session.begin(),
    ):
        if from_file is not None:
            if since is None or until is None:
                raise typer.BadParameter("--from-file needs --since and --until")
            report = ingest_sacct_text(
                session,
                from_file.read_text(),
                source=str(from_file),
                cluster=cluster,
                window=(as_utc(since), as_utc(until)),
                now=now,
            )
        else:
            report = ingest_slurm(
                session,
                cluster=cluster,
                command=SacctCommand.parse(command),
                since=as_utc(since) if since else None,
                until=as_utc(until) if until else None,
                now=now,
            )
    typer.echo(json.dumps(report.to_json(), indent=2) if as_json else report.to_text())


@slurm_app.command("setup")
def setup(
    cost_model: Annotated[
        Path, typer.Argument(help="The cluster's cost model (TOML).", exists=True, dir_okay=False)
    ],
) -> None:
    """Register the cluster's nodes (idempotent): the deployment slurm-CLUSTER with one
    replica per node, its GPUs and the ResourceId its bill rows carry (derived, or the EC2
    instance id of a cloud node)."""
    from sqlalchemy.orm import Session

    from app.settings import get_settings
    from app.slurm.cluster import register_cluster
    from ingest.cluster_bill import load_cost_model

    with user_errors(), open_engine(get_settings()) as engine, Session(engine) as session:
        model = load_cost_model(cost_model)
        with session.begin():
            done = register_cluster(session, model)
    typer.echo(
        f"{done.deployment}: {len(done.added)} nodes added"
        + (f" ({', '.join(done.added)})" if done.added else "")
        + f", {len(done.kept)} already registered"
    )


@slurm_app.command("bill")
def bill(
    cost_model: Annotated[
        Path, typer.Argument(help="The cluster's cost model (TOML).", exists=True, dir_okay=False)
    ],
    month: Annotated[Month, _MONTH],
    out: Annotated[
        Path | None,
        typer.Option(
            help="The FOCUS CSV to write (.csv.gz compresses). Default: beside the model."
        ),
    ] = None,
    ingest: Annotated[
        bool, typer.Option(help="Also ingest it as billing (source slurm-CLUSTER-derived).")
    ] = False,
) -> None:
    """Write the cluster's own cost for a month as a FOCUS 1.2 bill: one row per node, hour
    and cost component (amortization, power, colocation, fabric, support, staff), labelled
    as derived from the cost model, not an invoice. Cloud nodes get no rows."""
    from app.settings import get_settings
    from ingest.cluster_bill import load_cost_model, write_derived_bill
    from ingest.service import IngestOptions, ingest_billing

    with user_errors():
        model = load_cost_model(cost_model)
        path = out or cost_model.with_name(f"{model.cluster}-{month}-derived.csv")
        rows = write_derived_bill(model, month.start, month.end, path)
        typer.echo(f"wrote {rows} derived FOCUS rows for {month} to {path}")
        if ingest:
            with open_engine(get_settings()) as engine:
                report = ingest_billing(
                    engine, str(path), IngestOptions(source=f"slurm-{model.cluster}-derived")
                )
            typer.echo(report.to_text())


@slurm_app.command("link")
def link(
    deployment: Annotated[str, typer.Option(help="The serving deployment.")],
    replica: Annotated[str, typer.Option(help="Its replica that runs inside the job.")],
    job: Annotated[str, typer.Option(help="CLUSTER:JOBID of the Slurm job the replica runs in.")],
) -> None:
    """Say which Slurm job a serving replica runs in: the job's share of its node is then
    split again to the replica's metered requests by their GPU-seconds (exactly), and what
    they did not use stays the job's own. One node per server job."""
    from sqlalchemy.orm import Session

    from app.settings import get_settings
    from app.slurm.cluster import link_job

    cluster, sep, job_id = job.partition(":")
    if not sep or not cluster or not job_id:
        raise typer.BadParameter("--job must be CLUSTER:JOBID")
    with (
        user_errors(),
        open_engine(get_settings()) as engine,
        Session(engine) as session,
        session.begin(),
    ):
        link_job(session, deployment=deployment, replica=replica, cluster=cluster, job=job_id)
    typer.echo(f"{deployment}/{replica} runs in Slurm job {job_id} of {cluster}")


@slurm_app.command("usage")
def usage(
    month: Annotated[Month, _MONTH],
    team: Annotated[str | None, typer.Option(help="Only this Slurm account (team).")] = None,
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """GPU-hours (from accounting) and allocated cost (from the ledger) per cluster, Slurm
    account and partition; a node's unused GPUs are (idle)."""
    from app.db import read_session
    from app.domain.windows import TimeWindow
    from app.settings import get_settings
    from app.slurm.report import slurm_usage

    settings = get_settings()
    with user_errors(), open_engine(settings) as engine, read_session(engine) as session:
        lines = slurm_usage(
            session,
            TimeWindow(month.start, month.end),
            team=team,
            s3_endpoint_url=settings.s3_endpoint_url,
        )
    if as_json:
        typer.echo(json.dumps([asdict(line) for line in lines], indent=2))
        return
    typer.echo(f"{'cluster':<14}{'account':<16}{'partition':<20}{'jobs':>6}{'GPU-h':>10}  cost")
    for line in lines:
        cost = f"{format_micros(line.cost_micros)} {line.currency}" if line.currency else "-"
        typer.echo(
            f"{line.cluster:<14}{line.account:<16}{line.partition:<20}{line.jobs:>6}"
            f"{line.gpu_seconds / 3600:>10.2f}  {cost}"
        )


@slurm_app.command("schedule")
def schedule(
    deployment: Annotated[
        str, typer.Option(help="The serving deployment: its load and fitted breakeven curve.")
    ],
    nodes: Annotated[
        str,
        typer.Option(help="The partition's nodes, a Slurm hostlist (gpu[01-08]); kept in order."),
    ],
    tpot_p90_ms: Annotated[float, typer.Option(help="The TPOT p90 target, milliseconds.")],
    partition: Annotated[str, typer.Option(help="The inference partition.")] = "inference",
    replicas_per_node: Annotated[
        int, typer.Option(min=1, help="Serving replicas per node (load spreads evenly).")
    ] = 1,
    gpus_per_node: Annotated[
        int, typer.Option(min=1, help="GPUs per node: a node-hour is this many GPU-hours.")
    ] = 8,
    price_deployment: Annotated[
        str | None,
        typer.Option(
            help="Whose ledger cost prices a node-hour (e.g. slurm-CLUSTER); default --deployment."
        ),
    ] = None,
    price_month: Annotated[
        Month | None,
        typer.Option(help="Month of the price (default: latest allocated).", parser=parse_month),
    ] = None,
    weeks: Annotated[int, typer.Option(min=1, help="Weeks of measured load.")] = 4,
    output: Annotated[
        str, typer.Option(help="scontrol (crontab lines), power-saving (slurm.conf), or json.")
    ] = "scontrol",
    resume_program: Annotated[
        str, typer.Option(help="slurm.conf ResumeProgram (power-saving output).")
    ] = "/etc/slurm/resume.sh",
    suspend_program: Annotated[
        str, typer.Option(help="slurm.conf SuspendProgram (power-saving output).")
    ] = "/etc/slurm/suspend.sh",
) -> None:
    """How many nodes the inference partition needs in each hour of the week to meet a TPOT
    p90 target at the deployment's measured load (p90 of concurrent sessions per hour of
    week), with speculation on or off per band from its fitted breakeven curve, and what that
    saves against a static partition at the ledger's own node-hour price. Prints crontab
    lines of `scontrol update PartitionName=... Nodes=...`, or slurm.conf power-saving
    settings, or JSON."""
    from app.db import read_session
    from app.settings import get_settings
    from app.slurm.partition import fitted_tpot, hourly_load, node_hour_price
    from app.slurm.rules.partition_schedule import (
        PartitionPlanInput,
        partition_plan_as_dict,
        plan_partition,
        power_saving_conf,
        scontrol_schedule,
    )
    from app.slurm.rules.sacct import expand_hostlist

    if output not in {"scontrol", "power-saving", "json"}:
        raise typer.BadParameter("--output must be scontrol, power-saving or json")
    try:
        names = expand_hostlist(nodes)
    except ValueError as exc:
        raise typer.BadParameter(f"--nodes: {exc}") from None
    settings = get_settings()
    with user_errors(), open_engine(settings) as engine, read_session(engine) as session:
        tpot = fitted_tpot(session, deployment)
        price = node_hour_price(
            session,
            price_deployment or deployment,
            gpus_per_node=gpus_per_node,
            currency=settings.default_currency,
            month=price_month,
        )
        load = hourly_load(
            session,
            deployment,
            weeks=weeks,
            now=datetime.now(UTC),
            s3_endpoint_url=settings.s3_endpoint_url,
        )
        plan = plan_partition(
            PartitionPlanInput(
                hourly_load=load,
                nodes=names,
                replicas_per_node=replicas_per_node,
                tpot_target_s=tpot_p90_ms / 1000,
                node_hour_micros=price,
                currency=settings.default_currency,
                partition=partition,
                speculation=tpot.speculation,
            ),
            tpot_s=tpot,
        )
    if output == "json":
        typer.echo(json.dumps(partition_plan_as_dict(plan), indent=2))
    elif output == "power-saving":
        typer.echo(
            power_saving_conf(plan, resume_program=resume_program, suspend_program=suspend_program)
        )
    else:
        typer.echo(scontrol_schedule(plan))


def register(app: typer.Typer, *, ingest_app: typer.Typer) -> None:
    """Add ``slurm`` and ``ingest slurm``."""
    app.add_typer(slurm_app, name="slurm")
    ingest_app.command("slurm")(ingest_slurm)
