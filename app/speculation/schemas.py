"""Wire schemas of speculation health."""

from app.kit.schemas import Schema, WindowRead
from app.speculation.positions import DeploymentPositions, PositionsReport
from app.speculation.rules.positions import CostBasis


class PositionRead(Schema):
    position: int
    """1-based: the first drafted token after the last verified one is position 1."""
    drafted: int
    """Verification steps that drafted this position."""
    accepted: int
    """Steps that accepted it (steps that accepted at least this many drafted tokens)."""
    rate: float
    """accepted / drafted: the tokens per step this position adds."""
    cost: float
    """Tokens per step it must add to pay for the time it adds."""
    pays: bool


class DeploymentPositionsRead(Schema):
    deployment: str
    method: str
    """Speculation method; ``mixed`` when the requests used several."""
    k: int
    """Positions drafted now: the longest draft seen in the window."""
    requests: int
    """Speculative requests with an acceptance histogram."""
    steps: int
    """Their verification steps."""
    draft_tokens: int
    accepted_tokens: int
    mean_acceptance_length: float | None
    """Tokens per step, bonus token included."""
    mean_concurrency: float
    short_drafts: bool
    """Some steps drafted fewer than k (dynamic speculation): the rates are lower bounds."""
    cost_basis: CostBasis
    """``step_model``: the deployment's fitted breakeven model at its mean concurrency;
    ``floor``: no fit of its method, each position costs 0.25 tokens per step."""
    sweep_id: int | None
    """The sweep whose fit priced the positions."""
    positions: list[PositionRead]
    paying_positions: list[int]
    suggested_k: int
    """The num_speculative_tokens with the most output per step time (0: none pays)."""
    advice: str


class PositionsRead(Schema):
    window: WindowRead
    team: str | None
    """The team whose requests were read; None: every team's."""
    deployments: list[DeploymentPositionsRead]


def deployment_read(found: DeploymentPositions) -> DeploymentPositionsRead:
    advice = found.advice
    assert advice is not None
    counts = found.counts
    length = counts.mean_acceptance_length
    return DeploymentPositionsRead(
        deployment=found.deployment,
        method=found.method,
        k=counts.k,
        requests=found.requests,
        steps=counts.steps,
        draft_tokens=found.draft_tokens,
        accepted_tokens=counts.accepted_tokens,
        mean_acceptance_length=None if length is None else round(length, 4),
        mean_concurrency=round(found.mean_concurrency, 3),
        short_drafts=found.short_drafts,
        cost_basis=advice.basis,
        sweep_id=found.fit.sweep_id if found.fit is not None else None,
        positions=[
            PositionRead(
                position=p,
                drafted=counts.drafted[p - 1],
                accepted=counts.accepted[p - 1],
                rate=round(advice.gains[p - 1], 4),
                cost=round(advice.costs[p - 1], 4),
                pays=p <= advice.best_k,
            )
            for p in range(1, counts.k + 1)
        ],
        paying_positions=list(advice.paying),
        suggested_k=advice.best_k,
        advice=advice.text(),
    )


def positions_read(report: PositionsReport) -> PositionsRead:
    return PositionsRead(
        window=WindowRead.of(report.window),
        team=report.team,
        deployments=[deployment_read(d) for d in report.deployments],
    )
