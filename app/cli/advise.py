"""``specledger advise``: settings to apply, computed from the ledger and the breakeven curve.

specledger advise ray --deployment llama-70b --tpot-p90-ms 60 > rayservice-advice.yaml
"""

from datetime import UTC, datetime
from typing import Annotated

import typer

from app.cli._support import open_engine, parse_month, user_errors
from app.domain.periods import Month

advise_app = typer.Typer(
    help="Settings to apply, from the ledger's load and cost and the fitted breakeven curve.",
    no_args_is_help=True,
)

_FORMATS = ("yaml", "json", "text")


@advise_app.command("ray")
def ray(
    deployment: Annotated[
        str, typer.Option(help="The deployment: its load, fitted curve and ledger price.")
    ],
    tpot_p90_ms: Annotated[
        float | None,
        typer.Option(
            help="The TPOT p90 target, ms. Default: the plain-decoding TPOT p90 at the "
            "curve's breakeven concurrency."
        ),
    ] = None,
    output_format: Annotated[
        str, typer.Option("--format", help="yaml (a RayService fragment), json or text.")
    ] = "yaml",
    application: Annotated[
        str | None, typer.Option(help="Serve application name (default: the deployment).")
    ] = None,
    import_path: Annotated[
        str, typer.Option(help="The Serve application's import path.")
    ] = "serve_app:app",
    gpus_per_node: Annotated[
        int, typer.Option(min=1, help="GPUs of a worker node (p4d.24xlarge: 8).")
    ] = 8,
    gpus_per_replica: Annotated[
        int, typer.Option(min=1, help="GPUs of a Serve replica (tensor-parallel size).")
    ] = 8,
    max_nodes: Annotated[
        int, typer.Option(min=1, help="Worker nodes run today (the static fleet compared).")
    ] = 4,
    max_num_seqs: Annotated[
        int | None, typer.Option(min=1, help="The engine's max_num_seqs per replica.")
    ] = None,
    weeks: Annotated[int, typer.Option(min=1, help="Weeks of measured load.")] = 4,
    price_deployment: Annotated[
        str | None,
        typer.Option(help="Whose ledger cost prices a node-hour (default: --deployment)."),
    ] = None,
    price_month: Annotated[
        Month | None,
        typer.Option(help="Month of the price (default: latest allocated).", parser=parse_month),
    ] = None,
    image: Annotated[str, typer.Option(help="Worker image (yaml output).")] = (
        "rayproject/ray:2.60.0-gpu"
    ),
) -> None:
    """Ray Serve autoscaling_config and max_ongoing_requests, and the KubeRay worker group's
    minReplicas/maxReplicas, for a TPOT p90 target at the deployment's measured load (p90 of
    concurrent sessions per hour of week), with speculation per band of requests per
    replica from its fitted breakeven curve and the monthly cost with and without the
    advice at the ledger's node-hour price."""
    from app.autoscaling.render import advice_json, advice_text, advice_yaml
    from app.autoscaling.service import RayAdviceRequest, ray_advice
    from app.db import read_session
    from app.settings import get_settings

    if output_format not in _FORMATS:
        raise typer.BadParameter("--format must be yaml, json or text")
    settings = get_settings()
    request = RayAdviceRequest(
        deployment=deployment,
        tpot_target_s=tpot_p90_ms / 1000 if tpot_p90_ms is not None else None,
        application=application,
        import_path=import_path,
        gpus_per_node=gpus_per_node,
        gpus_per_replica=gpus_per_replica,
        max_nodes=max_nodes,
        max_concurrency_per_replica=max_num_seqs,
        weeks=weeks,
        price_deployment=price_deployment,
        price_month=price_month,
        currency=settings.default_currency,
    )
    with user_errors(), open_engine(settings) as engine, read_session(engine) as session:
        advice = ray_advice(
            session, request, now=datetime.now(UTC), s3_endpoint_url=settings.s3_endpoint_url
        )
        if output_format == "json":
            typer.echo(advice_json(advice))
        elif output_format == "text":
            typer.echo(advice_text(advice), nl=False)
        else:
            typer.echo(advice_yaml(advice, image=image), nl=False)


def register(app: typer.Typer) -> None:
    """Add ``advise``."""
    app.add_typer(advise_app, name="advise")
