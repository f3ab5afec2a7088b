"""Dashboard figures: pure functions from DataFrames to Plotly figures (no I/O, no database).

Every function accepts the frames that :mod:`dashboards.data` builds; the columns each one needs
are listed in its docstring. Money arrives as integer micros and is shown in currency units;
hover labels carry the exact decimal amount. An empty frame gives a figure that says
"No data yet" instead of raising.
"""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.domain import measures
from app.domain.ledger import CostLabel

NO_DATA = "No data yet"
ACCEPTANCE_THRESHOLD = 0.5
"""Acceptance below this rate is waste (DESIGN.md, Waste)."""

SPECIAL_LABELS = (CostLabel.idle, CostLabel.unallocated, CostLabel.shared, CostLabel.no_team)
_SPECIAL_COLOURS: dict[str, str] = {
    CostLabel.idle: "#b0b0b0",
    CostLabel.unallocated: "#e45756",
    CostLabel.shared: "#9d755d",
    CostLabel.no_team: "#d4a6c8",
}
_PALETTE = (
    "#4c78a8",
    "#f58518",
    "#54a24b",
    "#b279a2",
    "#72b7b2",
    "#eeca3b",
    "#ff9da6",
    "#79706e",
    "#2f4b7c",
    "#a05195",
)
_BAND_COLOURS = ("#dbe9f6", "#fde7cf", "#dcefd8", "#efe0ee", "#f9f2cc", "#e8e8e8")
_LAYOUT = {
    "template": "plotly_white",
    "margin": {"l": 60, "r": 30, "t": 60, "b": 50},
    "height": 420,
    "legend": {"orientation": "h", "y": -0.18},
}
_DAY_GRAIN_AFTER_DAYS = 2
"""Hourly frames spanning more than this many days are shown per day."""


def _figure(title: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title={"text": title}, **_LAYOUT)
    return fig


def empty_figure(title: str, message: str = NO_DATA) -> go.Figure:
    """A blank figure whose only content is ``message`` in the middle (e.g. "No data yet")."""
    fig = _figure(title)
    fig.update_layout(xaxis={"visible": False}, yaxis={"visible": False})
    fig.add_annotation(
        text=message,
        x=0.5,
        y=0.5,
        xref="paper",
        yref="paper",
        showarrow=False,
        font={"size": 18, "color": "#666"},
        name="no-data",
    )
    return fig


def colour_map(labels: Iterable[str]) -> dict[str, str]:
    """A stable colour per label: special buckets grey/red/brown, teams from a palette."""
    names = sorted({str(label) for label in labels} - set(SPECIAL_LABELS))
    colours = {name: _PALETTE[i % len(_PALETTE)] for i, name in enumerate(names)}
    colours.update(_SPECIAL_COLOURS)
    return colours


def _money(micros: int) -> str:
    return str(Decimal(int(micros)).scaleb(-6).quantize(Decimal("0.000001")))


def money_2dp(micros: int) -> str:
    """Money for a label: cents and thousands separators (``1,234.50``), exact."""
    return f"{Decimal(int(micros)).scaleb(-6):,.2f}"


def _grain(periods: pd.Series) -> str:
    """``h`` or ``D``: per day once the data spans more than a couple of days."""
    span = periods.max() - periods.min()
    return "D" if span > pd.Timedelta(days=_DAY_GRAIN_AFTER_DAYS) else "h"


def _bucket(frame: pd.DataFrame, grain: str) -> pd.DataFrame:
    out = frame.copy()
    out["period_start"] = pd.to_datetime(out["period_start"], utc=True).dt.floor(grain)
    return out


def _main_currency(frame: pd.DataFrame) -> tuple[pd.DataFrame, str, list[str]]:
    """Rows of the currency with the largest absolute cost, its code, and the codes left out."""
    if "currency" not in frame.columns or frame["currency"].nunique() <= 1:
        code = str(frame["currency"].iloc[0]) if "currency" in frame.columns else ""
        return frame, code, []
    totals = frame.groupby("currency")["effective_micros"].apply(lambda s: s.abs().sum())
    code = str(totals.idxmax())
    return frame[frame["currency"] == code], code, sorted(str(c) for c in totals.index if c != code)


