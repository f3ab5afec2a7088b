"""Autoscaling advice for a deployment served by Ray Serve on a KubeRay cluster: the Serve
``autoscaling_config`` and ``max_ongoing_requests``, the KubeRay worker group's bounds, the
speculation to run at each per-replica concurrency, and what the fleet costs with and
without the advice.

**Per-replica concurrency.** Ray Serve's request-based autoscaler keeps the mean number of
ongoing requests per replica near ``target_ongoing_requests``: it wants ``ceil(total /
target)`` replicas, clamped to ``[min_replicas, max_replicas]``. ``target_ongoing_requests``
is set to ``c*``, the largest concurrency per replica whose modelled TPOT p90 meets the target
with the better of speculation on and off (every lower concurrency meeting it too), looked
for up to vLLM's ``max_num_seqs`` when given (else :data:`SEARCH_LIMIT`). The TPOT model is
the fitted breakeven curve's (:func:`app.slurm.rules.partition_schedule.tpot_model`). Load is
counted in concurrent sessions, as for the Slurm partition schedule: a session with a request
in flight is one sequence in a replica's batch.

``max_ongoing_requests`` is the hard cap Serve's router sends to one replica; requests above
it wait at the proxy, not in the engine's batch. Ray's advanced-autoscaling guide sets it
some 20-50% above the target so that the router can balance; it is ``c*`` raised by
``max_ongoing_headroom`` (25% by default, at least one more request), never above
``max_num_seqs`` and never below ``c*``.

**Hours.** For each hour of the week, the p90 load ``L`` needs ``r = max(1, ceil(L / c*))``
replicas (what the autoscaler asks for at that load), and ``ceil(r / R)`` worker nodes,
``R = gpus_per_node // gpus_per_replica`` replicas fitting on a node. An hour needing more
than ``max_nodes`` nodes gets them all and is flagged. ``min_replicas`` / ``max_replicas``
are the quietest and the busiest hour's replicas; KubeRay's ``minReplicas`` / ``maxReplicas``
the nodes they take. Speculation is on for a per-replica concurrency ``c`` where the model
gives it the strictly lower TPOT (as in the partition schedule), written out as vLLM's
``num_speculative_tokens_per_batch_size`` bands over ``1..max_ongoing_requests``.

**Cost.** A node-hour costs ``node_hour_micros`` (the ledger's own price). The autoscaled
fleet follows the hourly need, but releases nodes late: Serve waits ``downscale_delay_s``
before it removes replicas and KubeRay ``idle_timeout_s`` before it removes the idle node, so
an hour with fewer nodes than the hour before pays the released nodes for that lag (at most
the hour). Node-seconds per week times the price over 3600, rounded half to even, is the
weekly cost; a month is ``hours_per_month / 168`` weeks. Without the advice the worker group
runs ``max_nodes`` all month (a static fleet); a static fleet sized for the week's peak is
reported as well, and the advice never costs more than it.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from app.breakeven.rules.model import ScheduleBand
from app.domain.errors import InvalidInput
from app.domain.money import format_micros
from app.slurm.rules.partition_schedule import (
    HOURS_PER_MONTH,
    HOURS_PER_WEEK,
    Band,
    HourPlan,
    TpotModel,
    WeeklyFleetPlan,
    busiest_replica,
    check_hourly_load,
    div_half_even,
    hour_bands,
    hour_label,
)

__all__ = [
    "SEARCH_LIMIT",
    "RayAdvice",
    "RayAdviceInput",
    "advise_ray",
    "default_tpot_target",
    "deployment_config",
    "ray_advice_as_dict",
    "ray_service_manifest",
    "serve_config",
    "speculation_bands",
    "worker_group_spec",
]

SEARCH_LIMIT = 4096
"""Largest per-replica concurrency considered when the engine's ``max_num_seqs`` is unknown."""
_SECONDS_PER_HOUR = 3600


