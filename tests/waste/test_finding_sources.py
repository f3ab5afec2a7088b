"""The waste report's sources: one registered list, one source per kind of finding, and the
list is what the report runs."""

import inspect
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app.domain.findings import Finding, FindingInputs, FindingKind, Scope, Thresholds
from app.domain.windows import TimeWindow
from app.storage.entry_reader import LedgerReaders
from app.waste.service import find_waste
from app.waste.sources import OUTSIDE_THE_REPORT, SOURCES


def test_every_kind_of_finding_has_exactly_one_producer() -> None:
    producers = [kind for source in SOURCES for kind in source.kinds]
    producers += list(OUTSIDE_THE_REPORT)
    assert sorted(producers) == sorted(FindingKind)
    assert len({source.name for source in SOURCES}) == len(SOURCES)


def test_the_report_runs_the_registered_sources() -> None:
    assert inspect.signature(find_waste).parameters["sources"].default is SOURCES


class _Marked:
    name = "marked"
    kinds = frozenset({FindingKind.idle_gpu})

    def __init__(self) -> None:
        self.seen: list[FindingInputs] = []

    def find(self, inputs: FindingInputs, readers: LedgerReaders) -> list[Finding]:
        self.seen.append(inputs)
        return [
            Finding(
                kind=FindingKind.idle_gpu,
                scope=Scope.deployment,
                key=f"seen-{len(readers.parts)}-parts",
                window_cost_micros=1,
                monthly_cost_micros=2,
                action="none",
                detail="a source of the test",
            )
        ]


def test_a_source_given_to_the_report_is_run_once_with_the_window(session: Session) -> None:
    source = _Marked()
    window = TimeWindow(datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC))
    report = find_waste(
        session,
        window=window,
        team="orchid",
        thresholds=Thresholds(),
        now=datetime(2026, 10, 16, tzinfo=UTC),
        default_currency="USD",
        sources=[source],
    )
    [inputs] = source.seen
    assert (inputs.window, inputs.team, inputs.observed_seconds) == (window, "orchid", 15 * 86_400)
    assert inputs.idle == {}
    assert [f.key for f in report.findings] == ["seen-1-parts"]
