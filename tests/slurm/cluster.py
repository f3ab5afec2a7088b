"""A real single-node Slurm cluster for the tests, started by ``scripts/ensure_slurm.sh``.

:func:`start_cluster` runs the script (install, configure and start what is missing; a no-op
in about a second when the cluster already runs) and returns a :class:`SlurmCluster`, whose
methods run Slurm's own commands (``sbatch``, ``srun``, ``scancel``, ``sacct``) against it.
The cluster: ``specledger``, one node ``localhost`` with 16 CPUs and two fake GPUs
(``gres/gpu:fake``), partitions ``debug`` (default) and ``inference``, accounts ``search``
and ``ads``.
"""

import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENSURE_SCRIPT = ROOT / "scripts" / "ensure_slurm.sh"

TERMINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "TIMEOUT",
    }
)
"""Job states that never change again (``sacct``'s State column, first word)."""

# Every job the tests submit carries this comment with the submitting process's pid, so that a
# later session can tell a job whose test process died (a killed run, a hard stop) from one a
# concurrent session still waits for, and cancel it before it holds the GPUs for good.
JOB_COMMENT_PREFIX = "specledger-tests:pid="
JOB_TIME_LIMIT = "60"
"""Minutes: the longest any test job may run (a vLLM server job takes a few)."""

# Variables of an outer Slurm job (or a user's defaults) that would steer our commands.
_SLURM_INPUT_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SACCT_", "SQUEUE_")


class SlurmError(RuntimeError):
    """A Slurm command failed, or the cluster could not be started."""


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def parse_tres(text: str) -> dict[str, str]:
    """``AllocTRES``/``ReqTRES`` text (``billing=1,cpu=1,gres/gpu:fake=2,gres/gpu=2``) as a dict.

    Keys may contain ``/`` and ``:``; values are kept as text (``mem=16000M``).
    """
    return dict(item.split("=", 1) for item in text.split(",") if item)