@dataclass(frozen=True, slots=True, kw_only=True)
class RayAdviceInput:
    """What the advice is computed from."""

    hourly_load: Sequence[float]
    """168 concurrent-session loads, hour 0 = Monday 00:00 UTC (the p90 of each hour)."""
    tpot_target_s: float
    """TPOT p90 each replica must meet, seconds."""
    gpus_per_node: int
    """GPUs of one KubeRay worker pod (a p4d.24xlarge: 8)."""
    gpus_per_replica: int
    """GPUs of one Serve replica (the engine's tensor-parallel size)."""
    max_nodes: int
    """Worker nodes the group may grow to: the fleet run today without the advice."""
    node_hour_micros: int
    """Price of one worker node for one hour, micros of ``currency``."""
    currency: str
    deployment: str
    """The Serve deployment's name."""
    application: str
    """The Serve application's name."""
    import_path: str
    """The application's import path (``module:app``)."""
    route_prefix: str = "/"
    k: int = 0
    """Drafted tokens per step with speculation on (0: the deployment does not speculate)."""
    speculation: str = "none"
    """What "speculation on" runs, for the summary (e.g. ``ngram k=4``)."""
    max_concurrency_per_replica: int | None = None
    """vLLM's ``max_num_seqs``; None: unknown (searched up to :data:`SEARCH_LIMIT`)."""
    max_ongoing_headroom: float = 0.25
    upscale_delay_s: int = 30
    """Ray's default: add replicas 30 s into a rise; a late replica costs latency."""
    downscale_delay_s: int = 600
    """Ray's default: keep replicas 10 min into a fall; rides out short dips."""
    idle_timeout_s: int = 60
    """KubeRay ``autoscalerOptions.idleTimeoutSeconds``: an idle worker pod's grace."""
    worker_group: str = "gpu-workers"
    hours_per_month: int = HOURS_PER_MONTH


@dataclass(frozen=True, slots=True, kw_only=True)
class RayAdvice(WeeklyFleetPlan):
    """The advice, its hours (``nodes`` counts worker nodes) and bands, and its cost against a
    static ``max_nodes`` fleet and a peak-sized one."""

    input: RayAdviceInput
    replicas_per_node: int
    target_ongoing_requests: int
    """``c*``: the most sessions per replica meeting the TPOT target."""
    max_ongoing_requests: int
    replicas: tuple[int, ...]
    """Serve replicas per hour of the week."""
    speculation_bands: tuple[ScheduleBand, ...]
    """vLLM ``num_speculative_tokens_per_batch_size`` over ``1..max_ongoing_requests``."""
    node_seconds: int
    """Worker node-seconds per week with the advice (release lag included)."""

    @property
    def hours_per_month(self) -> int:
        return self.input.hours_per_month

    @property
    def min_replicas(self) -> int:
        return min(self.replicas)

    @property
    def max_replicas(self) -> int:
        return max(self.replicas)


# ------------------------------------------------------------------------ checks


def _check(inp: RayAdviceInput) -> None:
    check_hourly_load(inp.hourly_load)
    if not (math.isfinite(inp.tpot_target_s) and inp.tpot_target_s > 0):
        raise InvalidInput(f"tpot_target_s must be finite and > 0, got {inp.tpot_target_s!r}")
    for name in ("gpus_per_node", "gpus_per_replica", "max_nodes", "hours_per_month"):
        if getattr(inp, name) < 1:
            raise InvalidInput(f"{name} must be >= 1, got {getattr(inp, name)}")
    if inp.gpus_per_replica > inp.gpus_per_node:
        raise InvalidInput(
            f"a replica of {inp.gpus_per_replica} GPUs does not fit on a node of "
            f"{inp.gpus_per_node} GPUs"
        )
    if inp.node_hour_micros < 0:
        raise InvalidInput(f"node_hour_micros must be >= 0, got {inp.node_hour_micros}")
    if inp.k < 0:
        raise InvalidInput(f"k must be >= 0, got {inp.k}")
    if inp.max_concurrency_per_replica is not None and inp.max_concurrency_per_replica < 1:
        raise InvalidInput("max_concurrency_per_replica must be >= 1")
    if not (math.isfinite(inp.max_ongoing_headroom) and inp.max_ongoing_headroom >= 0):
        raise InvalidInput(f"max_ongoing_headroom must be >= 0, got {inp.max_ongoing_headroom!r}")
    for name in ("upscale_delay_s", "downscale_delay_s", "idle_timeout_s"):
        if getattr(inp, name) < 0:
            raise InvalidInput(f"{name} must be >= 0 seconds, got {getattr(inp, name)}")
    for name in ("deployment", "application", "import_path", "worker_group"):
        value = getattr(inp, name)
        if not value or any(c.isspace() for c in value):
            raise InvalidInput(f"{name} must be a non-empty name without spaces, got {value!r}")
    if not inp.route_prefix.startswith("/"):
        raise InvalidInput(f"route_prefix must start with '/', got {inp.route_prefix!r}")


