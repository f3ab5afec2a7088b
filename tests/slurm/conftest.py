"""The real single-node Slurm cluster as the session fixture ``slurm``.

A test module that uses it puts all its tests in one xdist group, so that under
``pytest -n 2 --dist loadgroup`` one worker owns the cluster (2 cores, 2 fake GPUs)::

    pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm")]

    def test_gpu_job(slurm: SlurmCluster) -> None:
        job = slurm.sbatch(account="search", gpus=1, wrap="sleep 1")
        slurm.wait_for(job, {"COMPLETED"}, timeout_s=60)
        rows = slurm.sacct_rows(job, ["JobID", "Account", "AllocTRES", "ElapsedRaw"])

``scripts/ensure_slurm.sh`` installs Debian's packages when they are missing and starts
munged, slurmdbd (on the local MariaDB), slurmctld and slurmd when they are not running. If it
fails, the tests fail under ``CI=1`` and are skipped elsewhere (:func:`tests.prereq.require`),
with the failing daemon's log tail. The cluster is left running after the session, like
PostgreSQL; ``scripts/ensure_slurm.sh stop`` stops it. Its job ids and accounting records
outlive the session: look jobs up by id, never by "all jobs".
"""

import fcntl
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.prereq import require
from tests.slurm.cluster import SlurmCluster, SlurmError, start_cluster


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> SlurmCluster:
    job_dir: Path = tmp_path_factory.mktemp("slurm-jobs")
    try:
        return start_cluster(job_dir)
    except SlurmError as error:
        require(False, f"no Slurm cluster (scripts/ensure_slurm.sh): {error}")
        raise


@pytest.fixture(scope="module", autouse=True)
def _one_module_on_the_cluster_at_a_time(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """The modules whose tests submit jobs take turns across xdist workers: the Slurm tests
    are one xdist group, but the vLLM server job (a module fixture) is in the engines' group,
    and a job of one would hold the CPU or fake GPU a job of the other waits for. The lock is
    taken before the module's other fixtures; its file is in the folder all workers'
    temporary folders share."""
    if "slurm" not in request.fixturenames:
        yield
        return
    lock = tmp_path_factory.getbasetemp().parent / "slurm-cluster.lock"
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
