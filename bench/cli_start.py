"""How long the command line takes to start: help pages as whole processes, beside Python
alone and Python importing Typer, in the same run.

    .venv/bin/python -m bench.cli_start [--repeats 15] [--baseline /path/to/old/checkout] [--json]

Each command runs as the ``specledger`` console script does (``from app.cli import main;
main()``) in a fresh interpreter, output discarded, with bytecode caching on (as an installed
package has it; a warm-up run of each writes the caches first). The commands run round-robin,
``--repeats`` times, so that a change of load on the machine touches them all alike. Printed
per command: the median and fastest wall time, the median as a ratio to ``python -c pass``
and to ``python -c "import typer"`` (the floor of any Typer command line), and the median CPU
time of the process (user + system): on a machine whose cores are shared, wall time grows
with the load while CPU time stays near what the command costs on an idle machine. Target
(issue 28): ``specledger --help`` and ``specledger costs --help`` under 0.5 s, judged on the
wall time. With ``--baseline``, those two also run from another checkout (e.g. the commit
before the change) in the same rounds.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = "from app.cli import main; main()"
ANCHORS = {
    "python -c pass": ["-c", "pass"],
    'python -c "import typer"': ["-c", "import typer"],
}
COMMANDS = {
    "specledger --help": ["--help"],
    "specledger costs --help": ["costs", "--help"],
    "specledger ledger --help": ["ledger", "--help"],
    "specledger breakeven --help": ["breakeven", "--help"],
    "specledger alerts --help": ["alerts", "--help"],
    "specledger probe drift --help": ["probe", "drift", "--help"],
    "specledger engine start --help": ["engine", "start", "--help"],
}
TARGETS = {"specledger --help": 0.5, "specledger costs --help": 0.5}
"""Seconds (issue 28)."""


BASELINE = "baseline: "
"""Prefix of the rows run from the ``--baseline`` checkout."""


def _env(root: Path) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")
    }
    env["PYTHONPATH"] = str(root)
    env["COLUMNS"] = "100"
    return env


def _argv(name: str) -> list[str]:
    if name in ANCHORS:
        return [sys.executable, *ANCHORS[name]]
    return [sys.executable, "-c", CLI, *COMMANDS[name.removeprefix(BASELINE)]]


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(argv: list[str], root: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one run."""
    cpu = _cpu_of_children()
    start = time.perf_counter()
    subprocess.run(
        argv,
        env=_env(root),
        cwd=root,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    return time.perf_counter() - start, _cpu_of_children() - cpu


def measure(repeats: int, baseline: Path | None = None) -> dict[str, list[tuple[float, float]]]:
    """(wall, CPU) seconds of every anchor and command, ``repeats`` times each, round-robin;
    with a baseline checkout, the targets' commands from it too."""
    roots = dict.fromkeys([*ANCHORS, *COMMANDS], ROOT)
    if baseline is not None:
        roots |= {BASELINE + name: baseline for name in TARGETS}
    for name, root in roots.items():  # warm-up: bytecode caches, the page cache
        _run(_argv(name), root)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in roots}
    for _ in range(repeats):
        for name, root in roots.items():
            times[name].append(_run(_argv(name), root))
    return times


def report(times: dict[str, list[tuple[float, float]]]) -> dict[str, dict[str, float]]:
    def wall(name: str) -> list[float]:
        return [w for w, _ in times[name]]

    bare = statistics.median(wall("python -c pass"))
    typer = statistics.median(wall('python -c "import typer"'))
    rows = {}
    for name, values in times.items():
        median = statistics.median(wall(name))
        rows[name] = {
            "median_s": round(median, 4),
            "min_s": round(min(wall(name)), 4),
            "x_python": round(median / bare, 2),
            "x_typer": round(median / typer, 2),
            "cpu_s": round(statistics.median(c for _, c in values), 4),
        }
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=15, help="Runs of each command.")
    parser.add_argument(
        "--baseline", type=Path, help="Another checkout to time the target commands from."
    )
    parser.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    args = parser.parse_args()
    rows = report(measure(args.repeats, args.baseline))
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        f"{'command':<40} {'median s':>9} {'min s':>7} {'x python':>9} {'x typer':>8} "
        f"{'cpu s':>7}  target"
    )
    for name, row in rows.items():
        target = TARGETS.get(name)
        verdict = ""
        if target is not None:
            verdict = f"< {target} s: {'met' if row['median_s'] < target else 'NOT met'}"
        print(
            f"{name:<40} {row['median_s']:>9.3f} {row['min_s']:>7.3f} {row['x_python']:>9.2f} "
            f"{row['x_typer']:>8.2f} {row['cpu_s']:>7.3f}  {verdict}"
        )
    for name in TARGETS:
        before = rows.get(BASELINE + name)
        if before is not None:
            after = rows[name]["median_s"]
            print(
                f"{name}: {before['median_s']:.3f} s in the baseline -> {after:.3f} s "
                f"({before['median_s'] / after:.1f}x faster)"
            )
    print(f"({args.repeats} runs each, round-robin; load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