# ------------------------------------------------------------------------ the advice


def _best(tpot_s: TpotModel, concurrency: int) -> tuple[bool, float]:
    plain = tpot_s(float(concurrency), False)
    fast = tpot_s(float(concurrency), True)
    speculate = fast < plain
    best = fast if speculate else plain
    if not math.isfinite(best):
        raise InvalidInput(f"the TPOT model gave {best!r} at concurrency {concurrency}")
    return speculate, best


def _per_replica_limit(inp: RayAdviceInput, tpot_s: TpotModel) -> int:
    """``c*``: the end of the run of concurrencies from 1 up that meet the target."""
    limit = inp.max_concurrency_per_replica or SEARCH_LIMIT
    meets = 0
    for concurrency in range(1, limit + 1):
        if _best(tpot_s, concurrency)[1] > inp.tpot_target_s:
            break
        meets = concurrency
    if meets == 0:
        _, at_one = _best(tpot_s, 1)
        raise InvalidInput(
            f"the TPOT p90 target {inp.tpot_target_s * 1000:.1f} ms is not met even at one "
            f"session per replica (modelled {at_one * 1000:.1f} ms); raise the target"
        )
    return meets


def speculation_bands(
    tpot_s: TpotModel, *, k: int, max_batch_size: int
) -> tuple[ScheduleBand, ...]:
    """Speculation per batch size ``1..max_batch_size``: ``k`` where it gives the strictly
    lower modelled TPOT, else 0; as vLLM's ``num_speculative_tokens_per_batch_size`` bands."""
    if max_batch_size < 1:
        raise InvalidInput(f"max_batch_size must be >= 1, got {max_batch_size}")
    chosen = [k if k > 0 and _best(tpot_s, c)[0] else 0 for c in range(1, max_batch_size + 1)]
    bands: list[ScheduleBand] = []
    for batch, value in enumerate(chosen, start=1):
        if bands and bands[-1].k == value:
            bands[-1] = ScheduleBand(start=bands[-1].start, end=batch, k=value)
        else:
            bands.append(ScheduleBand(start=batch, end=batch, k=value))
    return tuple(bands)


def default_tpot_target(tpot_s: TpotModel, *, max_concurrency: int = SEARCH_LIMIT) -> float:
    """A TPOT p90 target from the breakeven curve alone: the plain-decoding TPOT at the
    largest whole concurrency (up to ``max_concurrency``) where speculation still pays. Held
    there, a replica never runs past the curve's breakeven.

    Raises:
        InvalidInput: If speculation pays at no concurrency (then give a target).
    """
    last = 0
    for concurrency in range(1, max_concurrency + 1):
        if _best(tpot_s, concurrency)[0]:
            last = concurrency
        elif last:
            break
    if last == 0:
        raise InvalidInput(
            "speculation pays at no concurrency on this curve: give a TPOT p90 target"
        )
    return tpot_s(float(last), False)


def _node_seconds(nodes: Sequence[int], lag_s: int) -> int:
    lag = min(lag_s, _SECONDS_PER_HOUR)
    released = sum(max(0, nodes[h - 1] - nodes[h]) for h in range(len(nodes)))
    return sum(nodes) * _SECONDS_PER_HOUR + released * lag


