"""What an on-premises Slurm GPU cluster costs, as a derived FOCUS 1.2 bill per node and hour.

An on-prem cluster has no cloud invoice. A cost model file says what each class of node costs
(purchase amortized over N years, power, colocation, network fabric, support, a share of
staff), and this module turns it into FOCUS rows: one row per node, hour and cost component,
clearly labelled as derived, which the billing ingest reads like any other bill. Each row's
``ResourceId`` is the node's resource id, so the rows join the replica registered for that
node (the deployment ``slurm-<cluster>``, one replica per node).

Cloud Slurm clusters (AWS ParallelCluster on EC2) already have a bill: a node given a
``resource_id`` (its EC2 instance id) is a *cloud node*; it gets no derived rows, and its
replica is registered with that resource id so that its EC2 rows join it instead.

The model (TOML; money and rates as decimal strings, or TOML numbers read exactly)::

    cluster = "research"           # letters, digits, '.', '_', '-'
    currency = "USD"               # ISO 4217
    tags = { team = "ml-platform" } # optional: copied into every row's Tags

    [classes.h100]                 # a node class
    gpus = 8
    purchase_price = "320000.00"   # per node
    residual_value = "0"           # optional (default 0): not amortized
    amortization_years = 4         # whole years
    in_service = 2026-01-01        # amortization and every other cost start (00:00 UTC)
    power_kw = "10.2"              # average draw of the node
    pue = "1.3"                    # power usage effectiveness, >= 1
    price_per_kwh = "0.12"
    colocation_per_month = "1500.00"
    fabric_per_month = "400.00"    # network fabric share per node
    support_per_year = "12000.00"
    staff_per_month = "800.00"

    [nodes.gpu01]
    class = "h100"

    [nodes.gpu02]
    class = "h100"
    in_service = 2026-03-01        # optional: overrides the class's date
    retired = 2029-06-01           # optional: no cost from this date on
    tags = { rack = "r12" }        # optional: added to (and overriding) the cluster's tags

    [nodes.pc-queue1-st-p5-1]      # a cloud node (ParallelCluster on EC2): no derived rows
    resource_id = "i-0abc1234def567890"
    gpus = 8                       # or class = "..." to take the class's GPU count

Every key is checked; unknown keys are refused. Errors name the field, e.g.
``classes.h100.pue: must be >= 1``.

The rounding rule (exact, no drift). Each component of a node has an exact accrual function
``A(t)``, a :class:`~fractions.Fraction` of micros accrued from the node's in-service instant
``E`` to ``t`` (constant before ``E`` and from the node's retirement on):

* power accrues by the hour: ``A(t) = kW x PUE x price_per_kwh x hours(t - E)``;
* every other component accrues a fixed amount per *calendar month*, evenly over the seconds
  of each month: ``A(t) = monthly x (m(t) - m(E))``, where ``m(t)`` counts calendar months
  since year 0 with the current month's elapsed fraction (so a February hour costs more
  than a March hour, and every full calendar month costs exactly its monthly amount).
  Monthly amounts are ``colocation_per_month``, ``fabric_per_month``, ``staff_per_month``,
  ``support_per_year / 12`` and, for amortization, ``(purchase_price - residual_value) /
  (12 x amortization_years)``, capped at ``purchase_price - residual_value``.

A row for the hour ``[a, b)`` costs ``floor(A(b)) - floor(A(a))`` micros. So:

* any window ``[s, e)`` cut into sub-windows in any way sums to ``floor(A(e)) - floor(A(s))``
  (the sums telescope): a month rendered whole equals it rendered day by day, to the micro;
* every row is >= 0 and the sub-micro remainders carry over to the next hour, never lost;
* for a node in service from the first day of a month, every full calendar month of a
  monthly component sums to exactly its monthly amount when that is a whole number of
  micros (else its floor or its ceiling, the remainder carried), every 12 months from the
  in-service date to exactly ``support_per_year`` and to
  ``(purchase_price - residual_value) / amortization_years`` (when whole micros), and the
  whole amortization (12 x N calendar months, then no more amortization rows) to exactly
  ``purchase_price - residual_value``. A node in service mid-month accrues its first month
  pro rata by the second and amortization ends when the cap is reached (within a day of
  the anniversary); the total is still exact. Retiring a node stops every component,
  amortization included (the model writes off nothing).

:func:`hourly_cost_micros` and :func:`component_cost_micros` compute ``floor(A(e)) -
floor(A(s))`` directly, without rendering rows.

The rows (``FOCUS_COLUMNS``): one per node, hour and component that costs anything, so a
FinOps tool groups them by ``SkuMeter`` (Amortization, Power, Colocation, Network fabric,
Support, Staff) as it would a cloud bill's line items. ``BilledCost`` = ``EffectiveCost`` =
``ListCost`` = ``ContractedCost`` (there is no invoice to reconcile against);
``ChargeCategory`` Usage, ``ChargeClass`` null, ``ChargeFrequency`` Usage-Based for power and
Recurring for the rest, ``PricingCategory`` Standard; ``ServiceCategory`` Compute (Networking
for the fabric); ``ProviderName``, ``PublisherName`` and ``InvoiceIssuerName`` are
:data:`DERIVED_PROVIDER`; ``ResourceId`` is the node's resource id, ``ResourceName`` its name;
``PricingQuantity``/``ConsumedQuantity`` 1 Hours (power: the facility kWh of the hour,
kW x PUE); ``Tags`` hold the user tags plus ``specledger/derived``, ``specledger/slurm-cluster``,
``specledger/slurm-node``, ``specledger/node-class`` and ``specledger/cost-component``;
``x_SpecLedgerDerivedFrom`` names the model file and ``x_SpecLedgerModelSha256`` its content.

Pure: no I/O; the TOML is parsed and the CSV written by ``ingest.cluster_bill``.
"""

