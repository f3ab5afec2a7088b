"""A dynamic schedule for a Slurm inference partition: how many nodes each hour of the week
needs to meet a TPOT p90 target at its measured load, speculation on or off per band, what
that saves against a static partition, and the text an operator applies.

**Load.** A week has 168 hours; hour 0 is Monday 00:00-01:00 UTC. The load of an hour of the
week is a number of concurrent sessions (a session counts while it has at least one request
in flight, as for session-seconds). :func:`load_profile` measures it from request intervals
over whole weeks and gives two statistics per hour of the week:

* ``quantile_load`` (what the plan is sized for): the time-weighted quantile, p90 by
  default, of the instantaneous concurrency over that hour in every week seen: the smallest
  level the concurrency stays at or below for 90% of the time. Sizing each hour so that its
  p90 concurrency meets the target means that for 90% of the time in that hour the
  replicas run at a concurrency whose modelled TPOT meets the target, which is the TPOT p90
  target's own reading. The hourly mean would size for the average minute and miss every
  burst; the maximum would size for one spike in four weeks.
* ``mean_load``: session-seconds in the hour over its length (averaged over the weeks), the
  same figure the session-seconds reports show, for comparison.

**Latency.** ``tpot_s(concurrency_per_replica, speculate)`` is the modelled time per output
token of a request on one replica holding that many sessions. :func:`tpot_model` builds it
from the fitted breakeven models (:mod:`app.breakeven.rules.model`): without speculation
a sequence emits one token per step, so TPOT is the step time ``t(B, 1)``; with ``k``
drafted tokens it emits ``E`` tokens per step of ``t_spec(B, k)``, so TPOT is
``t_spec / E = B / speculative_tokens_per_s``. ``tail`` scales the modelled (mean) TPOT to
a p90 (the sweep's measured p90/p50 ratio), as tier advice does.

**Sizing.** For each hour, the smallest ``n`` in ``1..len(nodes)`` such that the busiest
replica meets the target with the better of speculation on and off. Load is spread evenly
over ``n * replicas_per_node`` replicas, but sessions do not split: the busiest replica holds
``ceil(load / replicas)`` of them, and at least one (the first request of a quiet hour).
Speculation is on where it gives the lower TPOT at that concurrency (strictly: a tie runs
plain decoding). An hour that even the whole partition cannot serve within the target is
flagged (``meets_target`` False) and gets every node.

**Cost.** ``node_hour_micros`` is the price of one node for one hour (the ledger's own,
in integer micros of ``currency``). Per week: the schedule costs ``sum(nodes per hour) x
price``; the static partition ``len(nodes) x 168 x price``; a static partition sized for the
week's peak ``max(nodes per hour) x 168 x price``. A month is ``hours_per_month / 168`` weeks
(730 hours: a year of 8,760 hours over 12), rounded half to even to the micro; the monthly
saving is static minus scheduled, each rounded, so the three figures add up. A saving is
real only where the released node-hours stop being paid for: cloud nodes powered down by
the power-saving settings, or nodes lent to another partition that pays for them.

**Output.** :func:`scontrol_schedule` writes crontab lines, one per band start, that set the
partition's node list; :func:`power_saving_conf` writes the slurm.conf power-saving
settings that power the released nodes down and keep the week's floor up.
"""

import math
import re
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from app.breakeven.rules.model import (
    SpeculationModel,
    StepTimeModel,
    speculative_tokens_per_s,
)
from app.domain.errors import InvalidInput
from app.domain.money import format_micros

__all__ = [
    "HOURS_PER_MONTH",
    "HOURS_PER_WEEK",
    "Band",
    "HourPlan",
    "LoadProfile",
    "PartitionPlan",
    "PartitionPlanInput",
    "TpotModel",
    "busiest_replica",
    "compress_hostlist",
    "div_half_even",
    "hour_bands",
    "hour_label",
    "load_profile",
    "partition_plan_as_dict",
    "plan_partition",
    "power_saving_conf",
    "scontrol_schedule",
    "tpot_model",
]

