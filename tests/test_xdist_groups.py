"""Tests marked with one ``xdist_group`` run on one worker under ``--dist loadgroup``
(tests/xdist_groups.py): the engine tests and the Slurm tests rely on it."""

import os

import pytest

from tests.conftest import ROOT

SUITE = """
import os, time
import pytest

def _record(name):
    with open(os.path.join({out!r}, name), "w") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"])

@pytest.mark.xdist_group("engine")
@pytest.mark.parametrize("i", range(8))
def test_grouped(i):
    time.sleep(0.05)
    _record(f"grouped-{{i}}")

@pytest.mark.parametrize("i", range(8))
def test_free(i):
    time.sleep(0.05)
    _record(f"free-{{i}}")
"""


def test_a_group_runs_on_one_worker_and_the_rest_on_both(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = pytester.mkdir("workers")
    pytester.makepyfile(test_suite=SUITE.format(out=str(out)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))

    result = pytester.runpytest_subprocess(
        "-n", "2", "--dist", "loadgroup", "-p", "tests.xdist_groups", "-p", "no:cacheprovider"
    )

    result.assert_outcomes(passed=16)
    worker = {path.name: path.read_text() for path in out.iterdir()}
    grouped = {w for name, w in worker.items() if name.startswith("grouped-")}
    assert len(grouped) == 1, f"the group was split across workers: {worker}"
    assert set(worker.values()) == {"gw0", "gw1"}, worker