import hashlib
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, localcontext
from enum import StrEnum
from fractions import Fraction

from app.domain.errors import InvalidInput
from app.domain.money import MICROS_PER_UNIT, format_micros
from app.domain.windows import MAX_WINDOW
from app.slurm.rules.usage import cluster_deployment

DERIVED_PROVIDER = "SpecLedger cost model (derived, not an invoice)"
"""ProviderName, PublisherName and InvoiceIssuerName of every derived row."""
RESOURCE_SCHEME = "slurm://"
TAG_PREFIX = "specledger/"
"""Prefix of the tags the model itself sets (FOCUS 1.2: provider-defined tags are prefixed)."""

_HOUR = timedelta(hours=1)
_US = timedelta(microseconds=1)
_HOUR_US = _HOUR // _US
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_NAME_RULE = "must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_DECIMAL = re.compile(r"-?\d+(?:\.\d+)?")
_CURRENCY = re.compile(r"[A-Z]{3}")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_MAX_GPUS = 4096
_MAX_YEARS = 50


class CostModelError(InvalidInput, ValueError):
    """A cost model that cannot be used; ``path`` names the field (``classes.h100.pue``).

    It is both the project's :class:`~app.domain.errors.InvalidInput` (the CLI prints it and
    exits 2; the API answers 422) and a :class:`ValueError`.
    """

    def __init__(self, path: str, reason: str, *, file: str | None = None) -> None:
        self.path = path
        self.reason = reason
        self.file = file
        message = ": ".join(part for part in (file, path, reason) if part)
        super().__init__(message, fields=[(path, reason)] if path else [])


class CostWindowError(InvalidInput, ValueError):
    """A window the derived bill cannot be rendered for (not whole UTC hours, backwards...)."""


class Component(StrEnum):
    """A cost component; one derived row per node, hour and component."""

    amortization = "amortization"
    power = "power"
    colocation = "colocation"
    fabric = "fabric"
    support = "support"
    staff = "staff"

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {
    Component.amortization: "Amortization",
    Component.power: "Power",
    Component.colocation: "Colocation",
    Component.fabric: "Network fabric",
    Component.support: "Support",
    Component.staff: "Staff",
}


