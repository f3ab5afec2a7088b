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
