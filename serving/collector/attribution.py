"""Who a traced request is for (pure, no I/O).

The spans come from the engine, not from the caller: what the caller put in its trace
context (``tracestate`` member ``specledger``, or ``specledger.*`` span attributes) is a
claim nobody checked. How far the collector believes it:

* **A key posted the spans** (``Authorization: Bearer slk_...`` on the OTLP export, a proxy
  key made with ``specledger keys create --proxy --team T``): the key decides the team and
  cost center, as at the proxy; the caller's session narrows. Only a key made with
  ``--gateway`` lets the caller's team and cost center through.
* **No key, ``trust_callers``**: the caller's team, cost center and session are taken as
  given. For platforms that trust their own callers (an internal network where every caller
  is a service the platform runs); anyone who can reach the engine can bill any team.
* **No key, default**: team ``(unattributed)``; the caller's session is kept.

Without a session the trace id is the session (the requests of one trace belong together).
"""

from __future__ import annotations

from app.domain.attribution import UNATTRIBUTED, VIA_TAG, ProxyGrant
from serving.collector.spans import CallerContext
from serving.proxy.attribution import Attribution, AttributionRefused, attribute

__all__ = ["attribute_span"]


def attribute_span(
    caller: CallerContext,
    *,
    trace_id: str,
    grant: ProxyGrant | None,
    trust_callers: bool,
) -> tuple[Attribution, bool]:
    """The attribution of one traced request.

    Returns:
        The attribution, and whether the caller asked for a team or cost center that it
        did not get (the key overruled it, or nobody trusts anonymous callers).
    """
    session = caller.session or f"trace-{trace_id}"
    asked = caller.team is not None or caller.cost_center is not None
    if grant is None and trust_callers:
        return (
            Attribution(
                session_id=session,
                team=caller.team or UNATTRIBUTED,
                cost_center=caller.cost_center,
                tags={VIA_TAG: "caller"},
            ),
            False,
        )
    if grant is None:
        anonymous = attribute(
            None,
            session_id=session,
            team=None,
            cost_center=None,
            tags_header=None,
            new_session_id=session,
        )
        return anonymous, asked
    try:
        return (
            attribute(
                grant,
                session_id=session,
                team=caller.team,
                cost_center=caller.cost_center,
                tags_header=None,
                new_session_id=session,
            ),
            False,
        )
    except AttributionRefused:
        keyed = attribute(
            grant,
            session_id=session,
            team=None,
            cost_center=None,
            tags_header=None,
            new_session_id=session,
        )
        return keyed, True