@dataclass(frozen=True, slots=True)
class NodeClass:
    """What one node of a class costs. Money in the model's currency, exact decimals."""

    name: str
    gpus: int
    purchase_price: Decimal
    residual_value: Decimal
    amortization_years: int
    in_service: date
    power_kw: Decimal
    pue: Decimal
    price_per_kwh: Decimal
    colocation_per_month: Decimal
    fabric_per_month: Decimal
    support_per_year: Decimal
    staff_per_month: Decimal


@dataclass(frozen=True, slots=True)
class NodeCost:
    """One Slurm node: a replica of the deployment ``slurm-<cluster>``."""

    name: str
    gpus: int
    resource_id: str
    """The derived ``slurm://<cluster>/<node>``, or the cloud node's own (EC2) resource id."""
    cloud: bool
    """Billed by its cloud (joined by ``resource_id``): no derived rows."""
    node_class: NodeClass | None
    """None only for a cloud node given ``gpus`` without a class."""
    in_service: date | None
    """First day of cost (00:00 UTC); None for a cloud node."""
    retired: date | None = None
    """First day without cost (exclusive end), if any."""
    tags: tuple[tuple[str, str], ...] = ()
    """User tags (cluster's, then the node's), copied into each row's Tags."""


@dataclass(frozen=True, slots=True)
class ClusterCostModel:
    cluster: str
    currency: str
    classes: tuple[NodeClass, ...]
    nodes: tuple[NodeCost, ...]
    source: str
    """Where the model came from (a file name), named in every derived row."""
    sha256: str
    """Of the model's content (canonical JSON), named in every derived row."""

    @property
    def deployment(self) -> str:
        """The deployment whose replicas are this cluster's nodes."""
        return cluster_deployment(self.cluster)

    def node(self, name: str) -> NodeCost:
        """The node called ``name``.

        Raises:
            CostModelError: If the model has no such node.
        """
        for node in self.nodes:
            if node.name == name:
                return node
        raise CostModelError(f"nodes.{_key(name)}", "no such node in the model")


def node_resource_id(cluster: str, node: str) -> str:
    """The ResourceId of an on-prem node's derived rows, and of its replica."""
    return f"{RESOURCE_SCHEME}{cluster}/{node}"


# --- validation ------------------------------------------------------------------------------

_CLASS_MONEY = (
    "purchase_price",
    "colocation_per_month",
    "fabric_per_month",
    "support_per_year",
    "staff_per_month",
)
_CLASS_RATES = ("power_kw", "pue", "price_per_kwh")
_CLASS_KEYS = (
    "gpus",
    *_CLASS_MONEY,
    "residual_value",
    "amortization_years",
    "in_service",
    *_CLASS_RATES,
)
_NODE_KEYS = ("class", "gpus", "resource_id", "in_service", "retired", "tags")
_TOP_KEYS = ("cluster", "currency", "tags", "classes", "nodes")


def cost_model_from_dict(data: Mapping[str, object], *, source: str) -> ClusterCostModel:
    """Validate a cost model (as parsed from TOML, floats as :class:`~decimal.Decimal`).

    Money and rates may be decimal strings, integers or Decimals; a float is refused (it is
    inexact). Dates may be TOML dates or ``YYYY-MM-DD`` strings.

    Raises:
        CostModelError: Naming the first bad field.
    """
    _known_keys(data, "", _TOP_KEYS)
    cluster = _name(_required(data, "", "cluster"), "cluster")
    currency = _string(_required(data, "", "currency"), "currency")
    if not _CURRENCY.fullmatch(currency):
        raise CostModelError(
            "currency", 'must be an ISO 4217 code of three capital letters, such as "USD"'
        )
    cluster_tags = _tags(data.get("tags"), "tags")
    raw_classes = _table(data.get("classes", {}), "classes")
    classes = {
        name: _node_class(name, _table(body, f"classes.{_key(name)}"))
        for name, body in raw_classes.items()
    }
    raw_nodes = _table(_required(data, "", "nodes"), "nodes")
    if not raw_nodes:
        raise CostModelError("nodes", "must name at least one node")
    nodes: list[NodeCost] = []
    owners: dict[str, str] = {}
    for name, body in raw_nodes.items():
        node = _node(cluster, name, _table(body, f"nodes.{_key(name)}"), classes, cluster_tags)
        owner = owners.get(node.resource_id)
        if owner is not None:
            raise CostModelError(
                f"nodes.{_key(name)}.resource_id",
                f"{node.resource_id!r} is already the resource id of node {owner}",
            )
        owners[node.resource_id] = name
        nodes.append(node)
    canonical = json.dumps(dict(data), sort_keys=True, default=str, separators=(",", ":"))
    return ClusterCostModel(
        cluster=cluster,
        currency=currency,
        classes=tuple(classes.values()),
        nodes=tuple(nodes),
        source=source,
        sha256=hashlib.sha256(canonical.encode()).hexdigest(),
    )