@dataclass(frozen=True)
class SlurmCluster:
    """The running cluster and how to talk to it."""

    conf: Path
    """Its ``slurm.conf`` (what ``SLURM_CONF`` points to)."""
    env: dict[str, str]
    """``os.environ`` plus ``SLURM_CONF`` and ``TZ=UTC``, without inherited ``SLURM_*`` input."""
    job_dir: Path
    """Where :meth:`sbatch` makes jobs write their output (``slurm-<id>.out``)."""

    def run(self, argv: Sequence[str], *, timeout_s: float = 60) -> str:
        """Run a command with :attr:`env`; its stdout. :class:`SlurmError` when it fails."""
        try:
            done = subprocess.run(
                list(argv),
                env=self.env,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as error:
            raise SlurmError(f"{argv[0]} took more than {timeout_s} s: {list(argv)}") from error
        if done.returncode != 0:
            raise SlurmError(
                f"{list(argv)} exited with {done.returncode}:\n{_tail(done.stderr + done.stdout)}"
            )
        return done.stdout

    def sbatch(
        self,
        *,
        account: str,
        gpus: int = 0,
        wrap: str,
        array: str | None = None,
        partition: str | None = None,
        name: str | None = None,
        extra: Sequence[str] = (),
    ) -> str:
        """Submit a batch job running the shell command ``wrap``; its job id.

        For an array (``array="0-2"``) the id is the array's: its tasks are ``ID_0``, ``ID_1``...
        Output goes to :attr:`job_dir` (see :meth:`job_output`) unless ``extra`` sets ``--output``.
        """
        argv = ["sbatch", "--parsable", f"--account={account}", *_owned()]
        if gpus:
            argv.append(f"--gres=gpu:{gpus}")
        if array is not None:
            argv.append(f"--array={array}")
        if partition is not None:
            argv.append(f"--partition={partition}")
        if name is not None:
            argv.append(f"--job-name={name}")
        if not any(arg in ("-o", "--output") or arg.startswith("--output=") for arg in extra):
            pattern = "slurm-%A_%a.out" if array is not None else "slurm-%j.out"
            argv.append(f"--output={self.job_dir / pattern}")
        argv += [*extra, f"--wrap={wrap}"]
        # --parsable prints "ID" or "ID;CLUSTER".
        return self.run(argv).strip().split(";", 1)[0]

    def srun(
        self,
        *,
        account: str,
        command: Sequence[str],
        gpus: int = 0,
        partition: str | None = None,
        extra: Sequence[str] = (),
        timeout_s: float = 120,
    ) -> str:
        """Run ``command`` as an interactive job step and wait for it; its stdout."""
        argv = ["srun", f"--account={account}", *_owned()]
        if gpus:
            argv.append(f"--gres=gpu:{gpus}")
        if partition is not None:
            argv.append(f"--partition={partition}")
        return self.run([*argv, *extra, *command], timeout_s=timeout_s)

    def scancel(self, job_id: str) -> None:
        self.run(["scancel", job_id])

    def sacct_text(self, args: Sequence[str]) -> str:
        """``sacct`` with ``args``; its stdout (times in UTC)."""
        return self.run(["sacct", *args])

    def sacct_rows(self, job_id: str, fields: Sequence[str]) -> list[dict[str, str]]:
        """The allocation lines (``-X``) of ``job_id`` (an array: one per task), as dicts."""
        text = self.sacct_text(["-X", "-n", "-P", "-j", job_id, f"--format={','.join(fields)}"])
        return [dict(zip(fields, line.split("|"), strict=True)) for line in text.splitlines()]

    def states(self, job_id: str) -> dict[str, str]:
        """The accounting state of each allocation of ``job_id`` (an array: of each task), by
        ``JobID``; ``CANCELLED by 0`` is ``CANCELLED``.

        Empty until slurmdbd has the job, which lags slurmctld by a second or two; an array's
        pending tasks show as one ``ID_[1-2]`` line.
        """
        rows = self.sacct_rows(job_id, ["JobID", "State"])
        return {row["JobID"]: row["State"].split(" ", 1)[0] for row in rows}

    def _controller_ids(self, job_id: str) -> set[str]:
        """The ids slurmctld knows for ``job_id`` (finished ones until ``MinJobAge``, 300 s)."""
        done = subprocess.run(
            ["squeue", "--states=all", "--noheader", f"--jobs={job_id}", "--format=%i"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        # After MinJobAge slurmctld forgets the job ("Invalid job id specified").
        return set(done.stdout.split()) if done.returncode == 0 else set()

    def wait_for(self, job_id: str, states: set[str], timeout_s: float) -> None:
        """Wait until ``sacct`` shows every allocation of ``job_id`` in one of ``states``.

        Every allocation: also each array task that slurmctld knows of but slurmdbd does not
        have yet, so that what ``sacct`` says afterwards is complete. Fails at once when an
        allocation ends in a state not asked for, and after ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            seen = self.states(job_id)
            missing = self._controller_ids(job_id) - seen.keys()
            if seen and not missing and all(state in states for state in seen.values()):
                return
            ended = {key: state for key, state in seen.items() if state in TERMINAL_STATES - states}
            if ended or time.monotonic() > deadline:
                queue = self.run(["squeue", "--states=all", "--format=%i %T %r"])
                why = f"ended {ended}" if ended else f"is {seen}, missing {missing}"
                raise SlurmError(
                    f"job {job_id} {why}, waiting for {sorted(states)} ({timeout_s} s)\n{queue}"
                )
            time.sleep(0.5)

    def job_output(self, job_id: str) -> str:
        """What a job from :meth:`sbatch` wrote (``ID`` or an array task's ``ID_N``)."""
        return (self.job_dir / f"slurm-{job_id}.out").read_text()


def _owned() -> list[str]:
    return [f"--comment={JOB_COMMENT_PREFIX}{os.getpid()}", f"--time={JOB_TIME_LIMIT}"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def orphaned_jobs(queue: str) -> list[str]:
    """The ids of the jobs in ``squeue --noheader --format='%i|%k'`` output that a test process
    submitted and that process is gone."""
    orphans = []
    for line in queue.splitlines():
        job_id, _, comment = line.partition("|")
        if comment.startswith(JOB_COMMENT_PREFIX):
            pid = comment.removeprefix(JOB_COMMENT_PREFIX)
            if pid.isdigit() and not _alive(int(pid)):
                orphans.append(job_id.strip())
    return orphans


def cancel_orphaned_jobs(cluster: SlurmCluster) -> list[str]:
    """Cancel the pending or running jobs whose test process died; their ids."""
    queue = cluster.run(
        ["squeue", "--noheader", "--states=PENDING,RUNNING,SUSPENDED", "--format=%i|%k"]
    )
    orphans = orphaned_jobs(queue)
    if orphans:
        cluster.run(["scancel", *orphans])
    return orphans


def cluster_env(conf: Path, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` without Slurm input variables, plus ``SLURM_CONF=conf`` and ``TZ=UTC``."""
    env = {key: value for key, value in base.items() if not key.startswith(_SLURM_INPUT_PREFIXES)}
    env["SLURM_CONF"] = str(conf)
    env["TZ"] = "UTC"
    return env


def start_cluster(job_dir: Path, *, timeout_s: float = 900) -> SlurmCluster:
    """Run ``scripts/ensure_slurm.sh`` and return the cluster it prints the ``slurm.conf`` of.

    :class:`SlurmError` with the script's diagnostics (the failing daemon's log tail) when
    it fails. A fresh machine installs Debian's packages first (tens of seconds).
    """
    try:
        done = subprocess.run(
            [str(ENSURE_SCRIPT)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        raise SlurmError(f"{ENSURE_SCRIPT} took more than {timeout_s} s") from error
    if done.returncode != 0:
        raise SlurmError(
            f"{ENSURE_SCRIPT} exited with {done.returncode}:\n{_tail(done.stderr + done.stdout)}"
        )
    conf = Path(done.stdout.strip())
    if not conf.is_file():
        raise SlurmError(f"{ENSURE_SCRIPT} printed {done.stdout!r}, not a slurm.conf")
    job_dir.mkdir(parents=True, exist_ok=True)
    cluster = SlurmCluster(conf=conf, env=cluster_env(conf, os.environ), job_dir=job_dir)
    cancel_orphaned_jobs(cluster)
    return cluster
