"""The Ray Serve / KubeRay advice for one deployment, from what the ledger holds: its newest
fitted breakeven sweep (TPOT against concurrency, speculation on and off), its load by hour of
the week (the p90 of concurrent sessions over whole weeks) and the ledger's own price of a
worker node-hour. The inputs are read as the Slurm partition schedule reads them
(:mod:`app.slurm.partition`); the advice is :func:`app.autoscaling.rules.advise_ray`.

Functions take a session and never commit. Errors: those of :mod:`app.slurm.partition`
(NoFittedSweep, NoNodeHourPrice [404]; BreakevenError [422]) and InvalidInput [422] for a
target that no concurrency meets or an input out of range.
"""

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from app.autoscaling.rules import (
    SEARCH_LIMIT,
    RayAdvice,
    RayAdviceInput,
    advise_ray,
    default_tpot_target,
)
from app.domain.periods import Month
from app.slurm.partition import fitted_tpot, hourly_load, node_hour_price

__all__ = ["RayAdviceRequest", "ray_advice"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RayAdviceRequest:
    """What the caller chooses; everything else comes from the ledger."""

    deployment: str
    """The deployment as the ledger names it (also the Serve deployment's name)."""
    tpot_target_s: float | None = None
    """None: the plain-decoding TPOT p90 at the curve's breakeven concurrency."""
    application: str | None = None
    """Serve application name; default: the deployment's."""
    import_path: str = "serve_app:app"
    route_prefix: str = "/"
    gpus_per_node: int = 8
    gpus_per_replica: int = 8
    max_nodes: int = 4
    """The worker group's size today (the scaled tier: 2-4 p4d.24xlarge)."""
    max_concurrency_per_replica: int | None = None
    weeks: int = 4
    price_deployment: str | None = None
    price_month: Month | None = None
    currency: str = "USD"
    upscale_delay_s: int = 30
    downscale_delay_s: int = 600
    idle_timeout_s: int = 60
    worker_group: str = "gpu-workers"


def ray_advice(
    session: Session,
    request: RayAdviceRequest,
    *,
    now: datetime,
    s3_endpoint_url: str | None = None,
) -> RayAdvice:
    """The advice for ``request.deployment`` over the ``weeks`` whole weeks before ``now``."""
    tpot = fitted_tpot(session, request.deployment)
    limit = request.max_concurrency_per_replica
    target = request.tpot_target_s
    if target is None:
        target = default_tpot_target(tpot, max_concurrency=limit or SEARCH_LIMIT)
    price = node_hour_price(
        session,
        request.price_deployment or request.deployment,
        gpus_per_node=request.gpus_per_node,
        currency=request.currency,
        month=request.price_month,
    )
    load = hourly_load(
        session,
        request.deployment,
        weeks=request.weeks,
        now=now,
        s3_endpoint_url=s3_endpoint_url,
    )
    return advise_ray(
        RayAdviceInput(
            hourly_load=load,
            tpot_target_s=target,
            gpus_per_node=request.gpus_per_node,
            gpus_per_replica=request.gpus_per_replica,
            max_nodes=request.max_nodes,
            node_hour_micros=price,
            currency=request.currency,
            deployment=request.deployment,
            application=request.application or request.deployment,
            import_path=request.import_path,
            route_prefix=request.route_prefix,
            k=tpot.k,
            speculation=tpot.speculation,
            max_concurrency_per_replica=limit,
            upscale_delay_s=request.upscale_delay_s,
            downscale_delay_s=request.downscale_delay_s,
            idle_timeout_s=request.idle_timeout_s,
            worker_group=request.worker_group,
        ),
        tpot_s=tpot,
    )