HOURS_PER_WEEK = 168
HOURS_PER_MONTH = 730
"""Hours in an average month (8,760 / 12), as the tier catalog counts them."""
HOUR_US = 3_600_000_000
WEEK_US = HOURS_PER_WEEK * HOUR_US
_EPOCH_HOUR_OF_WEEK = 72
"""1970-01-01 00:00 UTC was a Thursday: hour 3 x 24 of a week that starts on Monday."""
DAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")

TpotModel = Callable[[float, bool], float]
"""``tpot_s(concurrency_per_replica, speculate)``: modelled TPOT p90 in seconds."""


# ------------------------------------------------------------------------ latency model


def tpot_model(
    step: StepTimeModel, spec: SpeculationModel | None, k: int, *, tail: float = 1.0
) -> TpotModel:
    """The TPOT of a request on one replica, from the fitted breakeven models.

    Args:
        step: The target's fitted step-time model.
        spec: The fitted speculative configuration; None when the deployment cannot
            speculate (then "on" is the same as "off").
        k: Drafted tokens per step with speculation on (0: speculation is never on).
        tail: Factor from the modelled TPOT to its p90 (the sweep's p90/p50 ratio), > 0.

    Returns:
        ``tpot_s(concurrency, speculate)``: ``tail * t(B, 1)`` plain, ``tail * B /
        speculative_tokens_per_s(B, k)`` speculating; ``concurrency`` must be > 0.

    Raises:
        InvalidInput: If ``k < 0`` or ``tail`` is not a positive finite number.
    """
    if k < 0:
        raise InvalidInput(f"k must be >= 0, got {k}")
    if not (math.isfinite(tail) and tail > 0):
        raise InvalidInput(f"tail must be finite and > 0, got {tail!r}")

    def tpot_s(concurrency: float, speculate: bool) -> float:
        if not (math.isfinite(concurrency) and concurrency > 0):
            raise InvalidInput(f"concurrency must be finite and > 0, got {concurrency!r}")
        if speculate and spec is not None and k > 0:
            rate = float(speculative_tokens_per_s(step, spec, concurrency=concurrency, k=k))
            return tail * concurrency / rate
        return tail * float(step.step_s(concurrency=concurrency, tokens_per_sequence=1.0))

    return tpot_s


# ------------------------------------------------------------------------ measured load


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadProfile:
    """Concurrent sessions per hour of the week (hour 0: Monday 00:00 UTC), over whole weeks."""

    weeks: int
    quantile: float
    quantile_load: tuple[float, ...]
    """168 values: the time-weighted ``quantile`` of concurrent sessions in that hour of the
    week over all weeks seen (an integer count, as a float). What the plan is sized for."""
    mean_load: tuple[float, ...]
    """168 values: mean concurrent sessions (session-seconds in the hour / 3600, averaged
    over the weeks)."""