def _node_class(name: str, body: Mapping[str, object]) -> NodeClass:
    path = f"classes.{_key(name)}"
    _name(name, path)
    _known_keys(body, path, _CLASS_KEYS)
    money = {
        key: _amount(_required(body, path, key), f"{path}.{key}", money=True)
        for key in _CLASS_MONEY
    }
    rates = {key: _amount(_required(body, path, key), f"{path}.{key}") for key in _CLASS_RATES}
    residual = _amount(body.get("residual_value", 0), f"{path}.residual_value", money=True)
    if residual > money["purchase_price"]:
        raise CostModelError(f"{path}.residual_value", "must not exceed purchase_price")
    if rates["pue"] < 1:
        raise CostModelError(f"{path}.pue", "must be >= 1")
    return NodeClass(
        name=name,
        gpus=_gpus(_required(body, path, "gpus"), f"{path}.gpus"),
        purchase_price=money["purchase_price"],
        residual_value=residual,
        amortization_years=_integer(
            _required(body, path, "amortization_years"),
            f"{path}.amortization_years",
            1,
            _MAX_YEARS,
        ),
        in_service=_date(_required(body, path, "in_service"), f"{path}.in_service"),
        power_kw=rates["power_kw"],
        pue=rates["pue"],
        price_per_kwh=rates["price_per_kwh"],
        colocation_per_month=money["colocation_per_month"],
        fabric_per_month=money["fabric_per_month"],
        support_per_year=money["support_per_year"],
        staff_per_month=money["staff_per_month"],
    )


def _node(
    cluster: str,
    name: str,
    body: Mapping[str, object],
    classes: Mapping[str, NodeClass],
    cluster_tags: dict[str, str],
) -> NodeCost:
    path = f"nodes.{_key(name)}"
    _name(name, path)
    _known_keys(body, path, _NODE_KEYS)
    node_class = None
    if "class" in body:
        class_name = _string(body["class"], f"{path}.class")
        if class_name not in classes:
            known = ", ".join(classes) or "none"
            raise CostModelError(
                f"{path}.class", f"unknown class {class_name!r} (classes: {known})"
            )
        node_class = classes[class_name]
    gpus = _gpus(body["gpus"], f"{path}.gpus") if "gpus" in body else None
    if "resource_id" in body:
        resource_id = _string(body["resource_id"], f"{path}.resource_id")
        if not resource_id or len(resource_id) > 1024 or any(c.isspace() for c in resource_id):
            raise CostModelError(
                f"{path}.resource_id", "must be 1-1024 characters without whitespace"
            )
        for key in ("in_service", "retired", "tags"):
            if key in body:
                raise CostModelError(
                    f"{path}.{key}",
                    "a cloud node (one with resource_id) is billed by its cloud, not by the "
                    "model; remove this key",
                )
        if node_class is None and gpus is None:
            raise CostModelError(f"{path}.gpus", "is required (or a class to take it from)")
        return NodeCost(
            name=name,
            gpus=gpus if gpus is not None else _class_gpus(node_class),
            resource_id=resource_id,
            cloud=True,
            node_class=node_class,
            in_service=None,
        )
    if node_class is None:
        raise CostModelError(f"{path}.class", "is required (or resource_id, for a cloud node)")
    in_service = (
        _date(body["in_service"], f"{path}.in_service")
        if "in_service" in body
        else node_class.in_service
    )
    retired = _date(body["retired"], f"{path}.retired") if "retired" in body else None
    if retired is not None and retired <= in_service:
        raise CostModelError(
            f"{path}.retired", f"must be after the node's in_service date ({in_service})"
        )
    tags = cluster_tags | _tags(body.get("tags"), f"{path}.tags")
    return NodeCost(
        name=name,
        gpus=gpus if gpus is not None else node_class.gpus,
        resource_id=node_resource_id(cluster, name),
        cloud=False,
        node_class=node_class,
        in_service=in_service,
        retired=retired,
        tags=tuple(sorted(tags.items())),
    )


