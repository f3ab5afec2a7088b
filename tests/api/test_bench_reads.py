"""bench/reads.py at a tiny size: it builds its month, every route answers for both keys,
and its report has a time per route, key and size and a ratio per route and key."""

import json
from pathlib import Path

from sqlalchemy import text

from app.db import make_engine
from bench import reads


def test_bench_reads_times_every_route_for_both_keys(tmp_path: Path) -> None:
    out = tmp_path / "reads.json"
    reads.main(["--sizes", "1500,3000", "--days", "1", "--json", str(out)])
    report = json.loads(out.read_text())
    names = [reads.route_name(path, params) for path, params in reads.ROUTES]
    assert len(set(names)) == len(names)
    assert report["database"] == "sqlite"
    assert report["sizes"] == [1500, 3000]
    assert report["linear_ratio"] == 2
    for size in ("1500", "3000"):
        seconds = report["seconds"][size]
        assert list(seconds) == names
        for name, by_key in seconds.items():
            assert isinstance(by_key["admin"], float), name
            assert by_key["admin"] > 0, name
            if name.startswith("/v1/reconciliation"):
                assert by_key["team"] == "403"  # admin only
            else:
                assert isinstance(by_key["team"], float), name
                assert by_key["team"] > 0, name
        assert report["builds"][size]["build_s"] >= report["builds"][size]["setup_s"] > 0
    assert set(report["ratios"]) == set(names)
    for name, by_key in report["ratios"].items():
        expected = {"admin"} if name.startswith("/v1/reconciliation") else {"admin", "team"}
        assert set(by_key) == expected, name
        assert all(ratio > 0 for ratio in by_key.values())


def test_bench_reads_month_has_the_entries_asked_for(tmp_path: Path) -> None:
    """The entries written are exactly the size asked for, and each request has one entry."""
    url = f"sqlite+pysqlite:///{tmp_path / 'reads.db'}"
    reads.build(url, 2000, tmp_path, days=1)
    engine = make_engine(url)
    with engine.connect() as conn:
        entries = conn.execute(text("SELECT count(*) FROM ledger_entries")).scalar_one()
        requests = conn.execute(text("SELECT count(*) FROM usage_records")).scalar_one()
        per_request = conn.execute(
            text("SELECT count(*) FROM ledger_entries WHERE event_id IS NOT NULL")
        ).scalar_one()
        teams = conn.execute(text("SELECT count(DISTINCT team) FROM usage_records")).scalar_one()
        rolled = conn.execute(text("SELECT sum(entries) FROM ledger_rollups")).scalar_one()
    engine.dispose()
    assert entries == 2000 == rolled
    assert per_request == requests == 2000 - 24 * len(reads.DEPLOYMENTS) - len(reads.TEAMS)
    assert teams == len(reads.TEAMS)
