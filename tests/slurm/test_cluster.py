"""Smoke tests of the real single-node Slurm cluster: what sacct records for GPU jobs."""

import os
import subprocess

import pytest

from tests.slurm.cluster import (
    JOB_COMMENT_PREFIX,
    SlurmCluster,
    cancel_orphaned_jobs,
    orphaned_jobs,
    parse_tres,
)

pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm")]

FIELDS = ["JobID", "Account", "Partition", "AllocTRES", "ElapsedRaw", "State"]
TIMEOUT_S = 60


def _job_line(slurm: SlurmCluster, job_id: str) -> dict[str, str]:
    text = slurm.sacct_text(["-P", "-X", f"--format={','.join(FIELDS)}", "-j", job_id])
    header, *lines = text.splitlines()
    assert header.split("|") == FIELDS
    assert len(lines) == 1, text
    return dict(zip(FIELDS, lines[0].split("|"), strict=True))


def test_gpu_jobs_are_accounted_to_their_accounts(slurm: SlurmCluster) -> None:
    search = slurm.sbatch(
        account="search", gpus=2, wrap='sleep 2; echo "gpus=$CUDA_VISIBLE_DEVICES"'
    )
    ads = slurm.sbatch(account="ads", gpus=1, partition="inference", wrap="sleep 2")
    slurm.wait_for(search, {"COMPLETED"}, TIMEOUT_S)
    slurm.wait_for(ads, {"COMPLETED"}, TIMEOUT_S)

    search_line = _job_line(slurm, search)
    assert search_line["JobID"] == search
    assert search_line["Account"] == "search"
    assert search_line["Partition"] == "debug"
    assert search_line["State"] == "COMPLETED"
    assert int(search_line["ElapsedRaw"]) >= 2
    search_tres = parse_tres(search_line["AllocTRES"])
    assert search_tres["gres/gpu"] == "2"
    assert search_tres["gres/gpu:fake"] == "2"
    assert search_tres["cpu"] == "1"

    ads_line = _job_line(slurm, ads)
    assert ads_line["Account"] == "ads"
    assert ads_line["Partition"] == "inference"
    assert ads_line["State"] == "COMPLETED"
    assert int(ads_line["ElapsedRaw"]) >= 2
    ads_tres = parse_tres(ads_line["AllocTRES"])
    assert ads_tres["gres/gpu"] == "1"
    assert ads_tres["gres/gpu:fake"] == "1"

    assert slurm.job_output(search).strip() == "gpus=0,1"


def test_job_array_has_one_line_per_task(slurm: SlurmCluster) -> None:
    array = slurm.sbatch(
        account="ads",
        gpus=1,
        array="0-2",
        name="specledger-array",
        wrap='sleep 1; echo "$SLURM_ARRAY_TASK_ID $CUDA_VISIBLE_DEVICES"',
    )
    slurm.wait_for(array, {"COMPLETED"}, TIMEOUT_S)

    rows = slurm.sacct_rows(array, ["JobID", "JobName", "Account", "AllocTRES", "State"])
    assert sorted(row["JobID"] for row in rows) == [f"{array}_{task}" for task in range(3)]
    for row in rows:
        assert row["JobName"] == "specledger-array"
        assert row["Account"] == "ads"
        assert row["State"] == "COMPLETED"
        assert parse_tres(row["AllocTRES"])["gres/gpu"] == "1"
    # Two GPUs for three tasks: each task ran with one of them.
    for task in range(3):
        index, device = slurm.job_output(f"{array}_{task}").split()
        assert index == str(task)
        assert device in {"0", "1"}


def test_cancelled_job_shows_cancelled(slurm: SlurmCluster) -> None:
    job = slurm.sbatch(account="search", wrap="sleep 300")
    slurm.wait_for(job, {"RUNNING"}, TIMEOUT_S)
    slurm.scancel(job)
    slurm.wait_for(job, {"CANCELLED"}, TIMEOUT_S)

    line = _job_line(slurm, job)
    assert line["State"].startswith("CANCELLED")
    assert line["Account"] == "search"
    assert "gres/gpu" not in parse_tres(line["AllocTRES"])


def test_several_cpu_jobs_run_side_by_side(slurm: SlurmCluster) -> None:
    """The node has 16 configured CPUs on a 2-core machine: four 1-CPU jobs run at once."""
    jobs = [slurm.sbatch(account="search", wrap="sleep 300") for _ in range(4)]
    try:
        for job in jobs:
            slurm.wait_for(job, {"RUNNING"}, TIMEOUT_S)
    finally:
        for job in jobs:
            slurm.scancel(job)
    for job in jobs:
        slurm.wait_for(job, {"CANCELLED"}, TIMEOUT_S)


def test_srun_gets_a_gpu(slurm: SlurmCluster) -> None:
    out = slurm.srun(
        account="ads", gpus=1, command=["bash", "-c", 'echo "$CUDA_VISIBLE_DEVICES $SLURM_JOB_ID"']
    )
    device, job = out.split()
    assert device in {"0", "1"}
    slurm.wait_for(job, {"COMPLETED"}, TIMEOUT_S)
    line = _job_line(slurm, job)
    assert line["Account"] == "ads"
    assert parse_tres(line["AllocTRES"])["gres/gpu"] == "1"


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_only_jobs_of_dead_test_processes_are_orphans() -> None:
    dead = _dead_pid()
    queue = "\n".join(
        [
            f"11|{JOB_COMMENT_PREFIX}{dead}",
            f"12|{JOB_COMMENT_PREFIX}{os.getpid()}",
            "13|(null)",
            f"14_[0-2]|{JOB_COMMENT_PREFIX}{dead}",
        ]
    )
    assert orphaned_jobs(queue) == ["11", "14_[0-2]"]


def test_a_job_left_by_a_killed_test_run_is_cancelled(slurm: SlurmCluster) -> None:
    """A run killed mid-test leaves its job holding GPUs; the next session cancels it."""
    left = slurm.run(
        [
            "sbatch",
            "--parsable",
            "--account=search",
            "--gres=gpu:2",
            f"--comment={JOB_COMMENT_PREFIX}{_dead_pid()}",
            f"--output={slurm.job_dir / 'slurm-%j.out'}",
            "--wrap=sleep 300",
        ]
    ).strip()
    ours = slurm.sbatch(account="ads", wrap="sleep 300")
    try:
        slurm.wait_for(left, {"RUNNING"}, TIMEOUT_S)
        slurm.wait_for(ours, {"RUNNING"}, TIMEOUT_S)
        assert left in cancel_orphaned_jobs(slurm)
        slurm.wait_for(left, {"CANCELLED"}, TIMEOUT_S)
        assert slurm.states(ours) == {ours: "RUNNING"}
    finally:
        slurm.scancel(ours)
        slurm.scancel(left)
