"""Running the FinOps Foundation's focus-validator (2.x, in its own Python 3.12 venv made by
``make focus-validator``) on a file, offline, and reading its JUnit report.

The validator exits 0 whatever the rules say, so the verdict is the JUnit XML: a rule that
failed or errored is a ``<testcase>`` with a ``<failure>`` or ``<error>`` child."""

import os
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("SPECLEDGER_FOCUS_VALIDATOR_VENV", ROOT / ".venv-focus"))
EXECUTABLE = VENV / "bin" / "focus-validator"


@dataclass(frozen=True)
class JUnitReport:
    tests: int
    skipped: int
    failed: dict[str, str]
    """Rule id -> the validator's message, for every rule that failed or errored."""


def site_packages() -> Path:
    """The venv's site-packages: the validator opens its currency list by a relative path."""
    python = VENV / "bin" / "python"
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip())


def validate(
    data_file: Path, junit: Path, *, criteria: tuple[str, ...], version: str = "1.2"
) -> JUnitReport:
    """Validate ``data_file`` (CSV or Parquet) against FOCUS ``version`` with the rules the
    package bundles (``--block-download``: nothing is fetched) for the applicability
    ``criteria`` (the features the data has)."""
    command = [
        str(EXECUTABLE),
        "--data-file",
        str(data_file.resolve()),
        "--validate-version",
        version,
        "--focus-dataset",
        "CostAndUsage",
        "--applicability-criteria",
        ",".join(criteria),
        "--block-download",
        "--output-type",
        "unittest",
        "--output-destination",
        str(junit.resolve()),
    ]
    subprocess.run(command, check=True, cwd=site_packages(), capture_output=True, timeout=600)
    return read_junit(junit)


def read_junit(path: Path) -> JUnitReport:
    root = ET.parse(path).getroot()
    failed: dict[str, str] = {}
    tests = skipped = 0
    for case in root.iter("testcase"):
        tests += 1
        if case.find("skipped") is not None:
            skipped += 1
        for tag in ("failure", "error"):
            problem = case.find(tag)
            if problem is not None:
                rule = case.get("name", "?").split(" :: ")[0]  # "BilledCost-C-005-C :: Validation"
                failed[rule] = (problem.get("message") or problem.text or "")[:300]
    return JUnitReport(tests, skipped, failed)