def _note(fig: go.Figure, text: str) -> None:
    fig.add_annotation(
        text=text,
        x=0,
        y=1.06,
        xref="paper",
        yref="paper",
        showarrow=False,
        xanchor="left",
        font={"size": 11, "color": "#666"},
    )


# ---------------------------------------------------------------------------------------- cost


def cost_by_team_figure(ledger: pd.DataFrame) -> go.Figure:
    """Effective cost per team over time, stacked (idle and unallocated are their own layers).

    Args:
        ledger: Columns ``period_start`` (UTC), ``team`` (label), ``effective_micros``,
            ``currency``; one row per hour and team as :func:`dashboards.data.ledger_by_hour`.
    """
    title = "Cost by team"
    if ledger.empty:
        return empty_figure(title)
    frame, currency, others = _main_currency(ledger)
    grain = _grain(frame["period_start"])
    frame = _bucket(frame, grain)
    grouped = (
        frame.groupby(["period_start", "team"])["effective_micros"]
        .sum()
        .reset_index()
        .sort_values(["period_start", "team"])
    )
    fig = _figure(f"{title} ({currency}, per {'day' if grain == 'D' else 'hour'})")
    colours = colour_map(grouped["team"])
    order = sorted(grouped["team"].unique(), key=lambda t: (t in SPECIAL_LABELS, t))
    for team in order:
        rows = grouped[grouped["team"] == team]
        micros = [int(m) for m in rows["effective_micros"]]
        fig.add_bar(
            name=team,
            x=list(rows["period_start"]),
            y=[m / 1e6 for m in micros],
            customdata=[[_money(m)] for m in micros],
            marker_color=colours[team],
            hovertemplate=f"{team}<br>%{{x}}<br>{currency} %{{customdata[0]}}<extra></extra>",
        )
    fig.update_layout(barmode="relative", yaxis_title=currency, xaxis_title=None, showlegend=True)
    if others:
        _note(fig, f"other currencies not shown: {', '.join(others)}")
    return fig


def _unit_cost_series(
    ledger: pd.DataFrame, usage: pd.DataFrame, sessions: pd.DataFrame, grain: str
) -> pd.DataFrame:
    cost = (
        _bucket(ledger[~ledger["team"].isin([CostLabel.idle, CostLabel.unallocated])], grain)
        .groupby(["period_start", "team"])["effective_micros"]
        .sum()
    )
    tokens = (
        _bucket(usage.assign(tokens=usage["prompt_tokens"] + usage["completion_tokens"]), grain)
        .groupby(["period_start", "team"])["tokens"]
        .sum()
    )
    seconds = _bucket(sessions, grain).groupby(["period_start", "team"])["session_seconds"].sum()
    joined = pd.concat([cost, tokens, seconds], axis=1).fillna(0).reset_index()
    joined = joined[joined["team"] != CostLabel.shared]
    per_ss = joined["effective_micros"] / 1e6 * 1000 / joined["session_seconds"]
    per_tok = joined["effective_micros"] / 1e6 * 1e6 / joined["tokens"]
    joined["per_1k_session_seconds"] = per_ss.where(joined["session_seconds"] > 0)
    joined["per_1m_tokens"] = per_tok.where(joined["tokens"] > 0)
    return joined.sort_values(["team", "period_start"])


def unit_cost_figure(
    ledger: pd.DataFrame, usage: pd.DataFrame, sessions: pd.DataFrame
) -> go.Figure:
    """Cost per 1K session-seconds and per 1M tokens (prompt + completion) per team over time.

    A team's cost is its requests' and shared entries' effective cost; idle and unallocated
    cost belong to no team and are left out (the reconciliation tile shows them).

    Args:
        ledger: As for :func:`cost_by_team_figure`.
        usage: ``period_start``, ``team``, ``prompt_tokens``, ``completion_tokens``.
        sessions: ``period_start``, ``team``, ``session_seconds`` (union of each session's
            request intervals, cut at the period boundaries).
    """
    title = "Unit cost"
    if ledger.empty or (usage.empty and sessions.empty):
        return empty_figure(title)
    ledger, currency, _ = _main_currency(ledger)
    grain = _grain(pd.concat([ledger["period_start"], sessions["period_start"]]))
    series = _unit_cost_series(ledger, usage, sessions, grain)
    if series[["per_1k_session_seconds", "per_1m_tokens"]].isna().all().all():
        return empty_figure(title)
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(f"{currency} per 1K session-seconds", f"{currency} per 1M tokens"),
    )
    fig.update_layout(title={"text": f"{title} per {'day' if grain == 'D' else 'hour'}"}, **_LAYOUT)
    colours = colour_map(series["team"])
    for team, rows in series.groupby("team", sort=True):
        for col, column in enumerate(("per_1k_session_seconds", "per_1m_tokens"), start=1):
            fig.add_scatter(
                name=str(team),
                legendgroup=str(team),
                showlegend=col == 1,
                x=list(rows["period_start"]),
                y=list(rows[column]),
                mode="lines+markers",
                line_color=colours[str(team)],
                connectgaps=False,
                row=1,
                col=col,
            )
    return fig


