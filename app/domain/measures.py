"""The measures every report shows, each defined once: the API, the CLI, the dashboards and
the exports read them from here, so one month gives one figure wherever it is asked.

* **GPU-seconds**: the GPU-nanoseconds metered for requests (DESIGN.md "GPU-seconds"), shown
  in seconds to the millisecond. In the ledger only compute-pool entries carry GPU time
  (:attr:`app.domain.ledger.AllocationMethod.splits_compute`); a proportional shared row
  carries the same nanoseconds only as its split weight.
* **Session-seconds**: the union of a session's request intervals, in seconds to the
  millisecond.
* **Tokens**: prompt plus completion tokens (cached tokens are part of the prompt).
* **Costs**: integer micros of EffectiveCost (unit cost) and BilledCost (cash); a unit cost
  is rounded half to even to the micro.
* **Acceptance**: accepted over drafted tokens, to four places; the mean acceptance length
  counts the bonus token of each draft step.
"""

NS_PER_SECOND = 1_000_000_000
SECONDS_PLACES = 3
RATE_PLACES = 4
LENGTH_PLACES = 3


def seconds(ns: int) -> float:
    """GPU-seconds or session-seconds as shown, from nanoseconds."""
    return round(ns / NS_PER_SECOND, SECONDS_PLACES)


def total_tokens(prompt_tokens: int, completion_tokens: int) -> int:
    return prompt_tokens + completion_tokens


def acceptance_rate(accepted_tokens: int, draft_tokens: int) -> float | None:
    """Accepted over drafted tokens; None when nothing was drafted."""
    return round(accepted_tokens / draft_tokens, RATE_PLACES) if draft_tokens else None


def mean_acceptance_length(accepted_tokens: int, num_drafts: int) -> float | None:
    """Tokens per draft step, the bonus token included; None without a draft step."""
    if not num_drafts:
        return None
    return round((accepted_tokens + num_drafts) / num_drafts, LENGTH_PLACES)


def unit_cost_micros(amount_micros: int, units: float, per: float) -> int | None:
    """Cost of ``per`` units at ``amount_micros`` for ``units``; None for no units."""
    return round(amount_micros * per / units) if units else None
