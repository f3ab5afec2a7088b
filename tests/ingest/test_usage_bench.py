"""bench/usage_ingest.py at a tiny size: every record of its generated proxy log reaches
each target once (the counts it reports, not its times)."""

import json
import os
from pathlib import Path

from app.usage.schemas import record_from_json
from bench.usage_ingest import run, write_proxy_log
from tests.prereq import require


def test_the_generated_log_is_valid_proxy_output(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    idle = write_proxy_log(path, 3000, span_s=3600)
    records = [record_from_json(json.loads(line)) for line in path.read_text().splitlines()]
    assert len(records) == 3000 + idle
    assert idle == 12 * 8 * 4  # an idle record per replica every 5 minutes


def test_the_bench_loads_every_record_into_each_target(tmp_path: Path) -> None:
    postgres = os.environ.get("SPECLEDGER_TEST_POSTGRES_URL")
    require(postgres is not None, "set SPECLEDGER_TEST_POSTGRES_URL for the PostgreSQL target")
    assert postgres is not None
    [result] = run([2000], ["sqlite", "postgresql", "store"], postgres, tmp_path)
    assert result["records"] == 2000
    for target in ("sqlite", "postgresql", "store"):
        summary = result[target]["summary"]
        assert summary["read"] == 2000 + result["idle"]
        assert summary["usage"] == {"read": 2000, "inserted": 2000, "already_present": 0}
        assert summary["replica_idle"]["inserted"] == result["idle"] > 0
    assert not list(tmp_path.glob("*.jsonl"))