def idle_share_figure(ledger: pd.DataFrame) -> go.Figure:
    """Share of each period's effective cost that paid for idle GPUs.

    Args:
        ledger: As for :func:`cost_by_team_figure`; idle rows have team ``(idle)``.
    """
    title = "Idle share of cost"
    if ledger.empty:
        return empty_figure(title)
    frame, _, _ = _main_currency(ledger)
    grain = _grain(frame["period_start"])
    frame = _bucket(
        frame.assign(idle=frame["effective_micros"].where(frame["team"] == CostLabel.idle, 0)),
        grain,
    )
    per = frame.groupby("period_start")[["idle", "effective_micros"]].sum().reset_index()
    per = per[per["effective_micros"] != 0]
    if per.empty:
        return empty_figure(title)
    share = per["idle"] / per["effective_micros"]
    overall = float(per["idle"].sum() / per["effective_micros"].sum())
    fig = _figure(f"{title} (overall {overall:.1%})")
    fig.add_scatter(
        name="idle share",
        x=list(per["period_start"]),
        y=list(share),
        mode="lines+markers",
        fill="tozeroy",
        line_color="#888",
    )
    fig.update_layout(yaxis={"tickformat": ".0%", "rangemode": "tozero"}, showlegend=False)
    return fig


def reconciliation_figure(reconciliation: pd.DataFrame) -> go.Figure:
    """The bill split into its parts: bill = requests + shared + idle + unallocated.

    Requests and shared costs are the allocated part. One waterfall per currency.

    Args:
        reconciliation: One row per currency with ``currency``, ``request_micros``,
            ``shared_micros``, ``idle_micros``, ``unallocated_micros``, ``bill_micros`` and
            ``balanced``. A team's view has ``bill_micros`` NA: it shows the team's own
            request and shared cost, summing to its total.
    """
    title = "Reconciliation"
    if reconciliation.empty:
        return empty_figure(title)
    fig = _figure(title)
    lines = []
    several = len(reconciliation) > 1
    for row in reconciliation.to_dict("records"):
        currency = str(row["currency"])
        team_view = _missing(row["bill_micros"])
        parts = [("requests", int(row["request_micros"])), ("shared", int(row["shared_micros"]))]
        if not team_view:
            parts += [
                ("idle", int(row["idle_micros"])),
                ("unallocated", int(row["unallocated_micros"])),
            ]
        total = sum(m for _, m in parts)
        total_label = "team total" if team_view else "bill"
        labels = [
            f"{label} ({currency})" if several else label
            for label, _ in [*parts, (total_label, total)]
        ]
        values = [*(m for _, m in parts), total]
        fig.add_waterfall(
            name=currency,
            x=labels,
            y=[m / 1e6 for m in values],
            measure=[*(["relative"] * len(parts)), "total"],
            text=[money_2dp(m) for m in values],
            textposition="outside",
            customdata=[[_money(m)] for m in values],
            hovertemplate=f"%{{x}}<br>{currency} %{{customdata[0]}}<extra></extra>",
            connector={"line": {"color": "#bbb"}},
            increasing={"marker": {"color": "#4c78a8"}},
            decreasing={"marker": {"color": "#e45756"}},
            totals={"marker": {"color": "#333"}},
        )
        if team_view:
            lines.append(
                f"{currency}: team total {money_2dp(total)} = requests "
                f"{money_2dp(parts[0][1])} + shared {money_2dp(parts[1][1])}"
            )
        else:
            verdict = "balanced to the micro" if bool(row["balanced"]) else "NOT balanced"
            allocated = parts[0][1] + parts[1][1]
            lines.append(
                f"{currency}: bill {money_2dp(int(row['bill_micros']))} = allocated "
                f"{money_2dp(allocated)} + idle {money_2dp(parts[2][1])} + unallocated "
                f"{money_2dp(parts[3][1])} ({verdict})"
            )
    fig.update_layout(showlegend=False, yaxis_title="cost" if several else currency)
    _note(fig, "<br>".join(lines))
    fig.update_layout(margin={"t": 60 + 14 * len(lines)})
    return fig


