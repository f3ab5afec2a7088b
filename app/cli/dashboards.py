"""``specledger dashboards export``: the dashboards as static HTML files.

Mounted on the main CLI with ``register(app)``.
"""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from app.cli._support import open_engine, parse_month, user_errors

if TYPE_CHECKING:
    from sqlalchemy import Engine

dashboards_app = typer.Typer(
    help="Plotly dashboards (also served by `specledger serve` under /dashboards).",
    no_args_is_help=True,
)


def export_pages(
    engine: "Engine",
    out_dir: Path,
    *,
    month: str | None = None,
    team: str | None = None,
    inline: bool = False,
) -> list[Path]:
    """Write every dashboard page as ``<page>.html`` (plus ``index.html``) into ``out_dir``.

    Args:
        engine: The database.
        out_dir: Folder to write; created if needed.
        month: ``YYYY-MM``; default: the newest allocated month.
        team: Limit every page to this team's data.
        inline: Embed plotly.js in each page instead of writing ``plotly.min.js`` once.

    Returns:
        The files written.
    """
    from dashboards import breakeven_data, data, pages

    chosen = month or data.default_month(engine)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    script = pages.plotly_script_tag(None if inline else pages.PLOTLY_JS_NAME)
    if not inline:
        asset = out_dir / pages.PLOTLY_JS_NAME
        asset.write_text(pages.plotly_js(), "utf-8")
        written.append(asset)
    ctx = pages.PageContext(
        month=chosen,
        team=team,
        href=lambda page: f"{page}.html",
        plotly_script=script,
        controls=False,
    )
    breakeven = breakeven_data.breakeven_frames(engine)
    tiers = breakeven_data.tier_frames(engine, month=chosen, team=team)
    usage = data.usage_by_hour(engine, month=chosen, team=team)
    rendered = {
        "cost": pages.cost_page(
            ctx,
            ledger=data.ledger_by_hour(engine, month=chosen, team=team),
            usage=usage,
            sessions=data.session_seconds_by_hour(engine, month=chosen, team=team),
            reconciliation=data.reconciliation_frame(engine, month=chosen, team=team),
            slurm=data.slurm_usage_frame(engine, month=chosen, team=team),
        ),
        "breakeven": pages.breakeven_page(
            ctx,
            points=breakeven.points,
            curve=breakeven.curve,
            summary=breakeven.summary,
            schedule=breakeven.schedule,
            sweep=breakeven.sweep,
            fit=breakeven.fit,
            message=breakeven.message,
        ),
        "speculation": pages.speculation_page(ctx, usage=usage),
        "tiers": pages.tiers_page(
            ctx,
            modelled=tiers.modelled,
            quoted=tiers.quoted,
            measured=tiers.measured,
            catalog_found=tiers.catalog_found,
        ),
        "budgets": pages.budgets_page(
            ctx, views=data.budget_views(engine, month=chosen, team=team)
        ),
    }
    for name, text in rendered.items():
        path = out_dir / f"{name}.html"
        path.write_text(text, "utf-8")
        written.append(path)
    index = out_dir / "index.html"
    index.write_text(
        '<!doctype html><meta http-equiv="refresh" content="0; url=cost.html">'
        '<a href="cost.html">SpecLedger dashboards</a>\n',
        "utf-8",
    )
    written.append(index)
    return written


@dashboards_app.command("export")
def export(
    out: Annotated[Path, typer.Option("--out", help="Folder to write the HTML files into.")],
    team: Annotated[
        str | None, typer.Option(help="Only this team's data (what its key would see).")
    ] = None,
    month: Annotated[
        str | None, typer.Option(help="Month YYYY-MM; default: the newest allocated month.")
    ] = None,
    inline: Annotated[
        bool,
        typer.Option(help="Embed plotly.js in every page (larger files, each one self-contained)."),
    ] = False,
) -> None:
    """Write the cost, breakeven, speculation and tiers dashboards as static HTML files."""
    from app.settings import get_settings

    if month is not None:
        month = str(parse_month(month))
    with user_errors(), open_engine(get_settings()) as engine:
        written = export_pages(engine, out, month=month, team=team, inline=inline)
    for path in written:
        typer.echo(str(path))


def register(app: typer.Typer) -> None:
    """Add the ``dashboards`` command group to a Typer app."""
    app.add_typer(dashboards_app, name="dashboards")
