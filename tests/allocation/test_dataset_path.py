"""The scale path: usage read from a partitioned Parquet dataset, entries written to one,
rollups read back from them; the same entries as the in-memory run."""

import tempfile
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
from hypothesis import given, settings

from app.allocation.engine import PlanEngine
from app.allocation.plan import ENTRY_COLUMNS
from tests.allocation.scenarios import Month, months


@settings(max_examples=8, deadline=None)
@given(months())
def test_the_dataset_path_writes_the_in_memory_entries_and_their_rollups(month: Month) -> None:
    inputs = month.inputs()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        usage = inputs["usage"]
        half = usage.num_rows // 2
        for part, table in (("a", usage.slice(0, half)), ("b", usage.slice(half))):
            (folder / "usage" / f"day={part}").mkdir(parents=True)
            pq.write_table(table, folder / "usage" / f"day={part}" / "part-0.parquet")
        engine = PlanEngine()
        run = engine.allocate_dataset(
            inputs, str(folder / "usage" / "*" / "*.parquet"), folder / "out", share_idle=False
        )
        written = pq.read_table(folder / "out" / "entries")
        rollups = pq.read_table(folder / "out" / "rollups.parquet")
    expected = engine.allocate(inputs, share_idle=False).entries
    keys = [(c, "ascending") for c in ENTRY_COLUMNS]
    assert written.select(list(ENTRY_COLUMNS)).sort_by(keys).to_pylist() == (
        expected.sort_by(keys).to_pylist()
    )
    assert run.entries == expected.num_rows
    bill = sum(inputs["rows"]["effective"].to_pylist())
    assert pc.sum(rollups["effective_cost_micros"]).as_py() == (
        bill if bill or run.entries else None
    )
    assert pc.sum(rollups["entries"]).as_py() == expected.num_rows