# ---------------------------------------------------------------------------- speculation


def acceptance_rate_figure(usage: pd.DataFrame, *, by: str) -> go.Figure:
    """Draft acceptance rate (accepted / drafted tokens) over time, one line per ``by`` value.

    Args:
        usage: ``period_start``, ``deployment``, ``team``, ``draft_tokens``, ``accepted_tokens``.
        by: ``deployment`` or ``team``.
    """
    title = f"Acceptance rate per {by}"
    frame = usage[usage["draft_tokens"] > 0] if not usage.empty else usage
    if frame.empty:
        return empty_figure(title)
    grain = _grain(frame["period_start"])
    grouped = (
        _bucket(frame, grain)
        .groupby([by, "period_start"], as_index=False)[["draft_tokens", "accepted_tokens"]]
        .sum()
    )
    fig = _figure(f"{title} (per {'day' if grain == 'D' else 'hour'})")
    colours = colour_map(grouped[by]) if by == "team" else {}
    for i, (key, rows) in enumerate(grouped.groupby(by, sort=True)):
        rate = rows["accepted_tokens"] / rows["draft_tokens"]
        total = measures.acceptance_rate(
            int(rows["accepted_tokens"].sum()), int(rows["draft_tokens"].sum())
        )
        fig.add_scatter(
            name=f"{key} ({total or 0:.0%})",
            x=list(rows["period_start"]),
            y=list(rate),
            mode="lines+markers",
            line_color=colours.get(str(key), _PALETTE[i % len(_PALETTE)]),
            customdata=list(zip(rows["accepted_tokens"], rows["draft_tokens"], strict=True)),
            hovertemplate=f"{key}<br>%{{x}}<br>%{{y:.1%}} "
            "(%{customdata[0]} / %{customdata[1]} tokens)<extra></extra>",
        )
    fig.add_hline(
        y=ACCEPTANCE_THRESHOLD,
        line_dash="dash",
        line_color="#e45756",
        annotation_text="50%",
        annotation_position="bottom left",
    )
    fig.update_layout(
        yaxis={"tickformat": ".0%", "range": [0, 1.05], "title": "accepted / drafted"}
    )
    return fig


def acceptance_length_figure(usage: pd.DataFrame) -> go.Figure:
    """Mean acceptance length (tokens per draft step, bonus token included) per deployment.

    Args:
        usage: ``period_start``, ``deployment``, ``num_drafts``, ``accepted_tokens``.
    """
    title = "Mean acceptance length"
    frame = usage[usage["num_drafts"] > 0] if not usage.empty else usage
    if frame.empty:
        return empty_figure(title)
    grain = _grain(frame["period_start"])
    grouped = (
        _bucket(frame, grain)
        .groupby(["deployment", "period_start"], as_index=False)[["num_drafts", "accepted_tokens"]]
        .sum()
    )
    fig = _figure(f"{title} (per {'day' if grain == 'D' else 'hour'})")
    for i, (deployment, rows) in enumerate(grouped.groupby("deployment", sort=True)):
        length = (rows["accepted_tokens"] + rows["num_drafts"]) / rows["num_drafts"]
        fig.add_scatter(
            name=str(deployment),
            x=list(rows["period_start"]),
            y=list(length),
            mode="lines+markers",
            line_color=_PALETTE[i % len(_PALETTE)],
        )
    fig.add_hline(
        y=1.0, line_dash="dot", line_color="#999", annotation_text="1 = no drafted token accepted"
    )
    fig.update_layout(yaxis={"title": "tokens per step", "rangemode": "tozero"})
    return fig


# ------------------------------------------------------------------------------ breakeven


def _missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _finite(value: object) -> float | None:
    if _missing(value) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number > 0 else None


