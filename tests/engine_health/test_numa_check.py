"""The NUMA check's I/O: for real on this machine, and on recorded hosts through a runner that
hands back the tools' recorded output (tests/fixtures/numa)."""

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from app.engine_health.numa import numa_check, read_sys_nodes, run_command
from app.engine_health.rules.numa import Severity, TopologyError, parse_cpulist
from tests.conftest import FIXTURES

HOSTS = FIXTURES / "numa"


def recorded(root: Path):
    """The tools as they answered on the recorded host; None where the tool was absent."""

    def run(argv: Sequence[str]) -> str | None:
        files = {
            ("lscpu", "-p=CPU,NODE,SOCKET"): "lscpu-p.txt",
            ("lscpu", "--json"): "lscpu.json",
            ("nvidia-smi", "topo", "-m"): "nvidia-smi-topo-m.txt",
        }
        path = root / files[tuple(argv)]
        return path.read_text() if path.exists() else None

    return run


def test_this_machine_for_real() -> None:
    """/sys and lscpu agree on the node count, and each matches an independent read."""
    report = numa_check(environ={})
    sys_dirs = sorted(Path("/sys/devices/system/node").glob("node[0-9]*"))
    assert report.sys_nodes == len(sys_dirs) >= 1
    for node in report.host.nodes:
        text = Path(f"/sys/devices/system/node/node{node.id}/cpulist").read_text()
        assert node.cpus == parse_cpulist(text)
    if shutil.which("lscpu") is None:
        pytest.skip("no lscpu on this machine")
    lscpu = subprocess.run(["lscpu", "-p=NODE"], capture_output=True, text=True, check=True)
    nodes = {line for line in lscpu.stdout.splitlines() if line and not line.startswith("#")}
    assert report.lscpu_nodes == len(nodes) == report.sys_nodes
    assert report.host.cpus  # every online CPU sits on some node
    assert report.threads_bind == "auto"  # vLLM's default when the environment has none
    if shutil.which("nvidia-smi") is None:
        assert report.host.gpus is None
        assert any("nvidia-smi not found" in note for note in report.notes)
    assert not report.critical


def test_this_machine_refuses_cpus_it_lacks() -> None:
    assert read_sys_nodes(), "no NUMA nodes under /sys"
    cpus = max(numa_check(environ={}).host.cpus)
    report = numa_check(threads_bind=f"0-{cpus + 8}", environ={})
    assert report.critical
    assert report.findings[0].code == "threads_unknown_cpus"
    inside = numa_check(threads_bind=f"0-{cpus}", environ={})
    assert not inside.critical


def test_the_environment_binding_is_checked_by_default() -> None:
    report = numa_check(environ={"VLLM_CPU_OMP_THREADS_BIND": "nobind"})
    assert report.threads_bind == "nobind"
    assert "threads_unbound" in {f.code for f in report.findings}


def test_a_bad_binding_names_the_value() -> None:
    with pytest.raises(TopologyError, match="'0-1\\|x'"):
        numa_check(environ={"VLLM_CPU_OMP_THREADS_BIND": "0-1|x"})


def test_a_recorded_two_socket_gpu_host() -> None:
    root = HOSTS / "p5_8xh100_2socket"
    report = numa_check(
        target_gpus=(3, 4), threads_bind="0-47|48-95", root=root, run=recorded(root), environ={}
    )
    assert (report.sys_nodes, report.lscpu_nodes, report.lscpu_sockets) == (2, 2, 2)
    assert report.host.gpus is not None
    assert len(report.host.gpus.gpus) == 8
    assert report.check.gpu_nodes == {3: 0, 4: 1}
    assert {f.code: f.severity for f in report.findings} == {"gpus_span_sockets": Severity.warning}
    body = report.to_json()
    assert body["numa_nodes"] == {"0": "0-47,96-143", "1": "48-95,144-191"}
    assert body["worst_gpu_link"] == "NV18"


def test_cuda_visible_devices_picks_the_replica_gpus() -> None:
    root = HOSTS / "pcie_5gpu_mixed"
    report = numa_check(root=root, run=recorded(root), environ={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert report.critical
    assert report.check.worst_link == "SYS"
    whole = numa_check(root=root, run=recorded(root), environ={})  # every GPU listed
    assert set(whole.check.gpu_nodes) == {0, 1, 2, 3, 4}
    with pytest.raises(TopologyError, match="UUIDs"):
        numa_check(root=root, run=recorded(root), environ={"CUDA_VISIBLE_DEVICES": "GPU-1a2b"})


def test_a_missing_tool_is_none() -> None:
    assert run_command(["specledger-no-such-tool"]) is None
