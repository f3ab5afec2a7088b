"""Read a host's NUMA topology (/sys, lscpu, nvidia-smi) and check a replica's placement.

The tools are run through a :class:`CommandRunner`, so tests can hand in recorded outputs
instead of patching ``subprocess``; ``/sys`` is read under a root folder for the same reason.
"""

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from app.engine_health.rules.numa import (
    HostTopology,
    LscpuCpu,
    NumaFinding,
    Placement,
    PlacementCheck,
    Severity,
    TopologyError,
    check_placement,
    format_cpulist,
    node_sockets,
    parse_lscpu_json,
    parse_lscpu_parsable,
    parse_sys_nodes,
    parse_threads_bind,
    parse_topo_matrix,
)

VLLM_DEFAULT_BIND = "auto"
"""vLLM's default for ``VLLM_CPU_OMP_THREADS_BIND`` (vllm/envs.py)."""


class CommandRunner(Protocol):
    def __call__(self, argv: Sequence[str]) -> str | None:
        """The command's stdout, or None when the tool is not installed or fails."""


def run_command(argv: Sequence[str], *, timeout_s: float = 20.0) -> str | None:
    """Run a local tool; None when it is missing, fails or hangs."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


@dataclass(frozen=True, slots=True, kw_only=True)
class NumaReport:
    """One host's topology and one replica's placement on it."""

    host: HostTopology
    sys_nodes: int
    """NUMA nodes under /sys/devices/system/node."""
    lscpu_nodes: int | None
    """NUMA nodes lscpu reports (None without lscpu)."""
    lscpu_sockets: int | None
    threads_bind: str | None
    check: PlacementCheck
    notes: tuple[str, ...] = ()
    """What could not be read (no nvidia-smi, no lscpu...)."""
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def findings(self) -> tuple[NumaFinding, ...]:
        return self.check.findings

    @property
    def critical(self) -> bool:
        return any(f.severity is Severity.critical for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        gpus = self.host.gpus
        return {
            "numa_nodes": {str(node.id): format_cpulist(node.cpus) for node in self.host.nodes},
            "node_sockets": {str(n): s for n, s in sorted(self.host.node_sockets.items())},
            "sys_nodes": self.sys_nodes,
            "lscpu_nodes": self.lscpu_nodes,
            "lscpu_sockets": self.lscpu_sockets,
            "gpus": None
            if gpus is None
            else [
                {
                    "index": g.index,
                    "numa_node": g.numa_node,
                    "cpu_affinity": None
                    if g.cpu_affinity is None
                    else format_cpulist(g.cpu_affinity),
                }
                for g in gpus.gpus
            ],
            "threads_bind": self.threads_bind,
            "gpu_nodes": {str(g): n for g, n in self.check.gpu_nodes.items()},
            "worst_gpu_link": self.check.worst_link,
            "thread_nodes": [sorted(nodes) for nodes in self.check.thread_nodes],
            "severity": self.check.severity,
            "findings": [
                {"severity": f.severity, "code": f.code, "message": f.message}
                for f in self.findings
            ],
            "notes": list(self.notes),
            "sources": self.sources,
        }


def read_sys_nodes(root: Path = Path("/")) -> dict[str, str]:
    """``{"node0": "<cpulist>", ...}`` from ``<root>/sys/devices/system/node``; {} when the
    kernel exposes no NUMA nodes there."""
    base = root / "sys" / "devices" / "system" / "node"
    found: dict[str, str] = {}
    if not base.is_dir():
        return found
    for entry in sorted(base.glob("node[0-9]*")):
        cpulist = entry / "cpulist"
        if cpulist.is_file():
            found[entry.name] = cpulist.read_text(encoding="utf-8")
    return found


def read_host(
    *, root: Path = Path("/"), run: CommandRunner = run_command
) -> tuple[HostTopology, dict[str, Any]]:
    """The host's topology and what each source said.

    Raises:
        TopologyError: If a source prints something that cannot be read.
    """
    notes: list[str] = []
    sources: dict[str, str] = {}
    sys_text = read_sys_nodes(root)
    nodes = parse_sys_nodes(sys_text)
    sources["sys"] = str(root / "sys/devices/system/node")
    if not nodes:
        notes.append("no NUMA nodes under /sys/devices/system/node")
    parsable = run(["lscpu", "-p=CPU,NODE,SOCKET"])
    rows: tuple[LscpuCpu, ...] = ()
    if parsable is None:
        notes.append("lscpu not found: sockets unknown")
    else:
        rows = parse_lscpu_parsable(parsable)
        sources["lscpu"] = "lscpu -p=CPU,NODE,SOCKET"
    summary_text = run(["lscpu", "--json"])
    summary = parse_lscpu_json(summary_text) if summary_text is not None else None
    topo_text = run(["nvidia-smi", "topo", "-m"])
    gpus = None
    if topo_text is None:
        notes.append("nvidia-smi not found (or it failed): no GPU topology on this host")
    else:
        gpus = parse_topo_matrix(topo_text)
        sources["nvidia-smi"] = "nvidia-smi topo -m"
    host = HostTopology(nodes=nodes, node_sockets=node_sockets(rows), gpus=gpus)
    lscpu_nodes = (
        summary.numa_nodes
        if summary is not None and summary.numa_nodes is not None
        else (len({r.node for r in rows if r.node is not None}) or None)
    )
    lscpu_sockets = (
        summary.sockets
        if summary is not None and summary.sockets is not None
        else (len({r.socket for r in rows if r.socket is not None}) or None)
    )
    return host, {
        "notes": notes,
        "sources": sources,
        "lscpu_nodes": lscpu_nodes,
        "lscpu_sockets": lscpu_sockets,
    }


def numa_check(
    *,
    threads_bind: str | None = None,
    target_gpus: Sequence[int] | None = None,
    draft_gpus: Sequence[int] = (),
    root: Path = Path("/"),
    run: CommandRunner = run_command,
    environ: dict[str, str] | None = None,
) -> NumaReport:
    """Check a replica on this host: its GPUs (default: ``CUDA_VISIBLE_DEVICES``, else all
    GPUs nvidia-smi lists) and the CPU backend's thread binding (default: the environment's
    ``VLLM_CPU_OMP_THREADS_BIND``, else vLLM's default ``auto``).

    Raises:
        TopologyError: If a source cannot be read, or the binding is not one vLLM accepts
            (the message names the value).
    """
    env = dict(os.environ) if environ is None else environ
    host, facts = read_host(root=root, run=run)
    bind_text = (
        threads_bind
        if threads_bind is not None
        else env.get("VLLM_CPU_OMP_THREADS_BIND", VLLM_DEFAULT_BIND)
    )
    bind = parse_threads_bind(bind_text)
    if target_gpus is None:
        target_gpus = _visible_gpus(env, host)
    placement = Placement(
        target_gpus=tuple(target_gpus), draft_gpus=tuple(draft_gpus), threads_bind=bind
    )
    check = check_placement(host, placement)
    notes = list(facts["notes"])
    if facts["lscpu_nodes"] is not None and facts["lscpu_nodes"] != len(host.nodes):
        notes.append(f"lscpu reports {facts['lscpu_nodes']} NUMA nodes, /sys {len(host.nodes)}")
    return NumaReport(
        host=host,
        sys_nodes=len(host.nodes),
        lscpu_nodes=facts["lscpu_nodes"],
        lscpu_sockets=facts["lscpu_sockets"],
        threads_bind=bind_text,
        check=check,
        notes=tuple(notes),
        sources=facts["sources"],
    )


def _visible_gpus(env: dict[str, str], host: HostTopology) -> tuple[int, ...]:
    if host.gpus is None:
        return ()
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return tuple(g.index for g in host.gpus.gpus)
    try:
        return tuple(int(part) for part in visible.split(",") if part.strip())
    except ValueError:
        raise TopologyError(
            f"CUDA_VISIBLE_DEVICES={visible!r}: only GPU indices can be checked against "
            "nvidia-smi topo (not UUIDs); pass --gpus"
        ) from None