def breakeven_figure(
    points: pd.DataFrame, curve: pd.DataFrame, summary: pd.DataFrame, schedule: pd.DataFrame
) -> go.Figure:
    """Speedup of speculation against concurrency: measured, fitted, breakeven and k schedule.

    Args:
        points: ``config``, ``concurrency``, ``measured_speedup`` (median over repeats).
        curve: ``config``, ``concurrency``, ``speedup`` (the fitted model on a dense grid).
        summary: One row for the primary config: ``config``, ``breakeven_concurrency`` (NaN when
            the curves do not cross), ``ci_low``, ``ci_high`` (NaN or 0/inf when unbounded).
        schedule: ``start``, ``end``, ``k``: vLLM's ``num_speculative_tokens_per_batch_size``,
            batch sizes inclusive.
    """
    title = "Breakeven: speculative over plain throughput"
    if points.empty and curve.empty:
        return empty_figure(title)
    xs = [
        float(x)
        for x in pd.concat(
            [
                points.get("concurrency", pd.Series(dtype=float)),
                curve.get("concurrency", pd.Series(dtype=float)),
            ]
        )
    ]
    low, high = min(xs) / 1.25, max(xs) * 1.25
    fig = _figure(title)
    for i, band in enumerate(schedule.to_dict("records")):
        x0, x1 = max(float(band["start"]), low), min(float(band["end"]) + 1.0, high)
        if x1 <= x0:
            continue
        fig.add_vrect(
            x0=x0,
            x1=x1,
            fillcolor=_BAND_COLOURS[i % len(_BAND_COLOURS)],
            opacity=0.7,
            layer="below",
            line_width=0,
            name=f"schedule k={int(band['k'])}",
        )
        # Annotations on a log axis take log10 coordinates (shapes take data coordinates).
        fig.add_annotation(
            x=math.log10(math.sqrt(x0 * x1)),
            y=1.0,
            yref="paper",
            yanchor="bottom",
            text=f"k={int(band['k'])}",
            showarrow=False,
            font={"size": 12, "color": "#445"},
            name="schedule",
        )
    configs = sorted(set(points.get("config", [])) | set(curve.get("config", [])))
    for i, config in enumerate(configs):
        colour = _PALETTE[i % len(_PALETTE)]
        fitted = curve[curve["config"] == config]
        if not fitted.empty:
            fig.add_scatter(
                name=f"{config} fitted",
                x=list(fitted["concurrency"]),
                y=list(fitted["speedup"]),
                mode="lines",
                line_color=colour,
            )
        measured = points[points["config"] == config]
        if not measured.empty:
            fig.add_scatter(
                name=f"{config} measured",
                x=list(measured["concurrency"]),
                y=list(measured["measured_speedup"]),
                mode="markers",
                marker={"color": colour, "size": 10, "symbol": "circle"},
            )
    fig.add_hline(
        y=1.0,
        line_color="#333",
        line_width=1,
        annotation_text="speedup 1 (break even)",
        annotation_position="bottom left",
    )
    _breakeven_marker(fig, summary, low, high)
    levels = sorted({float(x) for x in points.get("concurrency", [])})
    fig.update_layout(
        xaxis={
            "type": "log",
            "title": "concurrent requests (batch size)",
            "range": [math.log10(low), math.log10(high)],
            **({"tickvals": levels} if levels else {}),
        },
        yaxis={"title": "speedup (x)"},
        height=480,
    )
    return fig


def _breakeven_marker(fig: go.Figure, summary: pd.DataFrame, low: float, high: float) -> None:
    if summary.empty:
        return
    row = summary.to_dict("records")[0]
    at = _finite(row.get("breakeven_concurrency"))
    if at is None:
        _note(fig, f"{row.get('config', '')}: no breakeven within the measured range")
        return
    ci_low = _finite(row.get("ci_low")) or low
    ci_high = _finite(row.get("ci_high")) or high
    ci_low, ci_high = max(ci_low, low), min(ci_high, high)
    fig.add_vrect(
        x0=ci_low,
        x1=ci_high,
        fillcolor="#e45756",
        opacity=0.15,
        line_width=0,
        layer="below",
        name="breakeven interval",
    )
    fig.add_scatter(
        name=f"breakeven {at:.2f} [{ci_low:.2f}, {ci_high:.2f}]",
        x=[at],
        y=[1.0],
        mode="markers",
        marker={"symbol": "x", "size": 16, "color": "#e45756", "line": {"width": 2}},
        error_x={
            "type": "data",
            "symmetric": False,
            "array": [ci_high - at],
            "arrayminus": [at - ci_low],
            "color": "#e45756",
        },
    )


