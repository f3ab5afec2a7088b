"""``specledger speculation``: speculation health, e.g. which draft positions pay."""

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer

from app.cli._support import open_engine, user_errors
from app.domain.windows import GRAMMAR, parse_window

if TYPE_CHECKING:
    from app.speculation.schemas import DeploymentPositionsRead

speculation_app = typer.Typer(
    help="Speculation health: acceptance per draft position and the k it advises.",
    no_args_is_help=True,
)


def positions(
    deployment: Annotated[str | None, typer.Option(help="Only this deployment.")] = None,
    window: Annotated[str, typer.Option(help=f"The time window: {GRAMMAR}.")] = "7d",
    team: Annotated[str | None, typer.Option(help="Only this team's requests.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Acceptance of each draft position per deployment, from vLLM's per-request
    acceptance histograms (the proxy keeps them with --per-request-spec-decode-metrics),
    the positions that pay and the num_speculative_tokens to set. A position's cost comes
    from the deployment's stored breakeven fit at its mean concurrency, or else from a
    floor of 0.25 tokens per step (see app/speculation/rules/positions.py)."""
    from app.db import read_session
    from app.settings import get_settings
    from app.speculation.positions import positions_report
    from app.speculation.schemas import positions_read

    settings = get_settings()
    with user_errors():
        parsed = parse_window(window, now=datetime.now(UTC))
        with open_engine(settings) as engine, read_session(engine) as session:
            report = positions_report(
                session,
                window=parsed,
                team=team,
                deployment=deployment,
                s3_endpoint_url=settings.s3_endpoint_url,
            )
    body = positions_read(report)
    if as_json:
        typer.echo(json.dumps(body.model_dump(mode="json"), indent=2))
        return
    if not body.deployments:
        typer.echo(
            f"no speculative requests with an acceptance histogram in "
            f"{parsed.start:%Y-%m-%d %H:%M}Z..{parsed.end:%Y-%m-%d %H:%M}Z"
        )
    for found in body.deployments:
        typer.echo("\n".join(_lines(found)))


def _lines(found: "DeploymentPositionsRead") -> list[str]:
    length = "-" if found.mean_acceptance_length is None else f"{found.mean_acceptance_length}"
    basis = (
        f"costs from sweep {found.sweep_id}'s fit at concurrency {found.mean_concurrency}"
        if found.sweep_id is not None
        else "costs: 0.25 tokens per step per position (no fit of this method)"
    )
    lines = [
        f"{found.deployment}  {found.method} k={found.k}  {found.requests} requests, "
        f"{found.steps} steps, mean acceptance length {length}; {basis}",
        "  position  drafted  accepted    rate    cost  pays",
    ]
    lines += [
        f"  {p.position:>8}  {p.drafted:>7}  {p.accepted:>8}  {p.rate:>6.1%}  {p.cost:>6.3f}  "
        f"{'yes' if p.pays else 'no'}"
        for p in found.positions
    ]
    if found.short_drafts:
        lines.append("  some steps drafted fewer than k (dynamic k): the rates are lower bounds")
    lines.append(f"  {found.advice}")
    return lines


def register(app: typer.Typer) -> None:
    speculation_app.command("positions")(positions)
    app.add_typer(speculation_app, name="speculation")