def advise_ray(inp: RayAdviceInput, *, tpot_s: TpotModel) -> RayAdvice:
    """The autoscaling advice for one deployment (see the module's docstring for the rules).

    Args:
        inp: Load, target, fleet and price.
        tpot_s: ``tpot_s(concurrency_per_replica, speculate)``, seconds (see
            :func:`app.slurm.rules.partition_schedule.tpot_model`).

    Raises:
        InvalidInput: On an input out of range, a target not met at one session per
            replica, or a model giving a non-finite TPOT.
    """
    _check(inp)
    per_node = inp.gpus_per_node // inp.gpus_per_replica
    target = _per_replica_limit(inp, tpot_s)
    headroom = max(target + 1, math.ceil(target * (1 + inp.max_ongoing_headroom)))
    cap = inp.max_concurrency_per_replica
    max_ongoing = max(target, min(headroom, cap)) if cap is not None else headroom
    most = inp.max_nodes * per_node
    hours: list[HourPlan] = []
    replicas: list[int] = []
    for hour, raw in enumerate(inp.hourly_load):
        load = float(raw)
        wanted = max(1, math.ceil(load / target))
        count = min(wanted, most)
        concurrency = busiest_replica(load, count)
        speculate, best = _best(tpot_s, concurrency)
        hours.append(
            HourPlan(
                hour_of_week=hour,
                load=load,
                nodes=math.ceil(count / per_node),
                per_replica_concurrency=concurrency,
                speculate=speculate and inp.k > 0,
                tpot_s=best,
                meets_target=wanted <= most and best <= inp.tpot_target_s,
            )
        )
        replicas.append(count)
    nodes = [hour.nodes for hour in hours]
    node_seconds = _node_seconds(nodes, inp.downscale_delay_s + inp.idle_timeout_s)
    price = inp.node_hour_micros
    return RayAdvice(
        input=inp,
        replicas_per_node=per_node,
        target_ongoing_requests=target,
        max_ongoing_requests=max_ongoing,
        hours=tuple(hours),
        replicas=tuple(replicas),
        bands=hour_bands(hours),
        speculation_bands=speculation_bands(tpot_s, k=inp.k, max_batch_size=max_ongoing),
        node_seconds=node_seconds,
        weekly_cost_micros=div_half_even(node_seconds * price, _SECONDS_PER_HOUR),
        static_weekly_cost_micros=inp.max_nodes * HOURS_PER_WEEK * price,
        peak_static_weekly_cost_micros=max(nodes) * HOURS_PER_WEEK * price,
    )


# ------------------------------------------------------------------------ what a user applies


def deployment_config(advice: RayAdvice) -> dict[str, object]:
    """The Serve deployment's options: ``max_ongoing_requests``, ``autoscaling_config`` and
    the GPUs of a replica (``ray_actor_options.num_gpus``, how Ray packs replicas on nodes)."""
    inp = advice.input
    autoscaling: dict[str, object] = {
        "min_replicas": advice.min_replicas,
        "initial_replicas": advice.min_replicas,
        "max_replicas": advice.max_replicas,
        "target_ongoing_requests": advice.target_ongoing_requests,
        "upscale_delay_s": inp.upscale_delay_s,
        "downscale_delay_s": inp.downscale_delay_s,
    }
    deployment: dict[str, object] = {
        "name": inp.deployment,
        "max_ongoing_requests": advice.max_ongoing_requests,
        "autoscaling_config": autoscaling,
        "ray_actor_options": {"num_gpus": inp.gpus_per_replica},
    }
    return deployment


def serve_config(advice: RayAdvice) -> dict[str, object]:
    """The Serve config (``serveConfigV2``): one application, one deployment, autoscaling."""
    inp = advice.input
    return {
        "applications": [
            {
                "name": inp.application,
                "route_prefix": inp.route_prefix,
                "import_path": inp.import_path,
                "deployments": [deployment_config(advice)],
            }
        ]
    }