# ---------------------------------------------------------------------------------- tiers


def tiers_figure(modelled: pd.DataFrame, quoted: pd.DataFrame, measured: pd.DataFrame) -> go.Figure:
    """Cost per 1K session-seconds against concurrency for each tier: model, quote, measurement.

    Args:
        modelled: ``tier``, ``concurrency``, ``usd_per_1k_session_seconds`` (the catalog's
            instance price spread over the concurrent sessions), optional ``label``.
        quoted: The brief's figures, claims to check: ``tier``, ``claim``, ``sessions_low``,
            ``sessions_high``, ``quoted_low`` and ``verdict`` (the computed figure within,
            below or above it); only ``claim == "usd_per_1k_session_seconds"`` rows are drawn.
        measured: ``tier``, ``concurrency``, ``usd_per_1k_session_seconds``,
            ``session_seconds`` (from the ledger and usage of deployments in that tier).
    """
    title = "Tiers: cost per 1K session-seconds against concurrency"
    if not quoted.empty:
        quoted = quoted[quoted["claim"] == "usd_per_1k_session_seconds"]
    if modelled.empty and quoted.empty and measured.empty:
        return empty_figure(title)
    fig = _figure(title)
    tiers = _ordered_tiers(
        [*modelled.get("tier", []), *quoted.get("tier", []), *measured.get("tier", [])]
    )
    colours = {tier: _PALETTE[i % len(_PALETTE)] for i, tier in enumerate(tiers)}
    for tier in tiers:
        colour = colours[tier]
        model = modelled[modelled["tier"] == tier] if not modelled.empty else modelled
        if not model.empty:
            labels = (
                model["label"]
                if "label" in model.columns
                else pd.Series("catalog price", index=model.index)
            )
            for j, (label, line) in enumerate(model.groupby(labels, sort=True)):
                fig.add_scatter(
                    name=f"{tier}: {label}",
                    legendgroup=tier,
                    x=list(line["concurrency"]),
                    y=list(line["usd_per_1k_session_seconds"]),
                    mode="lines",
                    line={"color": colour, "dash": ("solid", "dash", "dot")[j % 3]},
                )
        quote = quoted[quoted["tier"] == tier] if not quoted.empty else quoted
        for row in quote.to_dict("records"):
            lo, hi = float(row["sessions_low"]), float(row["sessions_high"])
            mid, claim = math.sqrt(lo * hi), float(row["quoted_low"])
            fig.add_scatter(
                name=f"{tier}: quoted",
                legendgroup=tier,
                x=[mid],
                y=[claim],
                mode="markers+text",
                text=[f"quoted ${claim:.4g} (computed: {row['verdict']})"],
                textposition="top center",
                marker={
                    "symbol": "diamond-open",
                    "size": 14,
                    "color": colour,
                    "line": {"width": 2},
                },
                error_x={
                    "type": "data",
                    "symmetric": False,
                    "array": [hi - mid],
                    "arrayminus": [mid - lo],
                    "color": colour,
                },
            )
        seen = measured[measured["tier"] == tier] if not measured.empty else measured
        if not seen.empty:
            fig.add_scatter(
                name=f"{tier}: measured",
                legendgroup=tier,
                x=list(seen["concurrency"]),
                y=list(seen["usd_per_1k_session_seconds"]),
                mode="markers",
                marker={"symbol": "circle", "size": 11, "color": colour},
                customdata=list(seen["session_seconds"]),
                hovertemplate="%{x} concurrent: $%{y:.4f} per 1K session-s"
                "<br>%{customdata:.0f} session-seconds measured<extra></extra>",
            )
    fig.update_layout(
        xaxis={"type": "log", "title": "concurrent sessions"},
        yaxis={"type": "log", "title": "USD per 1K session-seconds"},
        height=480,
    )
    if measured.empty:
        _note(fig, "no measured cost yet for a deployment with a tier")
    return fig


