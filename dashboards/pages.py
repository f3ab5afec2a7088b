"""HTML pages around the figures: a header with navigation, the scope, and the plots.

Pages hold no data access: the router (served) and the CLI (static export) pass in frames from
:mod:`dashboards.data`. Plotly's JavaScript comes from the installed ``plotly`` package, either
as a ``<script src>`` the caller serves or inline; never from a CDN (the service runs offline).
"""

import functools
import html
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import plotly
import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from dashboards import figures

PAGES: dict[str, str] = {
    "cost": "Cost",
    "breakeven": "Breakeven",
    "speculation": "Speculation health",
    "tiers": "Tiers",
    "budgets": "Budgets",
}
"""Page name (URL path and file stem) -> title, in navigation order."""

PLOTLY_JS_NAME = "plotly.min.js"
_RESIZE = (
    "<script>window.addEventListener('load',function(){"
    "document.querySelectorAll('.js-plotly-plot').forEach(function(el){"
    "Plotly.Plots.resize(el);});});</script>"
)
"""Plots drawn while the grid was still laid out get their card's final width."""
_PLOT_CONFIG = {"displaylogo": False, "responsive": True}
_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#222;
background:#f6f7f9}
header{background:#1f2a37;color:#fff;padding:10px 24px;display:flex;gap:24px;
align-items:center;flex-wrap:wrap}
header .brand{font-weight:700;font-size:18px}
nav a{color:#cbd5e1;text-decoration:none;margin-right:16px;font-size:15px}
nav a.active{color:#fff;border-bottom:2px solid #60a5fa;padding-bottom:3px}
.scope{margin-left:auto;font-size:14px;color:#e2e8f0}
main{padding:16px 24px;max-width:1400px;margin:0 auto}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:16px}
.card{background:#fff;border-radius:8px;box-shadow:0 1px 3px rgba(0,0,0,.12);padding:8px;
min-width:0;overflow:hidden}
.card.wide{grid-column:1/-1}
.note{color:#555;font-size:14px;margin:6px 4px 14px}
pre{background:#f1f5f9;padding:8px;border-radius:6px;overflow-x:auto;font-size:13px}
form.controls{display:inline-flex;gap:8px;align-items:center;font-size:14px}
form.controls input{font-size:13px;padding:2px 4px}
table.claims,table.waste{border-collapse:collapse;font-size:13px;margin:4px}
table.claims th,table.claims td,table.waste th,table.waste td{border-bottom:1px solid #e2e8f0;
padding:4px 8px;text-align:left;vertical-align:top}
table.waste td.num{text-align:right;white-space:nowrap}
h2{font-size:16px;margin:4px}
table.claims td.flag{color:#b91c1c;font-weight:600}
"""


@dataclass(frozen=True)
class PageContext:
    """What every page needs besides its data."""

    month: str
    team: str | None
    """The team the viewer is limited to (or chose, as an administrator); None: all teams."""
    href: Callable[[str], str]
    """Link to another page by name (served URL or exported file name)."""
    plotly_script: str
    """The ``<script>`` element that loads plotly.js (see :func:`plotly_script_tag`)."""
    controls: bool = True
    """Show the month form (served pages; not in a static export)."""
    team_choice: bool = False
    """An administrator may type a team to see its view."""


def plotly_script_tag(src: str | None) -> str:
    """``<script src=...>`` for a served or exported copy of plotly.js; inline when None."""
    if src is None:
        return f"<script>{plotly_js()}</script>"
    return f'<script src="{html.escape(src)}"></script>'


@functools.cache
def plotly_js() -> str:
    """The minified plotly.js bundled with the installed plotly package (read once)."""
    return str(get_plotlyjs())


def plotly_version() -> str:
    return str(plotly.__version__)


def figure_html(fig: go.Figure, div_id: str) -> str:
    """A figure as an HTML fragment; plotly.js must already be loaded by the page."""
    fragment: str = pio.to_html(
        fig,
        full_html=False,
        include_plotlyjs=False,
        div_id=div_id,
        config=_PLOT_CONFIG,
        validate=False,
    )
    return fragment


def _card(content: str, *, wide: bool = False) -> str:
    return f'<div class="card{" wide" if wide else ""}">{content}</div>'


def _controls(ctx: PageContext) -> str:
    if not ctx.controls:
        return ""
    team = ""
    if ctx.team_choice:
        team = (
            '<label>team <input name="team" size="12" placeholder="all" value="'
            f'{html.escape(ctx.team or "")}"></label>'
        )
    return (
        f'<form class="controls" method="get"><label>month <input name="month" '
        f'type="month" value="{html.escape(ctx.month)}"></label>{team}'
        '<button type="submit">show</button></form>'
    )


def render(ctx: PageContext, page: str, cards: Sequence[str], *, intro: str = "") -> str:
    """A whole page: header, navigation, scope line, then the cards in a grid."""
    nav = "".join(
        f'<a href="{html.escape(ctx.href(name))}"'
        f"{' class=active' if name == page else ''}>{html.escape(title)}</a>"
        for name, title in PAGES.items()
    )
    scope = f"team {ctx.team}" if ctx.team else "all teams"
    title = PAGES[page]
    return (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>SpecLedger · {html.escape(title)}</title><style>{_STYLE}</style>"
        f"{ctx.plotly_script}</head><body>"
        f'<header><span class="brand">SpecLedger</span><nav>{nav}</nav>'
        f'<span class="scope" data-scope="{html.escape(ctx.team or "*")}">'
        f"{html.escape(scope)} · {html.escape(ctx.month)} {_controls(ctx)}</span></header>"
        f"<main><h1>{html.escape(title)}</h1>"
        f"{f'<p class=note>{intro}</p>' if intro else ''}"
        f'<div class="grid">{"".join(cards)}</div></main>{_RESIZE}</body></html>\n'
    )


def cost_page(
    ctx: PageContext,
    *,
    ledger: pd.DataFrame,
    usage: pd.DataFrame,
    sessions: pd.DataFrame,
    reconciliation: pd.DataFrame,
    slurm: pd.DataFrame | None = None,
    waste: pd.DataFrame | None = None,
) -> str:
    """Cost by team, unit costs, idle share and the reconciliation tile; with ``slurm``
    (:func:`dashboards.data.slurm_usage_frame`) counting a job, the Slurm clusters' GPU-hours
    and cost by account and partition too (no panel where nobody runs Slurm); with ``waste``
    (:func:`dashboards.data.waste_frame`), the month's waste findings as a table."""
    cards = [
        _card(figure_html(figures.cost_by_team_figure(ledger), "cost-by-team"), wide=True),
        _card(figure_html(figures.reconciliation_figure(reconciliation), "reconciliation")),
        _card(
            figure_html(figures.idle_share_figure(ledger), "idle-share")
            if ctx.team is None
            else figure_html(
                figures.empty_figure("Idle share of cost", "Idle GPU cost belongs to no team"),
                "idle-share",
            )
        ),
        _card(
            figure_html(figures.unit_cost_figure(ledger, usage, sessions), "unit-cost"), wide=True
        ),
    ]
    intro = (
        "Effective (amortised) cost from the month's current allocation run; unit costs "
        "divide a team's request and shared cost by its session-seconds and tokens."
    )
    if slurm is not None and figures.has_slurm_jobs(slurm):
        cards.append(
            _card(figure_html(figures.slurm_usage_figure(slurm), "slurm-usage"), wide=True)
        )
        intro += (
            " Slurm: GPU-hours are the jobs' allocated GPUs over their run time; cost is "
            "their share of the nodes' bill, a node's unused GPUs as (idle)."
        )
    if waste is not None:
        cards.append(_card(_waste_table(waste), wide=True))
    return render(ctx, "cost", cards, intro=intro)


_WASTE_NAMES = {
    "idle_gpu": "idle GPUs",
    "low_acceptance": "low acceptance",
    "above_breakeven": "speculating above the breakeven",
    "unpaid_draft_positions": "unpaid draft positions",
    "draft_memory": "draft model memory",
    "acceptance_drift": "acceptance drift",
}


def _waste_table(waste: pd.DataFrame) -> str:
    """The waste findings, money in cents with thousands separators (the API has the micros)."""
    title = "<h2>Waste this month</h2>"
    if waste.empty:
        return f"{title}<p class=note>No waste found with the default thresholds.</p>"
    head = (
        "<tr><th>finding</th><th>where</th><th>cost this month</th>"
        "<th>estimated per month</th><th>what to do</th></tr>"
    )
    rows = [
        f"<tr><td>{html.escape(_WASTE_NAMES.get(str(row['kind']), str(row['kind'])))}</td>"
        f"<td>{html.escape(str(row['scope']))} {html.escape(str(row['key']))}</td>"
        f"<td class=num>{figures.money_2dp(int(row['window_micros']))} "
        f"{html.escape(str(row['currency']))}</td>"
        f"<td class=num>{figures.money_2dp(int(row['monthly_micros']))} "
        f"{html.escape(str(row['currency']))}</td>"
        f"<td>{html.escape(str(row['action']))}</td></tr>"
        for row in waste.to_dict("records")
    ]
    return f"{title}<table class=waste>{head}{''.join(rows)}</table>"


def speculation_page(ctx: PageContext, *, usage: pd.DataFrame) -> str:
    """Acceptance rate per deployment and team, and mean acceptance length."""
    cards = [
        _card(
            figure_html(
                figures.acceptance_rate_figure(usage, by="deployment"), "acceptance-deployment"
            )
        ),
        _card(figure_html(figures.acceptance_rate_figure(usage, by="team"), "acceptance-team")),
        _card(figure_html(figures.acceptance_length_figure(usage), "acceptance-length"), wide=True),
    ]
    intro = (
        "Acceptance rate = accepted / drafted tokens. Below 50% the drafter costs more "
        "verification work than it saves: lower k or change the drafter."
    )
    return render(ctx, "speculation", cards, intro=intro)


def breakeven_page(
    ctx: PageContext,
    *,
    points: pd.DataFrame,
    curve: pd.DataFrame,
    summary: pd.DataFrame,
    schedule: pd.DataFrame,
    sweep: dict[str, Any] | None,
    fit: dict[str, Any] | None,
    message: str | None,
) -> str:
    """The breakeven curve of a sweep and the vLLM schedule it implies."""
    fig = figures.breakeven_figure(points, curve, summary, schedule)
    cards = [_card(figure_html(fig, "breakeven"), wide=True)]
    details = []
    if sweep is not None:
        details.append(
            f"Sweep <b>{html.escape(str(sweep['name']))}</b> (id {sweep['id']}"
            f"{', deployment ' + html.escape(str(sweep['deployment'])) if sweep.get('deployment') else ''})."
        )
    if message:
        details.append(html.escape(message))
    if fit is not None:
        at, ci = fit.get("breakeven_concurrency"), fit.get("breakeven_ci")
        if at is None:
            details.append("No breakeven in the measured range.")
        else:
            interval = f" (95% interval {_num(ci[0])}–{_num(ci[1])})" if ci else ""
            details.append(
                f"Breakeven at {_num(at)} concurrent requests{interval} for "
                f"{html.escape(str(fit.get('config')))}."
            )
            if ci:
                method = fit.get("interval_method") or "a residual bootstrap of the fitted model"
                details.append(f"The interval is {html.escape(str(method))}.")
            if fit.get("pinned_down") is False and fit.get("next_levels"):
                levels = ",".join(str(level) for level in fit["next_levels"])
                details.append(
                    "The measured levels do not pin the crossing down: measure concurrency "
                    f"<code>{html.escape(levels)}</code> next."
                )
        schedule_json = json.dumps(
            {"num_speculative_tokens_per_batch_size": fit.get("schedule") or []}
        )
        details.append(
            "vLLM speculative config for the fitted schedule "
            f"(<code>specledger breakeven apply</code> writes it):"
            f"<pre>{html.escape(schedule_json)}</pre>"
        )
    if details:
        cards.append(_card("<div class=note>" + "<br>".join(details) + "</div>", wide=True))
    return render(
        ctx,
        "breakeven",
        cards,
        intro="Measured speedup of each speculative config "
        "over plain decoding, the fitted step-time model, the breakeven concurrency "
        "with its bootstrap interval, and the best k per concurrency band (shaded).",
    )


def _num(value: object) -> str:
    if value is None:
        return "unbounded"
    return f"{float(value):.2f}"  # type: ignore[arg-type]


_CLAIM_NAMES = {
    "usd_per_month": "cost per month",
    "usd_per_1k_session_seconds": "cost per 1K session-seconds",
    "speedup": "speedup",
}


def _claim_value(claim: str, value: float) -> str:
    if claim == "speedup":
        return f"{value:.2f}x"
    return f"${value:,.0f}" if value >= 100 else f"${value:.4f}"


def _claim_span(claim: str, low: float, high: float) -> str:
    if math.isnan(low):
        return "-"
    first, last = _claim_value(claim, low), _claim_value(claim, high)
    return first if first == last else f"{first} to {last}"


def _claims_table(quoted: pd.DataFrame) -> str:
    """The brief's figures beside the computed and measured ones, each flagged, with why."""
    head = (
        "<tr><th>tier</th><th>figure</th><th>quoted (source)</th><th>computed</th>"
        "<th>measured (ledger, this month)</th><th>computed vs quoted</th><th>why</th></tr>"
    )
    rows = []
    for row in quoted.to_dict("records"):
        claim, verdict = str(row["claim"]), str(row["verdict"])
        measured = float(row["measured"])
        flag = "" if verdict == "within" else " class=flag"
        rows.append(
            f"<tr><td>{html.escape(str(row['tier']))}</td>"
            f"<td>{html.escape(_CLAIM_NAMES.get(claim, claim))}</td>"
            f"<td>{_claim_span(claim, row['quoted_low'], row['quoted_high'])}<br>"
            f'<small title="{html.escape(str(row["text"]))}">'
            f"{html.escape(str(row['source']))}</small></td>"
            f"<td>{_claim_span(claim, row['computed_low'], row['computed_high'])}</td>"
            f"<td>{_claim_span(claim, measured, measured)}</td>"
            f"<td{flag}>{html.escape(verdict)}</td>"
            f"<td>{html.escape(str(row['reason']))}</td></tr>"
        )
    return f"<table class=claims>{head}{''.join(rows)}</table>"


def tiers_page(
    ctx: PageContext,
    *,
    modelled: pd.DataFrame,
    quoted: pd.DataFrame,
    measured: pd.DataFrame,
    catalog_found: bool,
) -> str:
    """Cost per 1K session-seconds against concurrency for the tiers, and the brief's quoted
    figures against the computed and measured ones."""
    cards = [
        _card(figure_html(figures.tiers_figure(modelled, quoted, measured), "tiers"), wide=True)
    ]
    notes = [
        "Lines: the catalog's on-demand price of the tier's instances spread over the "
        "concurrent sessions (every active session accrues one session-second per second). "
        "Diamonds: the product brief's quoted figure, a claim checked against the computed one. "
        "Dots: what the ledger measured for deployments registered with that tier."
    ]
    if not catalog_found:
        notes.append("The tier catalog (app/data/tiers.json) is missing or not valid.")
    elif quoted.empty:
        notes.append("The catalog carries no quoted figures to compare with.")
    else:
        cards.append(_card(_claims_table(quoted), wide=True))
    cards.append(_card("<div class=note>" + "<br>".join(notes) + "</div>", wide=True))
    return render(ctx, "tiers", cards)


def budgets_page(ctx: PageContext, *, views: Sequence[figures.BudgetView]) -> str:
    """A burn-up per budget: spend so far, the period-end forecast and its interval, the
    budget, the hard limit and the brownout steps before it (since when each is taken)."""
    cards = [
        _card(figure_html(figures.budget_burn_figure(view), f"budget-{index}"), wide=True)
        for index, view in enumerate(views)
    ] or [
        _card(
            "<p>No budgets yet. Create one with <code>specledger budgets create NAME "
            "--scope team=T --amount 1000</code> or <code>POST /v1/budgets</code>.</p>"
        )
    ]
    intro = (
        "Spend is the ledger where it has allocated, plus metered GPU-seconds at the "
        "deployment's latest unit cost since; the forecast is a linear trend with "
        "day-of-week levels and AR(1) errors, with its prediction interval. Dotted lines "
        "are brownout steps: from there the proxy warns the scope's callers or routes its "
        "requests to a cheaper deployment, before the hard limit refuses them."
    )
    return render(ctx, "budgets", cards, intro=intro)