def worker_group_spec(advice: RayAdvice, *, image: str) -> dict[str, object]:
    """The KubeRay GPU worker group: its bounds, one Ray node per pod with the node's GPUs."""
    inp = advice.input
    gpus = str(inp.gpus_per_node)
    return {
        "groupName": inp.worker_group,
        "replicas": advice.floor_nodes,
        "minReplicas": advice.floor_nodes,
        "maxReplicas": advice.peak_nodes,
        "rayStartParams": {},
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "ray-worker",
                        "image": image,
                        "resources": {
                            "limits": {"nvidia.com/gpu": gpus},
                            "requests": {"nvidia.com/gpu": gpus},
                        },
                    }
                ]
            }
        },
    }


def ray_service_manifest(
    advice: RayAdvice, *, name: str, image: str, serve_config_text: str
) -> dict[str, object]:
    """A ``ray.io/v1`` RayService fragment: ``serveConfigV2`` (the Serve config as YAML text,
    as KubeRay takes it) and the cluster's autoscaler options and GPU worker group. The head
    group is the user's own and is left out: merge this into the existing RayService."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": name},
        "spec": {
            "serveConfigV2": serve_config_text,
            "rayClusterConfig": {
                "enableInTreeAutoscaling": True,
                "autoscalerOptions": {
                    "upscalingMode": "Default",
                    "idleTimeoutSeconds": advice.input.idle_timeout_s,
                },
                "workerGroupSpecs": [worker_group_spec(advice, image=image)],
            },
        },
    }


def _band_json(band: Band) -> dict[str, object]:
    return {
        "start": band.start,
        "hours": band.hours,
        "from": hour_label(band.start),
        "until": hour_label(band.end),
        "nodes": band.nodes,
        "speculate": band.speculate,
        "meets_target": band.meets_target,
        "peak_load": band.peak_load,
        "worst_tpot_s": band.worst_tpot_s,
    }


def ray_advice_as_dict(advice: RayAdvice) -> dict[str, object]:
    """JSON-ready form: money as decimal strings."""
    inp = advice.input
    return {
        "deployment": inp.deployment,
        "application": inp.application,
        "tpot_target_s": inp.tpot_target_s,
        "speculation": inp.speculation,
        "currency": inp.currency,
        "node_hour_cost": format_micros(inp.node_hour_micros),
        "replicas_per_node": advice.replicas_per_node,
        "deployment_config": deployment_config(advice),
        "worker_group": {
            "minReplicas": advice.floor_nodes,
            "maxReplicas": advice.peak_nodes,
            "max_nodes": inp.max_nodes,
        },
        "speculation_bands": [list(band) for band in advice.speculation_bands],
        "unmet_hours": list(advice.unmet_hours),
        "node_seconds_per_week": advice.node_seconds,
        "weekly_cost": format_micros(advice.weekly_cost_micros),
        "static_weekly_cost": format_micros(advice.static_weekly_cost_micros),
        "peak_static_weekly_cost": format_micros(advice.peak_static_weekly_cost_micros),
        "hours_per_month": inp.hours_per_month,
        "monthly_cost": format_micros(advice.monthly_cost_micros),
        "static_monthly_cost": format_micros(advice.static_monthly_cost_micros),
        "peak_static_monthly_cost": format_micros(advice.peak_static_monthly_cost_micros),
        "saved_monthly": format_micros(advice.saved_monthly_micros),
        "bands": [_band_json(band) for band in advice.bands],
        "hours": [
            {
                "hour_of_week": hour.hour_of_week,
                "load": hour.load,
                "replicas": count,
                "nodes": hour.nodes,
                "per_replica_concurrency": hour.per_replica_concurrency,
                "speculate": hour.speculate,
                "tpot_s": hour.tpot_s,
                "meets_target": hour.meets_target,
            }
            for hour, count in zip(advice.hours, advice.replicas, strict=True)
        ],
    }