def _ordered_tiers(names: Sequence[object]) -> list[str]:
    known = ("prototype", "scaled", "enterprise")
    found = {str(n) for n in names}
    return [t for t in known if t in found] + sorted(found - set(known))


@dataclass(frozen=True)
class BudgetView:
    """One budget's period for :func:`budget_burn_figure`: cumulative spend per elapsed day
    (``day``, ``spent_micros``) and the forecast per remaining day (``day``,
    ``expected_micros``, ``lower_micros``, ``upper_micros``)."""

    title: str
    currency: str
    amount_micros: int
    hard_limit_micros: int | None
    actual: pd.DataFrame
    forecast: pd.DataFrame
    level: float | None
    steps: tuple[tuple[int, str], ...] = ()
    """Brownout steps: where each acts (micros) and what it says (its action and since when)."""


def budget_burn_figure(view: BudgetView) -> go.Figure:
    """Burn-up of a budget: cumulative spend so far, the forecast with its interval to the
    period's end, and the budget (and hard limit) as lines."""
    fig = _figure(view.title)
    if view.actual.empty and view.forecast.empty:
        return empty_figure(view.title)
    to_units = 1e-6
    if not view.forecast.empty:
        days = list(view.forecast["day"])
        label = f"{view.level:.0%} interval" if view.level else "interval"
        fig.add_scatter(name=label, x=days, y=list(view.forecast["upper_micros"] * to_units),
                        mode="lines", line={"width": 0}, showlegend=False, hoverinfo="skip")  # fmt: skip
        fig.add_scatter(name=label, x=days, y=list(view.forecast["lower_micros"] * to_units),
                        mode="lines", line={"width": 0}, fill="tonexty",
                        fillcolor="rgba(47, 75, 124, 0.15)")  # fmt: skip
        fig.add_scatter(name="forecast", x=days, y=list(view.forecast["expected_micros"] * to_units),
                        mode="lines", line={"dash": "dot", "color": _PALETTE[0]})  # fmt: skip
    if not view.actual.empty:
        fig.add_scatter(name="spent", x=list(view.actual["day"]),
                        y=list(view.actual["spent_micros"] * to_units), mode="lines+markers",
                        line={"color": _PALETTE[0]})  # fmt: skip
    fig.add_hline(y=view.amount_micros * to_units, line_dash="dash", line_color="#e67e22",
                  annotation_text=f"budget {money_2dp(view.amount_micros)}")  # fmt: skip
    if view.hard_limit_micros is not None:
        fig.add_hline(y=view.hard_limit_micros * to_units, line_color="#c0392b",
                      annotation_text=f"hard limit {money_2dp(view.hard_limit_micros)}")  # fmt: skip
    for at_micros, label in view.steps:
        fig.add_hline(y=at_micros * to_units, line_dash="dot", line_color="#8e44ad",
                      annotation_text=label, annotation_position="bottom right")  # fmt: skip
    fig.update_layout(yaxis={"title": view.currency, "rangemode": "tozero"})
    return fig


# ---------------------------------------------------------------------------------- slurm

SLURM_METERED_REQUESTS = "(metered requests)"
"""The partition of a server job's requests (as :mod:`app.slurm.report` names it)."""


def has_slurm_jobs(usage: pd.DataFrame) -> bool:
    """Whether a Slurm usage frame counts any job (the cost page shows its panel only then)."""
    return not usage.empty and int(usage["jobs"].sum()) > 0


def _bracketed_last(names: Iterable[object]) -> list[str]:
    """Names sorted, the bracketed buckets (``(idle)``, ``(no team)``...) after the rest."""
    return sorted({str(n) for n in names}, key=lambda n: (n.startswith("("), n))


