"""The suite's time per group, printed at the end of every run (a pytest plugin,
tests/conftest.py), so that a group that grows is seen before CI's limit is.

A test's time is its setup, call and teardown (a session fixture such as an engine counts in
the first test that uses it). Groups: the test's folder and each registered marker it carries
(pytest's own, such as ``parametrize``, aside). Under xdist the controller adds up its workers' reports, so the sum can
exceed the wall time.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import pytest

__all__ = ["GroupTimes", "directory_of", "format_times", "markers_of"]

UNMARKED = "(no marker)"
PYTEST_OWN = frozenset(
    {
        "filterwarnings",
        "parametrize",
        "skip",
        "skipif",
        "tryfirst",
        "trylast",
        "usefixtures",
        "xfail",
    }
)
"""pytest's own markers: they say how a test runs, not what it needs."""


@dataclass
class GroupTimes:
    """Seconds and test counts per folder and per marker."""

    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    tests: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    marker_seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    marker_tests: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def add(self, nodeid: str, markers: Iterable[str], seconds: float) -> None:
        folder = directory_of(nodeid)
        self.seconds[folder] += seconds
        self.tests[folder].add(nodeid)
        for marker in sorted(set(markers)) or [UNMARKED]:
            self.marker_seconds[marker] += seconds
            self.marker_tests[marker].add(nodeid)


def directory_of(nodeid: str) -> str:
    """The folder a test's file is in (``tests/serving``), from its node id."""
    path = PurePosixPath(nodeid.split("::", 1)[0])
    return str(path.parent) if str(path.parent) != "." else "."


def _table(
    title: str, seconds: Mapping[str, float], tests: Mapping[str, set[str]], total: float
) -> list[str]:
    width = max([len(title), *map(len, seconds)])
    lines = [f"{title:<{width}}  {'tests':>6}  {'seconds':>9}  {'share':>6}"]
    for name, value in sorted(seconds.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(
            f"{name:<{width}}  {len(tests[name]):>6}  {value:>9.1f}  {value / (total or 1):>6.1%}"
        )
    return lines


def format_times(times: GroupTimes, wall_s: float) -> list[str]:
    """The two tables (by folder, by marker; largest first) and the totals. A share is of
    the time in all tests (a test with two markers counts in both)."""
    in_tests = sum(times.seconds.values())
    count = sum(len(t) for t in times.tests.values())
    return [
        *_table("folder", times.seconds, times.tests, in_tests),
        "",
        *_table("marker", times.marker_seconds, times.marker_tests, in_tests),
        "",
        f"{count} tests: {in_tests:.1f} s in tests, {wall_s:.1f} s wall",
    ]


MARKERS_PROPERTY = "markers"
"""The report's user property that carries the test's markers to the controller. A report's
keywords would not do: they also hold the names of the test's folders, so every test under
``tests/serving`` would count as marked ``serving``."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item,
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    marks = sorted({mark.name for mark in item.iter_markers()})
    # A copy: the report shares the item's list, which the next phase's report reuses.
    report.user_properties = [*report.user_properties, (MARKERS_PROPERTY, marks)]
    return report


def markers_of(report: pytest.TestReport) -> list[str]:
    """The markers :func:`pytest_runtest_makereport` put on ``report`` (none if it did not)."""
    for name, value in report.user_properties:
        if name == MARKERS_PROPERTY and isinstance(value, list):
            return [str(mark) for mark in value]
    return []


class SuiteTimer:
    def __init__(self, markers: frozenset[str]) -> None:
        self.markers = markers
        self.times = GroupTimes()
        self.started = time.monotonic()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        marks = [name for name in markers_of(report) if name in self.markers]
        self.times.add(report.nodeid, marks, report.duration)

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.times.seconds:
            return
        terminalreporter.section("suite time per group (tests/timing.py)")
        for line in format_times(self.times, time.monotonic() - self.started):
            terminalreporter.write_line(line)


def _registered_markers(config: pytest.Config) -> frozenset[str]:
    lines: list[str] = config.getini("markers")
    names = {line.split(":", 1)[0].split("(", 1)[0].strip() for line in lines}
    return frozenset(names - PYTEST_OWN)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the controller reports
        return
    config.pluginmanager.register(SuiteTimer(_registered_markers(config)), "suite-timer")
