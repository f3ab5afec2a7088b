"""CLI commands for load sweeps, the breakeven fit, its schedule and the tiers (mounted by
app.cli)."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from app.cli._support import open_engine, user_errors

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

breakeven_app = typer.Typer(
    help="When speculation pays off: load sweeps, the breakeven fit, the vLLM schedule.",
    no_args_is_help=True,
)
tiers_app = typer.Typer(
    help="The maturity tiers: costs with and without speculation, advice.", no_args_is_help=True
)

JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
T = TypeVar("T")


@breakeven_app.command("fit")
def fit(
    path: Annotated[
        Path,
        typer.Argument(
            help="Sweep CSV: one row per (config, concurrency) "
            "with config, method, k, concurrency, "
            "output_tokens_per_s, tpot_p50_s, acceptance_rate, "
            "mean_acceptance_length."
        ),
    ],
    as_json: JsonOption = False,
    bootstrap: Annotated[
        int,
        typer.Option(
            min=0, help="Bootstrap refits for the breakeven confidence interval (0: none)."
        ),
    ] = 200,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap.")] = 0,
    store: Annotated[
        bool, typer.Option(help="Store the sweep and its fit in the database.")
    ] = True,
    deployment: Annotated[
        str | None,
        typer.Option(
            help="The registered deployment this sweep measured: its waste findings, "
            "autoscaling advice and `breakeven apply` then use this sweep."
        ),
    ] = None,
) -> None:
    """Fit the step-time model to a sweep and report the breakeven concurrency.

    Prints the parameters with standard errors, predicted against measured speedup per
    concurrency, the breakeven with a bootstrap 95% interval (or that the curves do not cross
    in the measured range, with the speedup at its edges), the inflection point, the acceptance
    needed at each concurrency, and the best k per batch size as vLLM's
    num_speculative_tokens_per_batch_size. Degenerate input exits with status 2 and names the
    file, row and column.
    """
    from sqlalchemy.orm import Session

    from app.breakeven import service
    from app.breakeven.render import fit_report
    from app.settings import get_settings

    with user_errors():
        if store:
            with (
                open_engine(get_settings()) as engine,
                Session(engine) as session,
                session.begin(),
            ):
                outcome = service.fit_sweep_file(
                    session,
                    path=path,
                    bootstrap_samples=bootstrap,
                    seed=seed,
                    deployment=deployment,
                )
        else:
            outcome = service.fit_sweep_file(
                None, path=path, bootstrap_samples=bootstrap, seed=seed, deployment=deployment
            )
    if as_json:
        typer.echo(json.dumps(outcome.body, indent=2))
    else:
        typer.echo(
            fit_report(
                outcome.fit,
                source=str(path),
                sweep_id=outcome.sweep_id,
                scheduled_rows=outcome.scheduled_rows,
                schedule_checks=outcome.schedule_checks,
            )
        )


@breakeven_app.command("apply")
def apply(
    deployment: Annotated[
        str,
        typer.Option(
            help="Registered deployment; its engine config is <engines-dir>/<deployment>.json."
        ),
    ],
    sweep: Annotated[
        int | None,
        typer.Option(
            help="Use the fit stored with this sweep (default: the deployment's newest fitted "
            "sweep, else the newest fitted sweep of no deployment)."
        ),
    ] = None,
    fit_file: Annotated[
        Path | None, typer.Option("--fit", help="Use a fit saved with `breakeven fit --json`.")
    ] = None,
    engines_dir: Annotated[
        Path | None,
        typer.Option(help="Folder of engine configs (default: engines/ in SPECLEDGER_DATA_DIR)."),
    ] = None,
    min_k: Annotated[
        int,
        typer.Option(
            min=0,
            help="Raise bands below this k to it. vLLM's k=0 path with the drafter loaded "
            "ran 16% slower than plain decoding at concurrency 64 on the example CPU sweep, k=1 "
            "only 5% slower; 0 writes the fitted k=0 bands as they are.",
        ),
    ] = 1,
) -> None:
    """Write the fitted speculation schedule into a deployment's engine config.

    Updates the registry (the deployment's engine_config) and the engine JSON file, so that
    `specledger engine start --config <engines-dir>/<deployment>.json` runs vLLM with
    num_speculative_tokens_per_batch_size: speculate where it pays, not above the breakeven.
    """
    from sqlalchemy.orm import Session

    from app.settings import get_settings
    from serving.engine.schedule import apply_schedule

    settings = get_settings()
    with (
        user_errors(),
        open_engine(settings) as engine,
        Session(engine) as session,
        session.begin(),
    ):
        applied = apply_schedule(
            session,
            deployment=deployment,
            sweep_id=sweep,
            fit_path=fit_file,
            engines_dir=engines_dir or settings.engines_dir,
            min_k=min_k,
        )
    bands = json.dumps([[b.start, b.end, b.k] for b in applied.bands])
    typer.echo(
        f"deployment {deployment}: schedule {bands} from {applied.source} written to "
        f"{applied.engine_path} and the registry"
    )
    if applied.note:
        typer.echo(f"note: {applied.note}")
    typer.echo(f"next start: specledger engine start --config {applied.engine_path}")


def _with_session(sweep: int | None, ask: "Callable[[Session | None], T]") -> T:
    """Ask with a database session when a sweep is named; the catalog alone needs none."""
    from app.db import read_session
    from app.settings import get_settings

    if sweep is None:
        return ask(None)
    with open_engine(get_settings()) as engine, read_session(engine) as session:
        return ask(session)


@tiers_app.command("show")
def tiers_show(
    as_json: JsonOption = False,
    sweep: Annotated[
        int | None, typer.Option(help="Take acceptance and the TPOT tail from this fitted sweep.")
    ] = None,
) -> None:
    """Show the three tiers: price per hour and month, the modelled replica, and cost per 1K
    session-seconds and per 1M tokens with and without speculation across each tier's session
    range; beside them the brief's quoted monthly cost, cost per 1K session-seconds and
    speedup (with their source), each flagged within, below or above the computed figure, with
    the reason, and with --sweep the speedup the sweep measured."""
    from app.breakeven import tiers
    from app.breakeven.render import tiers_text

    with user_errors():
        report = _with_session(sweep, lambda session: tiers.tiers_report(session, sweep_id=sweep))
    typer.echo(json.dumps(report, indent=2) if as_json else tiers_text(report))


@tiers_app.command("recommend")
def tiers_recommend(
    concurrency: Annotated[int, typer.Option(min=1, help="Concurrent sessions to serve.")],
    tpot_p90: Annotated[float, typer.Option(help="Target p90 time per output token, seconds.")],
    sweep: Annotated[
        int | None, typer.Option(help="Take acceptance and the TPOT tail from this fitted sweep.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Recommend the cheapest tier that meets a TPOT p90 target at a concurrency, with the
    speculation mode to run and the reasoning for every tier, and the brief's quoted figures
    against the computed ones at that load."""
    from app.breakeven import recommendation
    from app.breakeven.render import recommendation_text

    with user_errors():
        result = _with_session(
            sweep,
            lambda session: recommendation.tier_recommendation(
                session, concurrency=concurrency, tpot_p90_s=tpot_p90, sweep_id=sweep
            ),
        )
    typer.echo(json.dumps(result, indent=2) if as_json else recommendation_text(result))


def register(app: typer.Typer) -> None:
    """Mount ``breakeven`` and ``tiers`` on the main CLI."""
    from app.cli.sweep import sweep

    breakeven_app.command("sweep")(sweep)
    app.add_typer(breakeven_app, name="breakeven")
    app.add_typer(tiers_app, name="tiers")