def _class_gpus(node_class: NodeClass | None) -> int:
    assert node_class is not None  # checked by the caller
    return node_class.gpus


def _key(name: str) -> str:
    """A key as TOML writes it in a dotted path."""
    return name if _BARE_KEY.fullmatch(name) else json.dumps(name)


def _path(parent: str, key: str) -> str:
    return f"{parent}.{_key(key)}" if parent else _key(key)


def _known_keys(body: Mapping[str, object], path: str, allowed: tuple[str, ...]) -> None:
    for key in body:
        if key not in allowed:
            raise CostModelError(
                _path(path, str(key)), f"unknown key (expected one of: {', '.join(allowed)})"
            )


def _required(body: Mapping[str, object], path: str, key: str) -> object:
    if key not in body:
        raise CostModelError(_path(path, key), "is required")
    return body[key]


def _table(value: object, path: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise CostModelError(path, "must be a table")
    return value


def _string(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise CostModelError(path, "must be a string")
    return value


def _name(value: object, path: str) -> str:
    text = _string(value, path)
    if not _NAME.fullmatch(text):
        raise CostModelError(path, _NAME_RULE)
    return text


def _integer(value: object, path: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CostModelError(path, "must be a whole number")
    if not low <= value <= high:
        raise CostModelError(path, f"must be from {low} to {high}")
    return value


def _gpus(value: object, path: str) -> int:
    return _integer(value, path, 1, _MAX_GPUS)


def _amount(value: object, path: str, *, money: bool = False) -> Decimal:
    """A non-negative exact decimal: a decimal string, an integer or a Decimal."""
    if isinstance(value, float):
        raise CostModelError(
            path, 'must be a decimal string such as "0.12", not a float (floats are inexact)'
        )
    if isinstance(value, str):
        if not _DECIMAL.fullmatch(value.strip()):
            raise CostModelError(path, f'must be a decimal number such as "0.12", got {value!r}')
        amount = Decimal(value.strip())
    elif isinstance(value, int) and not isinstance(value, bool):
        amount = Decimal(value)
    elif isinstance(value, Decimal) and value.is_finite():
        amount = value
    else:
        raise CostModelError(path, 'must be a decimal number such as "0.12"')
    if amount < 0:
        raise CostModelError(path, "must be >= 0")
    if money and amount != amount.quantize(Decimal("0.000001")):
        raise CostModelError(path, "must have at most 6 decimal places (whole micros)")
    return amount


def _date(value: object, path: str) -> date:
    if isinstance(value, datetime):
        raise CostModelError(path, "must be a date such as 2026-01-01, not a date-time")
    if isinstance(value, date):
        return value
    if isinstance(value, str) and _DATE.fullmatch(value):
        try:
            return date.fromisoformat(value)
        except ValueError:
            pass
    raise CostModelError(path, "must be a date such as 2026-01-01")


def _tags(value: object, path: str) -> dict[str, str]:
    if value is None:
        return {}
    tags: dict[str, str] = {}
    for key, item in _table(value, path).items():
        if not key or key.startswith(TAG_PREFIX):
            raise CostModelError(
                _path(path, key), f"tag keys must be non-empty and not start with {TAG_PREFIX!r}"
            )
        tags[key] = _string(item, _path(path, key))
    return tags


# --- accrual ---------------------------------------------------------------------------------


def _utc_day(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def _month_start(t: datetime) -> datetime:
    return datetime(t.year, t.month, 1, tzinfo=UTC)


def _next_month(t: datetime) -> datetime:
    return datetime(t.year + t.month // 12, t.month % 12 + 1, 1, tzinfo=UTC)


def _month_position(t: datetime) -> Fraction:
    """Calendar months since year 0 (UTC), with the elapsed fraction of the current month."""
    start = _month_start(t)
    elapsed = Fraction((t - start) // _US, (_next_month(start) - start) // _US)
    return 12 * t.year + t.month - 1 + elapsed


def _micros(amount: Decimal) -> Fraction:
    return Fraction(amount) * MICROS_PER_UNIT


@dataclass(frozen=True, slots=True)
class _Accrual:
    """How one component of one node accrues, in exact micros (see the module docstring)."""

    component: Component
    per_month: Fraction
    per_hour: Fraction
    cap: Fraction | None
    start: datetime
    stop: datetime | None

    def accrued(self, t: datetime) -> Fraction:
        t = max(t, self.start)
        if self.stop is not None:
            t = min(t, self.stop)
        value = self.per_month * (_month_position(t) - _month_position(self.start))
        value += self.per_hour * Fraction((t - self.start) // _US, _HOUR_US)
        return value if self.cap is None else min(value, self.cap)

    def runs(self, a: datetime, b: datetime, accrued_at_a: Fraction) -> bool:
        """Whether the hour ``[a, b)`` gets a row: the node is in service in it and, for a
        capped component, something is left to accrue."""
        if b <= self.start or (self.stop is not None and a >= self.stop):
            return False
        return self.cap is None or accrued_at_a < self.cap


def _accruals(node: NodeCost) -> tuple[_Accrual, ...]:
    """The node's components that cost anything (none for a cloud node)."""
    c = node.node_class
    if node.cloud or c is None or node.in_service is None:
        return ()
    start = _utc_day(node.in_service)
    stop = None if node.retired is None else _utc_day(node.retired)
    amortized = _micros(c.purchase_price - c.residual_value)
    monthly = {
        Component.amortization: amortized / (12 * c.amortization_years),
        Component.colocation: _micros(c.colocation_per_month),
        Component.fabric: _micros(c.fabric_per_month),
        Component.support: _micros(c.support_per_year) / 12,
        Component.staff: _micros(c.staff_per_month),
    }
    power = Fraction(c.power_kw) * Fraction(c.pue) * _micros(c.price_per_kwh)
    out: list[_Accrual] = []
    for component in Component:
        per_month = monthly.get(component, Fraction(0))
        per_hour = power if component is Component.power else Fraction(0)
        if per_month or per_hour:
            cap = amortized if component is Component.amortization else None
            out.append(_Accrual(component, per_month, per_hour, cap, start, stop))
    return tuple(out)


def component_cost_micros(
    model: ClusterCostModel, node_name: str, component: Component, start: datetime, end: datetime
) -> int:
    """What one component of a node costs in ``[start, end)``: exactly what its derived rows
    in that window sum to (0 for a cloud node, or a component the model sets to zero).

    Raises:
        CostModelError: If the model has no such node.
        CostWindowError: If an instant is naive or ``end`` is before ``start``.
    """
    start, end = _instants(start, end)
    for accrual in _accruals(model.node(node_name)):
        if accrual.component is component:
            return math.floor(accrual.accrued(end)) - math.floor(accrual.accrued(start))
    return 0


def hourly_cost_micros(
    model: ClusterCostModel, node_name: str, start: datetime, end: datetime
) -> int:
    """What a node costs in ``[start, end)`` (any instants, not only whole hours), every
    component together: exactly what the node's derived rows in that window sum to.

    Raises:
        CostModelError: If the model has no such node.
        CostWindowError: If an instant is naive or ``end`` is before ``start``.
    """
    return sum(
        component_cost_micros(model, node_name, component, start, end) for component in Component
    )


def _instants(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    if start.tzinfo is None or end.tzinfo is None:
        raise CostWindowError("window instants must be timezone-aware (UTC)")
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    if end < start:
        raise CostWindowError(f"window end {end:%Y-%m-%dT%H:%M:%SZ} is before its start")
    return start, end


# --- rendering -------------------------------------------------------------------------------

FOCUS_COLUMNS = (
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingAccountType",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "EffectiveCost",
    "InvoiceIssuerName",
    "ListCost",
    "PricingCategory",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceCategory",
    "ServiceName",
    "ServiceSubcategory",
    "SkuId",
    "SkuMeter",
    "SkuPriceId",
    "SubAccountId",
    "SubAccountName",
    "SubAccountType",
    "Tags",
    "x_SpecLedgerDerivedFrom",
    "x_SpecLedgerModelSha256",
)
"""The columns of a derived bill, in file order (FOCUS 1.2 and two ``x_`` columns)."""


def derived_rows(model: ClusterCostModel, start: datetime, end: datetime) -> list[dict[str, str]]:
    """The derived FOCUS 1.2 rows of ``[start, end)``, as a list (see :func:`iter_derived_rows`;
    a month of 8 nodes is about 36,000 rows).

    Raises:
        CostWindowError: As :func:`iter_derived_rows`.
    """
    return list(iter_derived_rows(model, start, end))


def iter_derived_rows(
    model: ClusterCostModel, start: datetime, end: datetime
) -> Iterator[dict[str, str]]:
    """The derived FOCUS 1.2 rows of ``[start, end)``, one at a time: per hour, per on-prem
    node in service (model order), per component that costs anything. Values are text ready
    for CSV (``FOCUS_COLUMNS``); ``""`` is a null (ChargeClass).

    Ingest replaces a source's billing period as a whole, so render whole months (one
    window, or several files ingested together) for a source.

    Raises:
        CostWindowError: At once (not on the first row) if ``start`` or ``end`` is naive or not
            on a whole UTC hour, ``end`` is before ``start``, or the window is longer than
            about three years.
    """
    start, end = _instants(start, end)
    if any(t.minute or t.second or t.microsecond for t in (start, end)):
        raise CostWindowError("the window must start and end on whole UTC hours")
    if end - start > MAX_WINDOW:
        raise CostWindowError(f"the window is longer than {MAX_WINDOW.days} days")
    plans = [
        (accrual, _fixed_columns(model, node, accrual))
        for node in model.nodes
        for accrual in _accruals(node)
    ]
    return _rows(plans, start, end)


def _rows(
    plans: list[tuple[_Accrual, dict[str, str]]], start: datetime, end: datetime
) -> Iterator[dict[str, str]]:
    # Nodes of one class and dates share their accruals: each is computed once per instant.
    accrued = {accrual: accrual.accrued(start) for accrual, _ in plans}
    a, a_text = start, _iso(start)
    while a < end:
        b = a + _HOUR
        b_text = _iso(b)
        month = _month_start(a)
        period = {"BillingPeriodStart": _iso(month), "BillingPeriodEnd": _iso(_next_month(month))}
        following = {accrual: accrual.accrued(b) for accrual in accrued}
        for accrual, fixed in plans:
            before, after = accrued[accrual], following[accrual]
            if not accrual.runs(a, b, before):
                continue
            cost = format_micros(math.floor(after) - math.floor(before))
            yield {
                **fixed,
                "BilledCost": cost,
                "EffectiveCost": cost,
                "ListCost": cost,
                "ContractedCost": cost,
                **period,
                "ChargePeriodStart": a_text,
                "ChargePeriodEnd": b_text,
            }
        accrued, a, a_text = following, b, b_text


_CATEGORY = {Component.fabric: ("Networking", "Other (Networking)")}
_COMPUTE = ("Compute", "Other (Compute)")


def _fixed_columns(model: ClusterCostModel, node: NodeCost, accrual: _Accrual) -> dict[str, str]:
    """Everything of a node's component row but the hour and the cost."""
    c = node.node_class
    assert c is not None  # an accrual exists only for an on-prem node
    component = accrual.component
    category, subcategory = _CATEGORY.get(component, _COMPUTE)
    if component is Component.power:
        quantity, unit = _plain(_exact_product(c.power_kw, c.pue)), "kWh"
    else:
        quantity, unit = "1", "Hours"
    tags = dict(node.tags)
    tags.update(
        {
            f"{TAG_PREFIX}derived": "cost-model",
            f"{TAG_PREFIX}slurm-cluster": model.cluster,
            f"{TAG_PREFIX}slurm-node": node.name,
            f"{TAG_PREFIX}node-class": c.name,
            f"{TAG_PREFIX}cost-component": component.value,
        }
    )
    return {
        "BillingAccountId": f"specledger-cost-model:{model.cluster}",
        "BillingAccountName": f"Slurm cluster {model.cluster} (derived cost model)",
        "BillingAccountType": "Derived cost model",
        "BillingCurrency": model.currency,
        "ChargeCategory": "Usage",
        "ChargeClass": "",
        "ChargeDescription": (
            f"{component.label} of Slurm node {node.name} ({c.name}): "
            f"{_detail(component, c, model.currency)}. "
            f"Derived from cost model {model.source}; not an invoice."
        ),
        "ChargeFrequency": "Usage-Based" if component is Component.power else "Recurring",
        "ConsumedQuantity": quantity,
        "ConsumedUnit": unit,
        "InvoiceIssuerName": DERIVED_PROVIDER,
        "PricingCategory": "Standard",
        "PricingQuantity": quantity,
        "PricingUnit": unit,
        "ProviderName": DERIVED_PROVIDER,
        "PublisherName": DERIVED_PROVIDER,
        "ResourceId": node.resource_id,
        "ResourceName": node.name,
        "ResourceType": "Slurm node",
        "ServiceCategory": category,
        "ServiceName": "Slurm GPU cluster (on-premises)",
        "ServiceSubcategory": subcategory,
        "SkuId": f"{c.name}/{component.value}",
        "SkuMeter": component.label,
        "SkuPriceId": f"{c.name}/{component.value}@{_price_digest(c)}",
        "SubAccountId": f"slurm:{model.cluster}",
        "SubAccountName": f"Slurm cluster {model.cluster}",
        "SubAccountType": "Slurm cluster",
        "Tags": json.dumps(tags, sort_keys=True, separators=(",", ":"), ensure_ascii=False),
        "x_SpecLedgerDerivedFrom": model.source,
        "x_SpecLedgerModelSha256": model.sha256,
    }


def _price_digest(c: NodeClass) -> str:
    """Twelve hex digits naming the class's prices: a changed price is a new SkuPriceId."""
    return hashlib.sha256(repr(c).encode()).hexdigest()[:12]


def _detail(component: Component, c: NodeClass, currency: str) -> str:
    if component is Component.amortization:
        residual = f" less {_plain(c.residual_value)} residual" if c.residual_value else ""
        return (
            f"{_plain(c.purchase_price)} {currency}{residual} straight-line over "
            f"{c.amortization_years} years by calendar month, from the node's in-service date"
        )
    if component is Component.power:
        return (
            f"{_plain(c.power_kw)} kW x PUE {_plain(c.pue)} x "
            f"{_plain(c.price_per_kwh)} {currency}/kWh per hour"
        )
    per = {
        Component.colocation: (c.colocation_per_month, "month"),
        Component.fabric: (c.fabric_per_month, "month"),
        Component.support: (c.support_per_year, "year"),
        Component.staff: (c.staff_per_month, "month"),
    }
    amount, period = per[component]
    return f"{_plain(amount)} {currency} per {period}, spread evenly over each calendar month"


def _exact_product(a: Decimal, b: Decimal) -> Decimal:
    """``a x b`` without rounding (the product of two finite decimals is one)."""
    with localcontext() as context:
        context.prec = len(a.as_tuple().digits) + len(b.as_tuple().digits) + 1
        return a * b


def _plain(value: Decimal) -> str:
    """A decimal in plain notation (``13.26``, never ``1.326E+1``)."""
    return format(value, "f")


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")
