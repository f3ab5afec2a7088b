"""A Slurm cluster's cost model: validation, the exact hourly accrual, and the derived FOCUS
bill read by the project's own billing ingest."""

import csv
import gzip
import io
import itertools
from collections import Counter, defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from app.domain.money import parse_micros
from app.models import BillingRow
from app.slurm.rules.cluster_cost import (
    DERIVED_PROVIDER,
    FOCUS_COLUMNS,
    ClusterCostModel,
    Component,
    CostModelError,
    CostWindowError,
    component_cost_micros,
    cost_model_from_dict,
    derived_rows,
    hourly_cost_micros,
    node_resource_id,
)
from ingest.cluster_bill import load_cost_model, write_derived_bill
from ingest.load import LoadAction
from ingest.service import IngestOptions, ingest_billing

HOUR = timedelta(hours=1)
MARCH = (datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 4, 1, tzinfo=UTC))

EXAMPLE_TOML = """\
cluster = "research"
currency = "USD"
tags = { team = "ml-platform" }

[classes.h100]
gpus = 8
purchase_price = "320000.00"
amortization_years = 4
in_service = 2026-01-01
power_kw = 10.2
pue = 1.3
price_per_kwh = "0.12"
colocation_per_month = "1500.00"
fabric_per_month = "400.00"
support_per_year = "12000.00"
staff_per_month = "800.00"

[nodes.gpu01]
class = "h100"

[nodes.gpu02]
class = "h100"
tags = { rack = "r12" }

[nodes.pc-queue1-st-p5-1]
resource_id = "i-0abc1234def567890"
gpus = 8
"""


def _data() -> dict[str, Any]:
    return {
        "cluster": "research",
        "currency": "USD",
        "classes": {
            "h100": {
                "gpus": 8,
                "purchase_price": "320000.00",
                "amortization_years": 4,
                "in_service": date(2026, 1, 1),
                "power_kw": "10.2",
                "pue": "1.3",
                "price_per_kwh": "0.12",
                "colocation_per_month": "1500.00",
                "fabric_per_month": "400.00",
                "support_per_year": "12000.00",
                "staff_per_month": "800.00",
            }
        },
        "nodes": {"gpu01": {"class": "h100"}, "gpu02": {"class": "h100"}},
    }


