"""Plain-text forms of ``tiers show`` and ``tiers recommend``."""

from typing import Any


def _quoted(quoted: dict[str, Any]) -> str:
    month = quoted.get("usd_per_month")
    per_1k = quoted.get("usd_per_1k_session_seconds")
    if month is None and per_1k is None:
        return f"quoted: {quoted.get('note') or 'not provided'}"
    return f"quoted: ${month}/month, ${per_1k} per 1K session-seconds"


def tiers_text(report: dict[str, Any]) -> str:
    """The ``tiers show`` report as text.

    Args:
        report: What :func:`app.tiers.service.show_tiers` returns.

    Returns:
        Multi-line text.
    """
    lines = [
        f"Workload: {report['workload']}; TPOT p90 = {report['tpot_p90_over_mean']:.2f} x "
        "modelled TPOT",
        f"Unit costs: {report['unit_costs']}",
        "",
    ]
    for tier in report["tiers"]:
        m = tier["model"]
        lines += [
            f"{tier['name']}: {tier['description']}",
            f"  sessions {tier['sessions']['min']}-{tier['sessions']['max']}; scheduler "
            f"{tier['scheduler']}; {_quoted(tier['quoted'])}",
            f"  replica: {m['target']} on {m['gpus_per_replica']}x {m['gpu']}; step "
            f"{m['step_floor_s'] * 1000:.2f} ms + {m['step_per_token_s'] * 1e6:.1f} us/token; "
            f"{m['speculation']}{' (' + m['draft'] + ')' if m['draft'] else ''} k={m['k']}, "
            f"acceptance length {m['mean_acceptance_length']}, c={m['draft_cost_ratio']}",
            f"  acceptance: {m['acceptance_source']}",
        ]
        lines += [f"  note: {note}" for note in tier["notes"]]
        for size in tier["sizes"]:
            crossing = size["cost_breakeven_concurrency"]
            where = (
                "speculation always cheaper per token up to the batch limit"
                if crossing is None
                else f"always-speculate stops being cheaper per token at {crossing:g} sessions"
            )
            lines.append(
                f"  {size['instances']} instance(s), {size['replicas']} replica(s): "
                f"${size['usd_per_hour']}/h, ${size['usd_per_month']}/month "
                f"(computed); {where}"
            )
            lines.append(
                "    sessions  $/1K sess-s   $/1M tok: none   always  schedule(k)  "
                "TPOT ms: none  always"
            )
            for p in size["points"]:
                none, fixed, dyn = p["none"], p["fixed"], p["dynamic"]
                flag = "" if p["fits"] else "  (over the batch limit)"
                lines.append(
                    f"    {p['concurrency']:>8}  {none['usd_per_1k_session_seconds']:>11}  "
                    f"{none['usd_per_1m_tokens']:>14}  {fixed['usd_per_1m_tokens']:>7}  "
                    f"{dyn['usd_per_1m_tokens']:>8}({dyn['k']})  "
                    f"{none['tpot_s'] * 1000:>13.2f}  {fixed['tpot_s'] * 1000:>6.2f}{flag}"
                )
        lines.append("")
    lines.append(f"Calibration: {report['calibration']}")
    return "\n".join(lines)


def recommendation_text(result: dict[str, Any]) -> str:
    """The ``tiers recommend`` answer as text.

    Args:
        result: What :func:`app.tiers.service.recommend_tier` returns.

    Returns:
        Multi-line text: the answer first, then the reasoning per tier.
    """
    target_ms = result["tpot_p90_target_s"] * 1000
    head = (
        f"{result['concurrency']} concurrent sessions, TPOT p90 <= {target_ms:.1f} ms "
        f"(workload: {result['workload']}; p90 = {result['tpot_p90_over_mean']:.2f} x "
        "modelled TPOT)"
    )
    answer = (
        f"Recommended tier: {result['recommended']}"
        if result["recommended"]
        else "No tier meets the target."
    )
    return "\n".join([head, answer, "", *(f"- {line}" for line in result["reasoning"])])