def slurm_usage_figure(usage: pd.DataFrame) -> go.Figure:
    """GPU-hours and allocated cost of Slurm jobs by account (the team), stacked by partition.

    Two panels side by side sharing the accounts' axis; each account's total is written on
    its bar, the cost to the cent. Partition ``(idle)`` (a node's unused GPUs) has cost and
    no GPU-hours; ``(metered requests)`` is the requests a server job served. With more than
    one cluster an account is named ``cluster/account``. Cost in other currencies than the
    largest one is left out, with a note.

    Args:
        usage: ``cluster``, ``account``, ``partition``, ``jobs``, ``gpu_seconds``,
            ``cost_micros``, ``currency`` (None where there is no cost); one row per cluster,
            account and partition as :func:`dashboards.data.slurm_usage_frame`.
    """
    title = "Slurm GPU-hours and cost by account"
    if usage.empty:
        return empty_figure(title)
    rows = usage.to_dict("records")
    several_clusters = len({row["cluster"] for row in rows}) > 1
    costs: dict[str, int] = {}
    for row in rows:
        if not _missing(row["currency"]) and row["cost_micros"]:
            costs[str(row["currency"])] = costs.get(str(row["currency"]), 0) + abs(
                int(row["cost_micros"])
            )
    currency = max(sorted(costs), key=lambda c: costs[c]) if costs else ""
    others = sorted(set(costs) - {currency})
    seconds: dict[tuple[str, str], int] = {}
    jobs: dict[tuple[str, str], int] = {}
    micros: dict[tuple[str, str], int] = {}
    for row in rows:
        account = f"{row['cluster']}/{row['account']}" if several_clusters else str(row["account"])
        key = (account, str(row["partition"]))
        seconds[key] = seconds.get(key, 0) + int(row["gpu_seconds"])
        jobs[key] = jobs.get(key, 0) + int(row["jobs"])
        if _missing(row["currency"]) or row["currency"] == currency:  # no cost: no currency
            micros[key] = micros.get(key, 0) + int(row["cost_micros"])
    accounts = _bracketed_last(a for a, _ in seconds)
    partitions = _bracketed_last(p for _, p in seconds)
    colours = colour_map(partitions)
    colours[SLURM_METERED_REQUESTS] = "#2f4b7c"
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(
            "GPU-hours (allocated GPUs x time)",
            f"Cost ({currency}, total {money_2dp(sum(micros.values()))})" if currency else "Cost",
        ),
        horizontal_spacing=0.1,
    )
    fig.update_layout(title={"text": title}, **_LAYOUT)
    in_legend: set[str] = set()
    for partition in partitions:
        hours = [a for a in accounts if seconds.get((a, partition))]
        if hours:
            fig.add_bar(
                name=partition,
                legendgroup=partition,
                showlegend=partition not in in_legend,
                x=hours,
                y=[seconds[a, partition] / 3600 for a in hours],
                customdata=[[jobs[a, partition]] for a in hours],
                marker_color=colours[partition],
                hovertemplate=f"%{{x}}<br>{partition}<br>%{{y:,.2f}} GPU-hours, "
                "%{customdata[0]} jobs<extra></extra>",
                row=1,
                col=1,
            )
            in_legend.add(partition)
        costed = [a for a in accounts if micros.get((a, partition))]
        if costed:
            fig.add_bar(
                name=partition,
                legendgroup=partition,
                showlegend=partition not in in_legend,
                x=costed,
                y=[micros[a, partition] / 1e6 for a in costed],
                customdata=[
                    [money_2dp(micros[a, partition]), _money(micros[a, partition])] for a in costed
                ],
                marker_color=colours[partition],
                hovertemplate=f"%{{x}}<br>{partition}<br>{currency} %{{customdata[0]}} "
                "(exact %{customdata[1]})<extra></extra>",
                row=1,
                col=2,
            )
            in_legend.add(partition)
    # Each account's total above its stack (the top of a relative stack: its positive parts).
    for account in accounts:
        parts = [seconds.get((account, p), 0) for p in partitions]
        if sum(parts):
            fig.add_annotation(
                x=account, y=sum(parts) / 3600, text=f"{sum(parts) / 3600:,.2f} h",
                showarrow=False, yanchor="bottom", row=1, col=1, name="total",
            )  # fmt: skip
        parts = [micros.get((account, p), 0) for p in partitions]
        if sum(parts):
            fig.add_annotation(
                x=account, y=sum(max(m, 0) for m in parts) / 1e6, text=money_2dp(sum(parts)),
                showarrow=False, yanchor="bottom", row=1, col=2, name="total",
            )  # fmt: skip
    fig.update_layout(barmode="relative", showlegend=True, margin={"t": 90})
    fig.update_xaxes(categoryorder="array", categoryarray=accounts)
    fig.update_yaxes(title_text="GPU-hours", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text=currency or "cost", rangemode="tozero", row=1, col=2)
    if others:
        _note(fig, f"cost in other currencies not shown: {', '.join(others)}")
    return fig