def _model(**changes: Any) -> ClusterCostModel:
    data = _data()
    for dotted, value in changes.items():
        _set(data, dotted, value)
    return cost_model_from_dict(data, source="research.toml")


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set (or, with ``_DELETE``, remove) ``classes__h100__pue``: a path split on ``__``."""
    *parents, last = dotted.split("__")
    for key in parents:
        data = data.setdefault(key, {})
    if value is _DELETE:
        del data[last]
    else:
        data[last] = value


_DELETE = object()


def _micros(rows: list[dict[str, str]], **where: str) -> int:
    return sum(
        parse_micros(r["EffectiveCost"])
        for r in rows
        if all(r[column] == value for column, value in where.items())
    )


def _day(year: int, month: int, day: int) -> datetime:
    return datetime(year, month, day, tzinfo=UTC)


# --- the model -----------------------------------------------------------------------------


def test_the_example_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "research.toml"
    path.write_text(EXAMPLE_TOML)

    model = load_cost_model(path)

    assert (model.cluster, model.currency, model.deployment) == (
        "research",
        "USD",
        "slurm-research",
    )
    assert [(n.name, n.gpus, n.resource_id, n.cloud) for n in model.nodes] == [
        ("gpu01", 8, "slurm://research/gpu01", False),
        ("gpu02", 8, "slurm://research/gpu02", False),
        ("pc-queue1-st-p5-1", 8, "i-0abc1234def567890", True),
    ]
    assert node_resource_id("research", "gpu01") == "slurm://research/gpu01"
    h100 = model.classes[0]
    # TOML floats are read as exact decimals: 10.2 is 10.2, not 10.199999999999999.
    assert (h100.power_kw, h100.pue) == (Decimal("10.2"), Decimal("1.3"))
    assert dict(model.nodes[1].tags) == {"team": "ml-platform", "rack": "r12"}
    assert model.source == "research.toml"
    assert len(model.sha256) == 64


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"colour": "blue"}, "colour: unknown key (expected one of: cluster, currency, tags, "
         "classes, nodes)"),
        ({"cluster": _DELETE}, "cluster: is required"),
        ({"cluster": "my cluster"}, "cluster: must be 1-63 letters, digits, '.', '_' or '-', "
         "starting with a letter or digit"),
        ({"currency": "usd"}, 'currency: must be an ISO 4217 code of three capital letters, '
         'such as "USD"'),
        ({"currency": 840}, "currency: must be a string"),
        ({"classes__h100__pue": "0.9"}, "classes.h100.pue: must be >= 1"),
        ({"classes__h100__pue": 1.3}, 'classes.h100.pue: must be a decimal string such as '
         '"0.12", not a float (floats are inexact)'),
        ({"classes__h100__price_per_kwh": "-0.12"}, "classes.h100.price_per_kwh: must be >= 0"),
        ({"classes__h100__staff_per_month": "1,000"}, 'classes.h100.staff_per_month: must be a '
         "decimal number such as \"0.12\", got '1,000'"),
        ({"classes__h100__purchase_price": "1.0000001"}, "classes.h100.purchase_price: must "
         "have at most 6 decimal places (whole micros)"),
        ({"classes__h100__residual_value": "400000"}, "classes.h100.residual_value: must not "
         "exceed purchase_price"),
        ({"classes__h100__amortization_years": 0}, "classes.h100.amortization_years: must be "
         "from 1 to 50"),
        ({"classes__h100__amortization_years": "4"}, "classes.h100.amortization_years: must be "
         "a whole number"),
        ({"classes__h100__gpus": 0}, "classes.h100.gpus: must be from 1 to 4096"),
        ({"classes__h100__in_service": "2026-13-01"}, "classes.h100.in_service: must be a date "
         "such as 2026-01-01"),
        ({"classes__h100__in_service": datetime(2026, 1, 1, tzinfo=UTC)}, "classes.h100."
         "in_service: must be a date such as 2026-01-01, not a date-time"),
        ({"classes__h100__fabric_per_month": _DELETE}, "classes.h100.fabric_per_month: is "
         "required"),
        ({"classes__h100__power": "1"}, "classes.h100.power: unknown key (expected one of: gpus, "
         "purchase_price, colocation_per_month, fabric_per_month, support_per_year, "
         "staff_per_month, residual_value, amortization_years, in_service, power_kw, pue, "
         "price_per_kwh)"),
        ({"classes__h100": "big"}, "classes.h100: must be a table"),
        ({"nodes": {}}, "nodes: must name at least one node"),
        ({"nodes__gpu01__class": "h200"}, "nodes.gpu01.class: unknown class 'h200' (classes: "
         "h100)"),
        ({"nodes__gpu01": {}}, "nodes.gpu01.class: is required (or resource_id, for a cloud "
         "node)"),
        ({"nodes__gpu01__cpus": 64}, "nodes.gpu01.cpus: unknown key (expected one of: class, "
         "gpus, resource_id, in_service, retired, tags)"),
        ({"nodes__gpu01__retired": date(2025, 12, 31)}, "nodes.gpu01.retired: must be after "
         "the node's in_service date (2026-01-01)"),
        ({"nodes__gpu01__tags": {"team": 7}}, "nodes.gpu01.tags.team: must be a string"),
        ({"nodes__gpu01__tags": {"specledger/x": "y"}}, "nodes.gpu01.tags.\"specledger/x\": tag "
         "keys must be non-empty and not start with 'specledger/'"),
        ({"nodes__gpu.01": {"class": "h100", "cpus": 1}}, 'nodes."gpu.01".cpus: unknown key '
         "(expected one of: class, gpus, resource_id, in_service, retired, tags)"),
        ({"nodes__cloud1": {"resource_id": "i-1"}}, "nodes.cloud1.gpus: is required (or a "
         "class to take it from)"),
        ({"nodes__cloud1": {"resource_id": "i 1", "gpus": 8}}, "nodes.cloud1.resource_id: must "
         "be 1-1024 characters without whitespace"),
        ({"nodes__cloud1": {"resource_id": "i-1", "gpus": 8, "in_service": "2026-01-01"}},
         "nodes.cloud1.in_service: a cloud node (one with resource_id) is billed by its cloud, "
         "not by the model; remove this key"),
        ({"nodes__gpu02": {"resource_id": "slurm://research/gpu01", "class": "h100"}},
         "nodes.gpu02.resource_id: 'slurm://research/gpu01' is already the resource id of node "
         "gpu01"),
    ],
)  # fmt: skip
def test_a_bad_model_is_refused_naming_the_field(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(CostModelError) as caught:
        _model(**changes)
    assert str(caught.value) == message
    assert f"{caught.value.path}: {caught.value.reason}" == message
    assert isinstance(caught.value, ValueError)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text('cluster = "research"\ncurrency = \n')
    bad = tmp_path / "bad.toml"
    bad.write_text(EXAMPLE_TOML.replace("pue = 1.3", "pue = 0.9"))

    with pytest.raises(CostModelError, match=r"^.*broken\.toml: not valid TOML: "):
        load_cost_model(broken)
    with pytest.raises(CostModelError) as caught:
        load_cost_model(bad)
    assert str(caught.value) == f"{bad}: classes.h100.pue: must be >= 1"
    assert caught.value.path == "classes.h100.pue"
    with pytest.raises(CostModelError, match=r"missing\.toml: cannot be read"):
        load_cost_model(tmp_path / "missing.toml")


# --- the accrual ---------------------------------------------------------------------------


def test_power_is_kw_times_pue_times_price_every_hour() -> None:
    rows = derived_rows(_model(), *MARCH)
    power = [r for r in rows if r["SkuMeter"] == "Power"]

    assert len(power) == 2 * 744
    assert {r["EffectiveCost"] for r in power} == {"1.591200"}  # 10.2 x 1.3 x 0.12
    assert {(r["ConsumedQuantity"], r["ConsumedUnit"], r["PricingUnit"]) for r in power} == {
        ("13.26", "kWh", "kWh")
    }


def test_a_month_whole_equals_the_month_day_by_day() -> None:
    model = _model()
    whole = derived_rows(model, *MARCH)
    by_day = [
        row
        for day in range(31)
        for row in derived_rows(
            model, MARCH[0] + timedelta(days=day), MARCH[0] + timedelta(days=day + 1)
        )
    ]

    assert by_day == whole
    assert len(whole) == 2 * 744 * 6
    for node in ("gpu01", "gpu02"):
        expected = hourly_cost_micros(model, node, *MARCH)
        assert _micros(whole, ResourceName=node) == expected
        assert _micros(by_day, ResourceName=node) == expected
    # 1,500 + 400 + 800 a month, 12,000 a year, 744 h of power, and March's amortization:
    # 320,000 over 48 months accrues in sixths of a micro, so March (month 3 of 48) gets
    # floor(3 x P / 48) - floor(2 x P / 48), the remainder carried from February.
    price = 320_000 * 10**6
    amortization = price * 3 // 48 - price * 2 // 48
    assert amortization == 6_666_666_667
    assert expected == (1500 + 400 + 800 + 1000) * 10**6 + amortization + 744 * 1_591_200


@pytest.mark.parametrize("month", [1, 2, 3, 4, 12])
def test_every_calendar_month_costs_exactly_the_monthly_amounts(month: int) -> None:
    model = _model()
    start = _day(2026, month, 1)
    end = _day(2026 + month // 12, month % 12 + 1, 1)
    rows = derived_rows(model, start, end)

    assert _micros(rows, ResourceName="gpu01", SkuMeter="Colocation") == 1_500_000_000
    assert _micros(rows, ResourceName="gpu01", SkuMeter="Network fabric") == 400_000_000
    assert _micros(rows, ResourceName="gpu01", SkuMeter="Staff") == 800_000_000
    assert _micros(rows, ResourceName="gpu01", SkuMeter="Support") == 1_000_000_000


def test_amortization_is_exactly_a_year_share_each_year_and_ends_at_the_price() -> None:
    model = _model()
    amortization = Component.amortization
    years = [
        component_cost_micros(model, "gpu01", amortization, _day(y, 1, 1), _day(y + 1, 1, 1))
        for y in range(2026, 2031)
    ]
    assert years == [80_000 * 10**6] * 4 + [0]
    assert component_cost_micros(
        model, "gpu01", amortization, _day(2000, 1, 1), _day(2040, 1, 1)
    ) == (320_000 * 10**6)
    year_rows = derived_rows(model, _day(2026, 1, 1), _day(2027, 1, 1))
    assert _micros(year_rows, ResourceName="gpu01", SkuMeter="Amortization") == 80_000 * 10**6

    around_the_end = derived_rows(model, _day(2029, 12, 31) + 23 * HOUR, _day(2030, 1, 1) + HOUR)
    others = ("Power", "Colocation", "Network fabric", "Support", "Staff")
    assert [
        (r["ChargePeriodStart"], r["SkuMeter"])
        for r in around_the_end
        if r["ResourceName"] == "gpu01"
    ] == [
        ("2029-12-31T23:00:00Z", "Amortization"),
        *(("2029-12-31T23:00:00Z", meter) for meter in others),
        *(("2030-01-01T00:00:00Z", meter) for meter in others),
    ]


def test_mid_month_service_and_retirement_keep_the_totals_exact() -> None:
    model = _model(
        classes__h100__purchase_price="100000.01",
        classes__h100__residual_value="7.3",
        classes__h100__amortization_years=3,
        classes__h100__colocation_per_month="999.99",
        nodes__gpu01__in_service="2026-02-17",
        nodes__gpu02__retired=date(2026, 3, 10),
    )
    life = component_cost_micros(
        model, "gpu01", Component.amortization, _day(2026, 1, 1), _day(2030, 1, 1)
    )
    assert life == 100_000_010_000 - 7_300_000

    rows = derived_rows(model, _day(2026, 2, 1), _day(2026, 4, 1))
    gpu01 = [r for r in rows if r["ResourceName"] == "gpu01"]
    gpu02 = [r for r in rows if r["ResourceName"] == "gpu02"]
    assert min(r["ChargePeriodStart"] for r in gpu01) == "2026-02-17T00:00:00Z"
    assert max(r["ChargePeriodStart"] for r in gpu02) == "2026-03-09T23:00:00Z"
    # Feb 17 00:00 to Mar 1 is 12 of February's 28 days; then all of March.
    assert _micros(gpu01, SkuMeter="Colocation") == 999_990_000 * 12 // 28 + 999_990_000
    for node, node_rows in (("gpu01", gpu01), ("gpu02", gpu02)):
        assert _micros(node_rows) == hourly_cost_micros(
            model, node, _day(2026, 2, 1), _day(2026, 4, 1)
        )


def test_a_component_set_to_zero_has_no_rows_and_a_cloud_node_none_at_all() -> None:
    model = _model(
        classes__h100__staff_per_month="0",
        nodes__cloud1={"resource_id": "i-0abc", "class": "h100"},
    )
    rows = derived_rows(model, *MARCH)

    assert "Staff" not in {r["SkuMeter"] for r in rows}
    assert {r["ResourceId"] for r in rows} == {"slurm://research/gpu01", "slurm://research/gpu02"}
    assert model.node("cloud1").cloud
    assert model.node("cloud1").gpus == 8
    assert hourly_cost_micros(model, "cloud1", *MARCH) == 0
    assert derived_rows(model, _day(2025, 1, 1), _day(2025, 2, 1)) == []  # before in_service
    assert derived_rows(model, MARCH[0], MARCH[0]) == []
    with pytest.raises(CostModelError, match=r"^nodes\.gpu09: no such node in the model$"):
        hourly_cost_micros(model, "gpu09", *MARCH)


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        (datetime(2026, 3, 1), MARCH[1], "window instants must be timezone-aware"),  # noqa: DTZ001
        (MARCH[0] + timedelta(minutes=30), MARCH[1], "must start and end on whole UTC hours"),
        (MARCH[1], MARCH[0], "window end 2026-03-01T00:00:00Z is before its start"),
        (_day(2020, 1, 1), _day(2026, 1, 1), "the window is longer than"),
    ],
)
def test_a_bad_window_is_refused(start: datetime, end: datetime, message: str) -> None:
    with pytest.raises(CostWindowError, match=message):
        derived_rows(_model(), start, end)


# --- properties ------------------------------------------------------------------------------

_MONEY = st.decimals(min_value=0, max_value=10**6, places=6).map(str)
_RATE = st.decimals(min_value=0, max_value=50, places=4).map(str)
_FIRST_DAY = date(2025, 6, 1)


@st.composite
def _models(draw: st.DrawFn) -> ClusterCostModel:
    data = _data()
    h100 = data["classes"]["h100"]
    for key in (
        "purchase_price",
        "colocation_per_month",
        "fabric_per_month",
        "support_per_year",
        "staff_per_month",
    ):
        h100[key] = draw(_MONEY)
    h100["residual_value"] = str(
        draw(st.decimals(min_value=0, max_value=Decimal(h100["purchase_price"]), places=6))
    )
    h100["amortization_years"] = draw(st.integers(1, 6))
    h100["power_kw"] = draw(_RATE)
    h100["pue"] = str(draw(st.decimals(min_value=1, max_value=3, places=3)))
    h100["price_per_kwh"] = draw(_RATE)
    h100["in_service"] = _FIRST_DAY + timedelta(days=draw(st.integers(0, 400)))
    gpu02 = data["nodes"]["gpu02"]
    gpu02["in_service"] = _FIRST_DAY + timedelta(days=draw(st.integers(0, 400)))
    if draw(st.booleans()):
        gpu02["retired"] = gpu02["in_service"] + timedelta(days=draw(st.integers(1, 60)))
    return cost_model_from_dict(data, source="random.toml")


@st.composite
def _windows(draw: st.DrawFn) -> tuple[datetime, list[datetime]]:
    """A window of whole hours cut at whole hours: its start and its bounds."""
    start = datetime(2025, 5, 20, tzinfo=UTC) + draw(st.integers(0, 24 * 480)) * HOUR
    hours = draw(st.integers(0, 24 * 9))
    cuts = draw(st.lists(st.integers(1, max(hours - 1, 1)), max_size=6, unique=True))
    offsets = sorted({0, hours, *(c for c in cuts if c < hours)})
    return start, [start + o * HOUR for o in offsets]


@settings(max_examples=60)
@given(model=_models(), window=_windows())
def test_any_split_of_a_window_sums_to_the_same_micros(
    model: ClusterCostModel, window: tuple[datetime, list[datetime]]
) -> None:
    _, bounds = window
    whole = derived_rows(model, bounds[0], bounds[-1])
    pieces = [row for a, b in itertools.pairwise(bounds) for row in derived_rows(model, a, b)]

    assert pieces == whole
    assert all(parse_micros(r["EffectiveCost"]) >= 0 for r in whole)
    assert all(
        r["EffectiveCost"] == r["BilledCost"] == r["ListCost"] == r["ContractedCost"] for r in whole
    )
    per_hour: Counter[tuple[str, str]] = Counter()
    for row in whole:
        per_hour[(row["ResourceName"], row["ChargePeriodStart"])] += parse_micros(
            row["EffectiveCost"]
        )
    for (node, hour), micros in per_hour.items():
        start = datetime.strptime(hour, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        assert micros == hourly_cost_micros(model, node, start, start + HOUR)
    for node in ("gpu01", "gpu02"):
        assert _micros(whole, ResourceName=node) == hourly_cost_micros(
            model, node, bounds[0], bounds[-1]
        )


@settings(max_examples=40)
@given(
    model=_models(),
    start_s=st.integers(0, 86_400 * 500),
    cuts=st.lists(st.integers(0, 86_400 * 90 * 10**6), min_size=1, max_size=8),
)
def test_any_cut_of_any_interval_telescopes(
    model: ClusterCostModel, start_s: int, cuts: list[int]
) -> None:
    """Cut anywhere, to the microsecond: the pieces add up to the whole."""
    base = datetime(2025, 5, 1, tzinfo=UTC) + timedelta(seconds=start_s)
    instants = [base + timedelta(microseconds=c) for c in sorted({0, *cuts})]
    for node in ("gpu01", "gpu02"):
        for component in Component:
            parts = [
                component_cost_micros(model, node, component, a, b)
                for a, b in itertools.pairwise(instants)
            ]
            assert all(p >= 0 for p in parts)
            assert sum(parts) == component_cost_micros(
                model, node, component, instants[0], instants[-1]
            )


# --- the file, through the real ingest -------------------------------------------------------


def _read_csv(path: Path) -> list[dict[str, str]]:
    data = path.read_bytes()
    text = gzip.decompress(data).decode() if path.name.endswith(".gz") else data.decode()
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.parametrize("name", ["research-2026-03.csv", "research-2026-03.csv.gz"])
def test_a_derived_month_is_ingested_to_the_micro(
    engine: Engine, tmp_path: Path, name: str
) -> None:
    path = tmp_path / "model.toml"
    path.write_text(EXAMPLE_TOML)
    model = load_cost_model(path)
    out = tmp_path / "bills" / name

    written = write_derived_bill(model, *MARCH, out)
    report = ingest_billing(engine, str(out), IngestOptions(source="cost-model:research"))

    assert written == 2 * 744 * 6
    assert _read_csv(out) == derived_rows(model, *MARCH)
    assert list(_read_csv(out)[0]) == list(FOCUS_COLUMNS)
    assert [(f.focus_version, f.rows_read, f.rows_kept) for f in report.files] == [
        ("1.2", written, written)
    ]
    assert not report.rejects
    assert not report.warnings
    assert not report.repairs  # the file is written canonically: nothing to repair
    expected = {
        node_resource_id("research", n): hourly_cost_micros(model, n, *MARCH)
        for n in ("gpu01", "gpu02")
    }
    with engine.connect() as conn:
        stored = conn.execute(
            select(
                BillingRow.resource_id,
                func.sum(BillingRow.effective_cost_micros),
                func.sum(BillingRow.billed_cost_micros),
                func.count(),
            ).group_by(BillingRow.resource_id)
        ).all()
        described = conn.execute(
            select(BillingRow.service_category, BillingRow.sku_id, func.count())
            .where(BillingRow.resource_id == "slurm://research/gpu01")
            .group_by(BillingRow.service_category, BillingRow.sku_id)
        ).all()
    assert {r: (e, b, n) for r, e, b, n in stored} == {
        r: (micros, micros, 744 * 6) for r, micros in expected.items()
    }
    assert (
        sum(e or 0 for _, e, _, _ in stored) * 10**6
        == report.periods[0].totals_by_currency["USD"].effective_cost_picos
    )
    with Session(engine) as session:
        first = session.scalars(select(BillingRow).order_by(BillingRow.id).limit(1)).one()
    assert first.provider_name == DERIVED_PROVIDER
    assert first.invoice_issuer_name == DERIVED_PROVIDER
    assert (first.charge_category, first.charge_class) == ("Usage", None)
    assert (first.charge_period_start, first.charge_period_end) == (MARCH[0], MARCH[0] + HOUR)
    assert (first.billing_period_start, first.billing_period_end) == MARCH
    assert first.tags is not None
    assert first.tags["specledger/derived"] == "cost-model"
    assert first.tags["team"] == "ml-platform"
    assert first.provider_columns["x_SpecLedgerModelSha256"] == model.sha256
    assert sorted(described) == sorted(
        [
            ("Compute", "h100/amortization", 744),
            ("Compute", "h100/power", 744),
            ("Compute", "h100/colocation", 744),
            ("Networking", "h100/fabric", 744),
            ("Compute", "h100/support", 744),
            ("Compute", "h100/staff", 744),
        ]
    )

    # The same model and month give the same bytes: ingesting them again changes nothing.
    before = out.read_bytes()
    write_derived_bill(model, *MARCH, out)
    assert out.read_bytes() == before
    again = ingest_billing(engine, str(out), IngestOptions(source="cost-model:research"))
    assert [p.action for p in again.periods] == [LoadAction.unchanged]


def test_nothing_to_bill_writes_no_file(tmp_path: Path) -> None:
    model = _model()
    out = tmp_path / "empty.csv"
    with pytest.raises(CostWindowError, match="no on-premises node is in service"):
        write_derived_bill(model, _day(2025, 1, 1), _day(2025, 2, 1), out)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_rows_by_node_and_component_sum_like_the_direct_computation() -> None:
    model = _model(nodes__gpu02__in_service="2026-03-05")
    rows = derived_rows(model, *MARCH)
    sums: defaultdict[tuple[str, str], int] = defaultdict(int)
    for row in rows:
        sums[(row["ResourceName"], row["SkuId"].split("/")[1])] += parse_micros(
            row["EffectiveCost"]
        )
    for (node, component), micros in sums.items():
        assert micros == component_cost_micros(model, node, Component(component), *MARCH)
