"""The FOCUS export's per-share columns, built by Arrow compute, equal the JSON and text that
a per-entry ``json.dumps`` writes (the export once built them that way)."""

import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from app.ledger.focus_export import _allocation_columns, _money

TEXT = st.one_of(st.none(), st.text(max_size=12))
KINDS = st.sampled_from(["request", "idle", "shared", "unallocated"])
METHODS = st.sampled_from(["gpu_seconds", "gpu_seconds:hour,team", "even", "team"])
ENTRY = st.fixed_dictionaries(
    {
        "kind": KINDS,
        "method": METHODS,
        "pool_id": st.one_of(st.none(), st.integers(1, 10**9)),
        "gpu_ns": st.integers(0, 2**62),
        "event_id": st.one_of(st.none(), st.text(min_size=1, max_size=12)),
        "session_id": TEXT,
        "team": TEXT,
        "deployment": TEXT,
    }
)


def _expected(entry: dict[str, Any], run_id: int, ratio: str) -> dict[str, Any]:
    allocated = entry["kind"] != "unallocated"
    element: dict[str, Any] = {"AllocatedRatio": Decimal(ratio)}
    if entry["method"].startswith("gpu_seconds"):
        element |= {"UsageUnit": "GPU-Seconds", "UsageQuantity": Decimal(entry["gpu_ns"]) / 10**9}
    details = {
        "Elements": [element],
        "x_Kind": entry["kind"],
        "x_BasisGpuNanoseconds": entry["gpu_ns"],
        "x_AllocationRunId": run_id,
        "x_PoolId": entry["pool_id"],
        **(
            {"x_Levels": ["charge hour x team", "request"]}
            if entry["method"].endswith(":hour,team")
            else {}
        ),
    }
    tags = {
        "team": entry["team"],
        "session": entry["session_id"],
        "deployment": entry["deployment"],
    }
    if not allocated:  # not a split: the row as billed
        return dict.fromkeys(
            (
                "AllocatedMethodId",
                "AllocatedMethodDetails",
                "AllocatedResourceId",
                "AllocatedResourceName",
                "AllocatedTags",
            )
        )
    return {
        "AllocatedMethodId": "specledger:" + entry["method"].replace("_", "-").replace(":", "/"),
        "AllocatedMethodDetails": details,
        "AllocatedResourceId": entry["event_id"]
        or (f"idle:{entry['deployment']}" if entry["kind"] == "idle" else None),
        "AllocatedResourceName": entry["session_id"],
        "AllocatedTags": json.dumps({k: v for k, v in tags.items() if v is not None}),
    }


@settings(deadline=None, max_examples=200)
@given(
    entries=st.lists(ENTRY, min_size=1, max_size=20),
    run_id=st.integers(1, 10**6),
    ratio=st.sampled_from(["0.000000000000", "0.333333333334", "1.000000000000"]),
)
def test_columns_equal_what_json_dumps_writes(
    entries: list[dict[str, Any]], run_id: int, ratio: str
) -> None:
    types = {"pool_id": pa.int64(), "gpu_ns": pa.int64()}
    table = pa.table(
        {k: pa.array([e[k] for e in entries], types.get(k, pa.string())) for k in entries[0]}
    )
    columns = _allocation_columns(table, run_id, pa.array([ratio] * len(entries)))
    for i, entry in enumerate(entries):
        expected = _expected(entry, run_id, ratio)
        got = {name: columns[name][i].as_py() for name in expected}
        if got["AllocatedMethodDetails"] is not None:
            text = got["AllocatedMethodDetails"]
            assert json.loads(text) is not None  # valid JSON as written
            got["AllocatedMethodDetails"] = json.loads(text, parse_float=Decimal)
        assert got == expected


@given(micros=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=20))
def test_money_is_the_exact_decimal_of_the_micros(micros: list[int]) -> None:
    decimals = _money(pa.array(micros, pa.int64())).to_pylist()
    assert decimals == [Decimal(m).scaleb(-6) for m in micros]