def hour_of_week(epoch_us: int) -> int:
    """The hour of the week (0: Monday 00:00-01:00 UTC) of an instant in epoch microseconds."""
    return (epoch_us // HOUR_US + _EPOCH_HOUR_OF_WEEK) % HOURS_PER_WEEK


def load_profile(
    requests: Iterable[tuple[Hashable, int, int]],
    *,
    start_us: int,
    weeks: int,
    quantile: float = 0.9,
) -> LoadProfile:
    """Concurrent sessions per hour of the week, from request intervals.

    A session is active while at least one of its requests is in flight; intervals are
    half-open ``[start, end)`` (a request ending when another starts leaves no gap, and one
    with ``end <= start`` adds nothing). Time outside every interval counts at concurrency 0.

    Args:
        requests: ``(session, start_us, end_us)`` per request, epoch microseconds; clipped
            to the window.
        start_us: Start of the window, on an hour boundary; the window is ``weeks`` weeks
            long, so each hour of the week occurs exactly ``weeks`` times.
        weeks: Weeks in the window, >= 1.
        quantile: In (0, 1]: the time share the reported level covers (1: the maximum).

    Returns:
        The quantile and the mean of concurrent sessions for each of the 168 hours.

    Raises:
        InvalidInput: If the window does not start on an hour, ``weeks < 1`` or the quantile
            is out of range.
    """
    if start_us % HOUR_US:
        raise InvalidInput("the load window must start on a whole hour")
    if weeks < 1:
        raise InvalidInput(f"weeks must be >= 1, got {weeks}")
    if not (0.0 < quantile <= 1.0):
        raise InvalidInput(f"quantile must lie in (0, 1], got {quantile!r}")
    end_us = start_us + weeks * WEEK_US
    events: list[tuple[int, int, Hashable]] = []
    for session, start, end in requests:
        start, end = max(start, start_us), min(end, end_us)
        if end > start:
            events.append((start, 1, session))
            events.append((end, -1, session))
    # Ends sort before starts at the same instant: intervals are half-open.
    events.sort(key=lambda event: (event[0], event[1]))
    time_at: list[dict[int, int]] = [{} for _ in range(HOURS_PER_WEEK)]
    in_flight: dict[Hashable, int] = {}
    active = 0
    previous = start_us
    for instant, delta, session in events:
        if active and instant > previous:
            _add_level(time_at, previous, instant, active)
        previous = instant
        before = in_flight.get(session, 0)
        in_flight[session] = before + delta
        if before == 0 and delta > 0:
            active += 1
        elif before == 1 and delta < 0:
            active -= 1
    total = weeks * HOUR_US
    share = Fraction(str(quantile))
    quantiles: list[float] = []
    means: list[float] = []
    for levels in time_at:
        busy = sum(levels.values())
        covered = total - busy  # time at concurrency 0
        level = 0
        for candidate in sorted(levels):
            if covered >= share * total:
                break
            covered += levels[candidate]
            level = candidate
        quantiles.append(float(level))
        means.append(sum(lv * t for lv, t in levels.items()) / total)
    return LoadProfile(
        weeks=weeks, quantile=quantile, quantile_load=tuple(quantiles), mean_load=tuple(means)
    )


def _add_level(time_at: list[dict[int, int]], start: int, end: int, level: int) -> None:
    """Add ``[start, end)`` at ``level`` concurrent sessions, cut at hour boundaries."""
    while start < end:
        piece_end = min(end, (start // HOUR_US + 1) * HOUR_US)
        hour = time_at[hour_of_week(start)]
        hour[level] = hour.get(level, 0) + piece_end - start
        start = piece_end


# ------------------------------------------------------------------------ the plan


@dataclass(frozen=True, slots=True)
class PartitionPlanInput:
    """What the schedule is planned from."""

    hourly_load: Sequence[float]
    """168 concurrent-session loads, hour 0 = Monday 00:00 UTC (see :class:`LoadProfile`)."""
    nodes: Sequence[str]
    """The partition's nodes, in the order they are kept: ``n`` nodes are the first ``n``."""
    replicas_per_node: int
    """Model replicas (tensor-parallel groups) on one node."""
    tpot_target_s: float
    """TPOT p90 each hour must meet, seconds."""
    node_hour_micros: int
    """Price of one node for one hour, micros of ``currency``."""
    currency: str
    partition: str
    """Slurm ``PartitionName``."""
    hours_per_month: int = HOURS_PER_MONTH
    speculation: str = "speculative decoding"
    """What "speculation on" runs, for the schedule's comments (e.g. ``ngram k=4``)."""
    max_concurrency_per_replica: int | None = None
    """vLLM's ``max_num_seqs``: a node count whose busiest replica would hold more sessions
    does not meet the target, whatever the model says. None: no limit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HourPlan:
    """One hour of the week: its load, the nodes it gets and what they deliver."""

    hour_of_week: int
    load: float
    nodes: int
    per_replica_concurrency: int
    """Sessions on the busiest replica: ``max(1, ceil(load / (nodes x replicas_per_node)))``."""
    speculate: bool
    tpot_s: float
    """Modelled TPOT p90 at that concurrency with the chosen speculation."""
    meets_target: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Band:
    """Consecutive hours of the week with the same nodes and speculation (may wrap the week)."""

    start: int
    """First hour of the week of the band, 0..167."""
    hours: int
    """Length in hours, 1..168."""
    nodes: int
    speculate: bool
    meets_target: bool
    """Whether every hour of the band meets the target."""
    peak_load: float
    worst_tpot_s: float

    @property
    def end(self) -> int:
        """The hour of the week after the band's last (exclusive end), 0..167."""
        return (self.start + self.hours) % HOURS_PER_WEEK


@dataclass(frozen=True, slots=True, kw_only=True)
class WeeklyFleetPlan:
    """Nodes per hour of the week and their cost against static fleets: what a partition
    schedule and an autoscaling advice have in common."""

    hours: tuple[HourPlan, ...]
    bands: tuple[Band, ...]
    """In order of their start hour; a band wrapping the week's end starts late on Sunday."""
    weekly_cost_micros: int
    static_weekly_cost_micros: int
    """The whole fleet all week."""
    peak_static_weekly_cost_micros: int
    """A static fleet of the week's peak node count, all week."""

    @property
    def hours_per_month(self) -> int:
        raise NotImplementedError

    @property
    def floor_nodes(self) -> int:
        """Nodes every hour needs: the week's minimum."""
        return min(hour.nodes for hour in self.hours)

    @property
    def peak_nodes(self) -> int:
        """Nodes the busiest hour gets."""
        return max(hour.nodes for hour in self.hours)

    @property
    def unmet_hours(self) -> tuple[int, ...]:
        """Hours of the week the whole fleet cannot serve within the target."""
        return tuple(hour.hour_of_week for hour in self.hours if not hour.meets_target)

    @property
    def saved_weekly_micros(self) -> int:
        """Against the whole static fleet."""
        return self.static_weekly_cost_micros - self.weekly_cost_micros

    @property
    def saved_vs_peak_weekly_micros(self) -> int:
        """Against a static fleet sized for the peak."""
        return self.peak_static_weekly_cost_micros - self.weekly_cost_micros

    @property
    def monthly_cost_micros(self) -> int:
        return self._monthly(self.weekly_cost_micros)

    @property
    def static_monthly_cost_micros(self) -> int:
        return self._monthly(self.static_weekly_cost_micros)

    @property
    def peak_static_monthly_cost_micros(self) -> int:
        return self._monthly(self.peak_static_weekly_cost_micros)

    @property
    def saved_monthly_micros(self) -> int:
        """Static monthly minus planned monthly (each rounded), so that they add up."""
        return self.static_monthly_cost_micros - self.monthly_cost_micros

    @property
    def saved_vs_peak_monthly_micros(self) -> int:
        return self.peak_static_monthly_cost_micros - self.monthly_cost_micros

    def _monthly(self, weekly_micros: int) -> int:
        return div_half_even(weekly_micros * self.hours_per_month, HOURS_PER_WEEK)


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionPlan(WeeklyFleetPlan):
    """The hourly plan of a Slurm partition, its bands and its cost against static partitions."""

    input: PartitionPlanInput
    node_hours: int
    """Node-hours per week with the schedule."""

    @property
    def hours_per_month(self) -> int:
        return self.input.hours_per_month


def div_half_even(numerator: int, denominator: int) -> int:
    """``numerator / denominator`` rounded half to even (``denominator`` > 0)."""
    quotient, remainder = divmod(numerator, denominator)
    twice = 2 * remainder
    if twice > denominator or (twice == denominator and quotient % 2):
        quotient += 1
    return quotient


def check_hourly_load(hourly_load: Sequence[float]) -> None:
    """One finite, non-negative load per hour of the week, or :class:`InvalidInput`."""
    if len(hourly_load) != HOURS_PER_WEEK:
        raise InvalidInput(
            f"hourly_load needs {HOURS_PER_WEEK} values (one per hour of the week), "
            f"got {len(hourly_load)}"
        )
    bad = [h for h, load in enumerate(hourly_load) if not (math.isfinite(load) and load >= 0)]
    if bad:
        raise InvalidInput(
            f"hourly_load must be finite and >= 0; hour {bad[0]} is {hourly_load[bad[0]]!r}"
        )


def _check(inp: PartitionPlanInput) -> None:
    check_hourly_load(inp.hourly_load)
    if not inp.nodes:
        raise InvalidInput("the partition needs at least one node")
    if len(set(inp.nodes)) != len(inp.nodes):
        raise InvalidInput("node names must be unique")
    for name in inp.nodes:
        if not name or any(c in name for c in "[],= \t\n"):
            raise InvalidInput(f"not a Slurm node name: {name!r}")
    if not inp.partition or any(c in inp.partition for c in "=, \t\n"):
        raise InvalidInput(f"not a Slurm partition name: {inp.partition!r}")
    if inp.replicas_per_node < 1:
        raise InvalidInput(f"replicas_per_node must be >= 1, got {inp.replicas_per_node}")
    if not (math.isfinite(inp.tpot_target_s) and inp.tpot_target_s > 0):
        raise InvalidInput(f"tpot_target_s must be finite and > 0, got {inp.tpot_target_s!r}")
    if inp.node_hour_micros < 0:
        raise InvalidInput(f"node_hour_micros must be >= 0, got {inp.node_hour_micros}")
    if inp.hours_per_month < 1:
        raise InvalidInput(f"hours_per_month must be >= 1, got {inp.hours_per_month}")
    if inp.max_concurrency_per_replica is not None and inp.max_concurrency_per_replica < 1:
        raise InvalidInput("max_concurrency_per_replica must be >= 1")
    if "\n" in inp.speculation:
        raise InvalidInput("speculation must be one line")


def busiest_replica(load: float, replicas: int) -> int:
    """Sessions on the busiest of ``replicas`` sharing ``load`` evenly: sessions do not split,
    and a replica that serves at all holds at least one."""
    return max(1, math.ceil(load / replicas))


def _hour(hour: int, load: float, inp: PartitionPlanInput, tpot_s: TpotModel) -> HourPlan:
    limit = inp.max_concurrency_per_replica
    candidate: HourPlan | None = None
    for nodes in range(1, len(inp.nodes) + 1):
        concurrency = busiest_replica(load, nodes * inp.replicas_per_node)
        plain = tpot_s(float(concurrency), False)
        fast = tpot_s(float(concurrency), True)
        speculate = fast < plain
        best = fast if speculate else plain
        if not math.isfinite(best):
            raise InvalidInput(f"the TPOT model gave {best!r} at concurrency {concurrency}")
        fits = limit is None or concurrency <= limit
        candidate = HourPlan(
            hour_of_week=hour,
            load=load,
            nodes=nodes,
            per_replica_concurrency=concurrency,
            speculate=speculate,
            tpot_s=best,
            meets_target=fits and best <= inp.tpot_target_s,
        )
        if candidate.meets_target:
            return candidate
    assert candidate is not None  # at least one node
    return candidate


def hour_bands(hours: Sequence[HourPlan]) -> tuple[Band, ...]:
    """Runs of consecutive hours with the same nodes and speculation; a run that reaches the
    week's end and one that starts it with the same settings are one band."""
    runs: list[list[HourPlan]] = []
    for hour in hours:
        if runs and (runs[-1][0].nodes, runs[-1][0].speculate) == (hour.nodes, hour.speculate):
            runs[-1].append(hour)
        else:
            runs.append([hour])
    if len(runs) > 1 and (runs[0][0].nodes, runs[0][0].speculate) == (
        runs[-1][0].nodes,
        runs[-1][0].speculate,
    ):
        runs[0] = runs.pop() + runs[0]  # the week wraps: Sunday night runs into Monday
        runs.sort(key=lambda run: run[0].hour_of_week)
    return tuple(
        Band(
            start=run[0].hour_of_week,
            hours=len(run),
            nodes=run[0].nodes,
            speculate=run[0].speculate,
            meets_target=all(hour.meets_target for hour in run),
            peak_load=max(hour.load for hour in run),
            worst_tpot_s=max(hour.tpot_s for hour in run),
        )
        for run in runs
    )


def plan_partition(inp: PartitionPlanInput, *, tpot_s: TpotModel) -> PartitionPlan:
    """Nodes and speculation for every hour of the week, its bands and its cost.

    Args:
        inp: Load, nodes, target and price.
        tpot_s: ``tpot_s(concurrency_per_replica, speculate)``, seconds (see
            :func:`tpot_model`); called with whole concurrencies >= 1.

    Returns:
        The plan (see the module's docstring for the rules).

    Raises:
        InvalidInput: On an input out of range, or a model giving a non-finite TPOT.
    """
    _check(inp)
    hours = tuple(_hour(h, float(load), inp, tpot_s) for h, load in enumerate(inp.hourly_load))
    node_hours = sum(hour.nodes for hour in hours)
    price = inp.node_hour_micros
    return PartitionPlan(
        input=inp,
        hours=hours,
        bands=hour_bands(hours),
        node_hours=node_hours,
        weekly_cost_micros=node_hours * price,
        static_weekly_cost_micros=len(inp.nodes) * HOURS_PER_WEEK * price,
        peak_static_weekly_cost_micros=max(h.nodes for h in hours) * HOURS_PER_WEEK * price,
    )


# ------------------------------------------------------------------------ rendering


_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def compress_hostlist(names: Iterable[str]) -> str:
    """Node names as a Slurm hostlist expression: ``gpu01, gpu02, gpu03, gpu05`` ->
    ``gpu[01-03,05]``.

    Names are grouped by the text before their trailing number and by its zero padding
    (``gpu01`` and ``gpu1`` stay apart; ``gpu09`` and ``gpu10`` share ``gpu[09-10]``);
    groups keep the order of their first name, numbers are sorted and runs of consecutive
    numbers become ranges. Names without a trailing number are written as they are;
    duplicates are dropped. Slurm expands the result back to the same set of names.

    Raises:
        InvalidInput: If a name is empty or holds ``[``, ``]``, ``,`` or whitespace.
    """
    unique = list(dict.fromkeys(names))
    for name in unique:
        if not name or any(c in name for c in "[], \t\n"):
            raise InvalidInput(f"not a Slurm node name: {name!r}")
    padded: dict[str, set[int]] = {}  # prefix -> padded widths seen
    parsed: list[tuple[str, str] | None] = []
    for name in unique:
        match = _NUMBERED.match(name)
        parsed.append((match[1], match[2]) if match else None)
        if match and len(match[2]) > 1 and match[2].startswith("0"):
            padded.setdefault(match[1], set()).add(len(match[2]))
    groups: dict[tuple[str, int] | str, list[int]] = {}
    for name, parts in zip(unique, parsed, strict=True):
        if parts is None:
            groups.setdefault(name, [])
            continue
        prefix, digits = parts
        if len(digits) > 1 and digits.startswith("0"):
            width = len(digits)
        else:  # unpadded: joins the widest padding it prints identically under, if any
            fitting = [w for w in padded.get(prefix, ()) if w <= len(digits)]
            width = max(fitting) if fitting else 0
        groups.setdefault((prefix, width), []).append(int(digits))
    out: list[str] = []
    for key, numbers in groups.items():
        if isinstance(key, str):
            out.append(key)
            continue
        prefix, width = key
        runs = _runs(sorted(numbers))
        texts = [
            f"{lo:0{width}d}" if lo == hi else f"{lo:0{width}d}-{hi:0{width}d}" for lo, hi in runs
        ]
        single = len(runs) == 1 and runs[0][0] == runs[0][1]
        out.append(f"{prefix}{texts[0]}" if single else f"{prefix}[{','.join(texts)}]")
    return ",".join(out)


def _runs(numbers: Sequence[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for number in numbers:
        if runs and number == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], number)
        else:
            runs.append((number, number))
    return runs


def hour_label(hour_of_week: int) -> str:
    """``Mon 08:00`` for hour 8 of the week."""
    day, hour = divmod(hour_of_week % HOURS_PER_WEEK, 24)
    return f"{DAY_NAMES[day]} {hour:02d}:00"


def _cron_day(hour_of_week: int) -> int:
    """cron's day of the week (0 = Sunday) of an hour of a Monday-based week."""
    return (hour_of_week // 24 + 1) % 7


def _replicas(count: int) -> str:
    return f"{count} replica" if count == 1 else f"{count} replicas"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _money(micros: int, currency: str) -> str:
    return f"{format_micros(micros)} {currency}"


def _cost_lines(plan: PartitionPlan) -> list[str]:
    inp = plan.input
    total = len(inp.nodes)
    return [
        f"# Node-hour price {_money(inp.node_hour_micros, inp.currency)}. Per week: "
        f"{_money(plan.weekly_cost_micros, inp.currency)} scheduled "
        f"({plan.node_hours} node-hours),",
        f"#   {_money(plan.static_weekly_cost_micros, inp.currency)} static ({total} nodes): "
        f"saves {_money(plan.saved_weekly_micros, inp.currency)};",
        f"#   {_money(plan.peak_static_weekly_cost_micros, inp.currency)} static at the peak "
        f"({plan.peak_nodes} nodes): "
        f"saves {_money(plan.saved_vs_peak_weekly_micros, inp.currency)}.",
        f"# Per month ({inp.hours_per_month} h): "
        f"{_money(plan.monthly_cost_micros, inp.currency)} scheduled, saves "
        f"{_money(plan.saved_monthly_micros, inp.currency)} against {total} static nodes.",
    ]


def _band_comment(band: Band, plan: PartitionPlan) -> str:
    inp = plan.input
    span = (
        "all week"
        if band.hours == HOURS_PER_WEEK
        else (f"{hour_label(band.start)}-{hour_label(band.end)} UTC ({band.hours} h)")
    )
    mode = f"speculation on ({inp.speculation})" if band.speculate else "speculation off"
    verdict = (
        f"TPOT p90 <= {_ms(band.worst_tpot_s)}"
        if band.meets_target
        else f"TARGET NOT MET: TPOT p90 up to {_ms(band.worst_tpot_s)} even on all nodes"
    )
    return (
        f"# {span}: {band.nodes} of {len(inp.nodes)} nodes, {mode}, "
        f"peak load {band.peak_load:g} sessions, {verdict}"
    )


def scontrol_schedule(plan: PartitionPlan) -> str:
    """The schedule as crontab lines, one per band start, with a comment per band.

    Each line runs ``scontrol update PartitionName=<p> Nodes=<first n nodes>`` at the hour
    its band starts (``0 H * * DOW``, DOW 0 = Sunday). Times are UTC.
    """
    inp = plan.input
    lines = [
        f"# SpecLedger partition schedule for PartitionName={inp.partition}: "
        f"{len(inp.nodes)} nodes, {_replicas(inp.replicas_per_node)} per node,",
        f"# TPOT p90 target {_ms(inp.tpot_target_s)}, each hour sized for its measured load.",
        "# Times are UTC. cron and Slurm's scrontab read them in the local time zone of the",
        "# host they run on (scrontab: slurmctld's): run them where that zone is UTC, or shift",
        "# the hours.",
        "# scontrol update needs a Slurm operator or administrator (or root).",
        "# Speculation is a vLLM setting, not a Slurm one: restart the replicas with or without",
        f"# their speculative config ({inp.speculation}) where a band's comment says it changes.",
        *_cost_lines(plan),
    ]
    if plan.unmet_hours:
        lines.append(
            f"# {len(plan.unmet_hours)} hour(s) of the week miss the target even on all nodes."
        )
    for band in plan.bands:
        day, hour = _cron_day(band.start), band.start % 24
        hostlist = compress_hostlist(inp.nodes[: band.nodes])
        lines += [
            _band_comment(band, plan),
            f"0 {hour} * * {day} scontrol update PartitionName={inp.partition} Nodes={hostlist}",
        ]
    return "\n".join(lines) + "\n"


def power_saving_conf(
    plan: PartitionPlan,
    *,
    resume_program: str,
    suspend_program: str,
    suspend_time_s: int = 600,
    suspend_timeout_s: int = 120,
    resume_timeout_s: int = 1200,
) -> str:
    """slurm.conf power-saving settings that go with the schedule.

    Nodes the schedule takes out of the partition go idle; Slurm powers an idle node down
    after ``suspend_time_s`` and up again when a job needs it. ``SuspendExcNodes`` keeps the
    week's floor (the nodes every hour needs) always up.

    Args:
        plan: The plan.
        resume_program: Program slurmctld runs to power nodes up (``ResumeProgram``).
        suspend_program: Program slurmctld runs to power nodes down (``SuspendProgram``).
        suspend_time_s: Idle seconds before a node is powered down (``SuspendTime``).
        suspend_timeout_s: Seconds a node may take to power down (``SuspendTimeout``).
        resume_timeout_s: Seconds a node may take to boot, start slurmd and be usable
            (``ResumeTimeout``); a GPU node that loads model weights needs minutes.

    Raises:
        InvalidInput: On an empty program path or a time that is not positive.
    """
    for name, program in (("resume_program", resume_program), ("suspend_program", suspend_program)):
        if not program.strip() or "\n" in program:
            raise InvalidInput(f"{name} must be a path on one line")
    for name, value in (
        ("suspend_time_s", suspend_time_s),
        ("suspend_timeout_s", suspend_timeout_s),
        ("resume_timeout_s", resume_timeout_s),
    ):
        if value < 1:
            raise InvalidInput(f"{name} must be >= 1 second, got {value}")
    inp = plan.input
    floor = plan.floor_nodes
    kept = compress_hostlist(inp.nodes[:floor])
    lines = [
        f"# Power saving for the nodes of PartitionName={inp.partition} "
        "(SpecLedger partition schedule).",
        "# The schedule takes nodes out of the partition when the load does not need them;",
        "# Slurm powers a node down (SuspendProgram) once it has been idle for SuspendTime",
        f"# ({suspend_time_s} s), and up again (ResumeProgram) when a job needs it.",
        f"# SuspendExcNodes keeps the week's floor up: the {floor} node(s) that even the",
        "# quietest hour needs. ResumeTimeout must cover a boot and the model load of a",
        "# replica. Apply with `scontrol reconfigure`.",
        f"SuspendProgram={suspend_program}",
        f"ResumeProgram={resume_program}",
        f"SuspendTime={suspend_time_s}",
        f"SuspendTimeout={suspend_timeout_s}",
        f"ResumeTimeout={resume_timeout_s}",
        f"SuspendExcNodes={kept}",
    ]
    return "\n".join(lines) + "\n"


def partition_plan_as_dict(plan: PartitionPlan) -> dict[str, object]:
    """JSON-ready form: money as decimal strings, hours of the week as numbers and labels."""
    inp = plan.input
    return {
        "partition": inp.partition,
        "nodes": list(inp.nodes),
        "replicas_per_node": inp.replicas_per_node,
        "tpot_target_s": inp.tpot_target_s,
        "currency": inp.currency,
        "node_hour_cost": format_micros(inp.node_hour_micros),
        "floor_nodes": plan.floor_nodes,
        "peak_nodes": plan.peak_nodes,
        "unmet_hours": list(plan.unmet_hours),
        "node_hours_per_week": plan.node_hours,
        "weekly_cost": format_micros(plan.weekly_cost_micros),
        "static_weekly_cost": format_micros(plan.static_weekly_cost_micros),
        "peak_static_weekly_cost": format_micros(plan.peak_static_weekly_cost_micros),
        "saved_weekly": format_micros(plan.saved_weekly_micros),
        "saved_vs_peak_weekly": format_micros(plan.saved_vs_peak_weekly_micros),
        "hours_per_month": inp.hours_per_month,
        "monthly_cost": format_micros(plan.monthly_cost_micros),
        "static_monthly_cost": format_micros(plan.static_monthly_cost_micros),
        "peak_static_monthly_cost": format_micros(plan.peak_static_monthly_cost_micros),
        "saved_monthly": format_micros(plan.saved_monthly_micros),
        "saved_vs_peak_monthly": format_micros(plan.saved_vs_peak_monthly_micros),
        "bands": [
            {
                "start": band.start,
                "hours": band.hours,
                "from": hour_label(band.start),
                "until": hour_label(band.end),
                "nodes": band.nodes,
                "hostlist": compress_hostlist(inp.nodes[: band.nodes]),
                "speculate": band.speculate,
                "meets_target": band.meets_target,
                "peak_load": band.peak_load,
                "worst_tpot_s": band.worst_tpot_s,
            }
            for band in plan.bands
        ],
        "hours": [
            {
                "hour_of_week": hour.hour_of_week,
                "load": hour.load,
                "nodes": hour.nodes,
                "per_replica_concurrency": hour.per_replica_concurrency,
                "speculate": hour.speculate,
                "tpot_s": hour.tpot_s,
                "meets_target": hour.meets_target,
            }
            for hour in plan.hours
        ],
    }
