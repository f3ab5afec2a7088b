"""NUMA placement of a replica: its GPUs and the CPU threads serving them, against the host.

A draft model runs a step per drafted token and each step is short, so it is sensitive to
where it runs: a drafter whose GPU or CPU threads sit on the other socket pays the socket
interconnect (QPI/UPI, Infinity Fabric) on every step, and so does a CPU backend whose OpenMP
threads span two sockets. This module reads the host's topology and judges a placement; it
reads text, never files (:mod:`app.engine_health.numa` does the I/O).

Inputs, as the tools print them (reference/usage-sources.md B5):

* ``/sys/devices/system/node/node<N>/cpulist``: ``0-47,96-143`` (empty for a memory-only
  node);
* ``lscpu -p=CPU,NODE,SOCKET``: ``#`` comments, then ``0,0,0`` lines (a field is empty when
  unknown); ``lscpu --json``: ``{"lscpu": [{"field": "NUMA node(s):", "data": "2"}, ...]}``,
  nested under ``children`` in newer util-linux;
* ``nvidia-smi topo -m``: a matrix whose header names ``GPU0``... (and ``NIC0``/``mlx5_0``)
  then ``CPU Affinity``, ``NUMA Affinity`` and, on newer drivers, ``GPU NUMA ID``; cells are
  ``X`` (self), ``NV#`` (a bonded set of # NVLinks), ``PIX``, ``PXB``, ``PHB``, ``NODE``,
  ``SYS`` (``SOC`` on old drivers), separated by tabs or spaces; a legend follows;
* ``VLLM_CPU_OMP_THREADS_BIND``: ``auto`` (vLLM binds rank N to the N-th NUMA node),
  ``nobind``, or CPU lists per local rank joined by ``|`` (``0-31|32-63``), each list like
  ``0-2,4,7-8``.

Links from best to worst: NVLink, PIX, PXB, PHB, NODE, SYS. SYS crosses the interconnect
between NUMA nodes (between sockets on most hosts); NODE stays in a node but crosses PCIe
host bridges.

Findings and severity: ``critical`` when the GPUs or the CPU threads of one replica cross
sockets (or the binding names CPUs the host does not have), ``warning`` when they cross NUMA
nodes of one socket or the threads are left unbound on a multi-node host, ``info`` for facts.
"""

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

from app.domain.errors import InvalidInput


class TopologyError(InvalidInput):
    """Topology text that cannot be read, or a thread binding vLLM would refuse."""

    code = "topology_invalid"


def parse_cpulist(text: str, *, what: str = "CPU list") -> frozenset[int]:
    """``"0-2,4,7-8"`` -> {0, 1, 2, 4, 7, 8}; ``""`` -> {}.

    Raises:
        TopologyError: Naming the text, for anything else (reversed ranges included).
    """
    cpus: set[int] = set()
    stripped = text.strip()
    if not stripped:
        return frozenset()
    for part in stripped.split(","):
        match = re.fullmatch(r"\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?", part)
        if match is None:
            raise TopologyError(f"{what} {text!r}: {part!r} is not a CPU id or a range a-b")
        low = int(match[1])
        high = int(match[2]) if match[2] is not None else low
        if high < low:
            raise TopologyError(f"{what} {text!r}: range {part.strip()!r} runs backwards")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
    """The inverse of :func:`parse_cpulist`: {0, 1, 2, 4} -> ``"0-2,4"``."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    start = prev = None
    for cpu in ordered:
        if prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


@dataclass(frozen=True, slots=True)
class NumaNode:
    id: int
    cpus: frozenset[int]


def parse_sys_nodes(cpulists: Mapping[str, str]) -> tuple[NumaNode, ...]:
    """Nodes from ``/sys/devices/system/node``: ``{"node0": "0-1", ...}`` (directory name ->
    contents of its ``cpulist``).

    Raises:
        TopologyError: If a name is not ``node<N>`` or a list cannot be read.
    """
    nodes = []
    for name, text in cpulists.items():
        match = re.fullmatch(r"node([0-9]+)", name)
        if match is None:
            raise TopologyError(f"{name!r} is not a NUMA node directory (node<N>)")
        nodes.append(NumaNode(int(match[1]), parse_cpulist(text, what=f"{name}/cpulist")))
    return tuple(sorted(nodes, key=lambda n: n.id))


@dataclass(frozen=True, slots=True)
class LscpuCpu:
    cpu: int
    node: int | None
    socket: int | None


def parse_lscpu_parsable(text: str) -> tuple[LscpuCpu, ...]:
    """``lscpu -p=CPU,NODE,SOCKET`` (or plain ``lscpu -p``): one row per logical CPU. The
    last ``#`` comment line names the columns; without one, CPU,NODE,SOCKET is assumed.

    Raises:
        TopologyError: If there is no CPU column, or a row has a non-number where a number
            belongs.
    """
    columns = ["cpu", "node", "socket"]
    rows: list[LscpuCpu] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            header = line.lstrip("#").strip()
            if re.fullmatch(r"[A-Za-z][A-Za-z0-9]*(?:,[A-Za-z0-9]*)*", header):
                columns = [c.strip().lower() for c in header.split(",")]
            continue
        if "cpu" not in columns:
            raise TopologyError("lscpu output has no CPU column")
        values = [v.strip() for v in line.split(",")]
        fields = dict(zip(columns, values, strict=False))
        try:
            rows.append(
                LscpuCpu(
                    cpu=int(fields["cpu"]),
                    node=int(fields["node"]) if fields.get("node") else None,
                    socket=int(fields["socket"]) if fields.get("socket") else None,
                )
            )
        except ValueError:
            raise TopologyError(f"lscpu line {number}: {raw!r} has a non-number id") from None
    return tuple(rows)


@dataclass(frozen=True, slots=True, kw_only=True)
class LscpuSummary:
    """``lscpu --json``'s counts and node lists."""

    cpus: int | None
    sockets: int | None
    numa_nodes: int | None
    node_cpus: Mapping[int, frozenset[int]]


def parse_lscpu_json(text: str) -> LscpuSummary:
    """``lscpu --json``: fields flat or nested under ``children``.

    Raises:
        TopologyError: If the text is not lscpu's JSON.
    """
    try:
        document = json.loads(text)
        entries = document["lscpu"]
    except (ValueError, KeyError, TypeError):
        raise TopologyError("not the output of `lscpu --json`") from None
    fields: dict[str, str] = {}

    def walk(items: Sequence[Mapping[str, Any]]) -> None:
        for item in items:
            name = str(item.get("field", "")).strip().rstrip(":").strip()
            fields.setdefault(name, str(item.get("data", "")).strip())
            walk(item.get("children", ()))

    walk(entries)
    node_cpus = {
        int(match[1]): parse_cpulist(value, what=name)
        for name, value in fields.items()
        if (match := re.fullmatch(r"NUMA node([0-9]+) CPU\(s\)", name))
    }
    return LscpuSummary(
        cpus=_int_or_none(fields.get("CPU(s)")),
        sockets=_int_or_none(fields.get("Socket(s)")),
        numa_nodes=_int_or_none(fields.get("NUMA node(s)")),
        node_cpus=node_cpus,
    )


def _int_or_none(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


class LinkKind(IntEnum):
    """PCIe/NVLink path between two devices, best first (the order is the ranking)."""

    NVLINK = 0
    PIX = 1
    PXB = 2
    PHB = 3
    NODE = 4
    SYS = 5


@dataclass(frozen=True, slots=True)
class Link:
    kind: LinkKind
    nvlinks: int | None = None
    """Bonded NVLinks for ``NV#``."""

    @property
    def code(self) -> str:
        return f"NV{self.nvlinks}" if self.kind is LinkKind.NVLINK else self.kind.name

    @property
    def crosses_numa(self) -> bool:
        return self.kind is LinkKind.SYS


def parse_link(cell: str) -> Link | None:
    """One matrix cell; None for ``X`` (a device and itself).

    Raises:
        TopologyError: For a code nvidia-smi does not print.
    """
    code = cell.strip().upper()
    if code == "X":
        return None
    if match := re.fullmatch(r"NV([0-9]+)", code):
        return Link(LinkKind.NVLINK, int(match[1]))
    if code == "SOC":  # drivers before 2017 wrote SOC for SYS
        return Link(LinkKind.SYS)
    try:
        return Link(LinkKind[code])
    except KeyError:
        raise TopologyError(f"nvidia-smi topo cell {cell!r} is not a link code") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuPlacement:
    index: int
    cpu_affinity: frozenset[int] | None
    """``CPU Affinity``; None for ``N/A`` (common in VMs)."""
    numa_node: int | None
    """``NUMA Affinity``; None for ``N/A`` or when the driver does not print it."""
    gpu_numa_id: int | None = None
    """``GPU NUMA ID``: the GPU's own node on coherent platforms (Grace Hopper)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TopoMatrix:
    gpus: tuple[GpuPlacement, ...]
    links: Mapping[tuple[int, int], Link]
    """Between GPU indices, both orders."""
    nics: tuple[str, ...] = ()

    def link(self, a: int, b: int) -> Link | None:
        return None if a == b else self.links.get((a, b))

    def gpu(self, index: int) -> GpuPlacement:
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu
        raise TopologyError(
            f"GPU {index} is not in the topology (GPUs {[g.index for g in self.gpus]})"
        )


_TRAILING = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


def parse_topo_matrix(text: str) -> TopoMatrix:
    """``nvidia-smi topo -m``, tab- or space-separated, with or without NIC columns.

    Raises:
        TopologyError: If there is no header with GPU columns, or a GPU row does not fit it.
    """
    lines = [line.rstrip() for line in text.splitlines()]
    header_at = next(
        (i for i, line in enumerate(lines) if re.match(r"^\s+GPU0\b", line.expandtabs())), None
    )
    if header_at is None:
        raise TopologyError("no `nvidia-smi topo -m` header (a line starting with GPU0)")
    header = lines[header_at]
    trailing = [name for name in _TRAILING if name in header]
    devices = header
    for name in trailing:
        devices = devices.replace(name, " ")
    columns = devices.split()
    gpus: list[GpuPlacement] = []
    links: dict[tuple[int, int], Link] = {}
    for line in lines[header_at + 1 :]:
        tokens = line.split()
        if not tokens:
            if gpus:
                break
            continue
        label = tokens[0]
        if not re.fullmatch(r"GPU[0-9]+", label):
            if label.startswith("Legend") or label.endswith(":"):
                break
            continue  # NIC rows
        cells = tokens[1 : 1 + len(columns)]
        rest = tokens[1 + len(columns) :]
        if len(cells) != len(columns):
            raise TopologyError(
                f"topology row {label} has {len(cells)} cells for {len(columns)} columns"
            )
        index = int(label[3:])
        for column, cell in zip(columns, cells, strict=True):
            if re.fullmatch(r"GPU[0-9]+", column):
                link = parse_link(cell)
                if link is not None:
                    links[(index, int(column[3:]))] = link
        values = dict(zip(trailing, rest, strict=False))
        affinity = values.get("CPU Affinity")
        gpus.append(
            GpuPlacement(
                index=index,
                cpu_affinity=None
                if affinity in (None, "N/A")
                else parse_cpulist(affinity, what=f"{label} CPU Affinity"),
                numa_node=_node_or_none(values.get("NUMA Affinity")),
                gpu_numa_id=_node_or_none(values.get("GPU NUMA ID")),
            )
        )
    if not gpus:
        raise TopologyError("the topology matrix has no GPU rows")
    nics = tuple(c for c in columns if not re.fullmatch(r"GPU[0-9]+", c))
    return TopoMatrix(gpus=tuple(gpus), links=links, nics=nics)


def _node_or_none(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


class BindMode(StrEnum):
    auto = "auto"
    nobind = "nobind"
    explicit = "explicit"


@dataclass(frozen=True, slots=True)
class ThreadsBind:
    """``VLLM_CPU_OMP_THREADS_BIND`` as vLLM's CPU backend reads it."""

    value: str
    mode: BindMode
    ranks: tuple[frozenset[int], ...] = ()
    """Explicit mode: the CPUs of each local rank, in rank order."""


def parse_threads_bind(value: str) -> ThreadsBind:
    """``"auto"``, ``"nobind"``, ``"0-31"`` or ``"0-15|16-31"`` (one list per local rank).

    Raises:
        TopologyError: Naming the value, for anything vLLM would not accept.
    """
    text = value.strip()
    if text in ("auto", "nobind"):
        return ThreadsBind(text, BindMode(text))
    if not text:
        raise TopologyError("VLLM_CPU_OMP_THREADS_BIND is empty; use auto, nobind or CPU lists")
    ranks = []
    for number, part in enumerate(text.split("|")):
        try:
            cpus = parse_cpulist(part, what=f"rank {number}'s CPU list")
        except TopologyError as exc:
            raise TopologyError(
                f"VLLM_CPU_OMP_THREADS_BIND={value!r} is not auto, nobind or CPU lists per "
                f"rank joined by '|': {exc.message}"
            ) from None
        if not cpus:
            raise TopologyError(
                f"VLLM_CPU_OMP_THREADS_BIND={value!r}: rank {number} has an empty CPU list"
            )
        ranks.append(cpus)
    return ThreadsBind(value, BindMode.explicit, tuple(ranks))


@dataclass(frozen=True, slots=True, kw_only=True)
class HostTopology:
    """One replica host, as /sys, lscpu and nvidia-smi describe it."""

    nodes: tuple[NumaNode, ...]
    node_sockets: Mapping[int, int] = field(default_factory=dict)
    """NUMA node -> socket (from lscpu); empty when unknown."""
    gpus: TopoMatrix | None = None

    def node_of_cpu(self, cpu: int) -> int | None:
        for node in self.nodes:
            if cpu in node.cpus:
                return node.id
        return None

    def socket_of_node(self, node: int) -> int | None:
        return self.node_sockets.get(node)

    @property
    def cpus(self) -> frozenset[int]:
        return frozenset().union(*(n.cpus for n in self.nodes))

    @property
    def sockets(self) -> frozenset[int]:
        return frozenset(self.node_sockets.values())


def node_sockets(cpus: Sequence[LscpuCpu]) -> dict[int, int]:
    """NUMA node -> socket from lscpu rows (a node on two sockets keeps its first)."""
    found: dict[int, int] = {}
    for row in cpus:
        if row.node is not None and row.socket is not None:
            found.setdefault(row.node, row.socket)
    return found


class Severity(StrEnum):
    info = "info"
    warning = "warning"
    critical = "critical"


@dataclass(frozen=True, slots=True, kw_only=True)
class NumaFinding:
    severity: Severity
    code: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """Where one replica runs on its host."""

    target_gpus: tuple[int, ...] = ()
    draft_gpus: tuple[int, ...] = ()
    """vLLM runs the drafter on the target's GPUs (draft TP is 1 or the target's TP):
    empty means the same GPUs."""
    threads_bind: ThreadsBind | None = None
    """The CPU backend's binding; None for a GPU engine without one."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlacementCheck:
    gpu_nodes: Mapping[int, int | None]
    """GPU -> NUMA node."""
    worst_link: str | None
    """The worst path between the replica's GPUs (``NV18``, ``PIX``... ``SYS``)."""
    thread_nodes: tuple[frozenset[int], ...]
    """Per rank, the NUMA nodes its bound CPUs lie on."""
    findings: tuple[NumaFinding, ...]

    @property
    def severity(self) -> Severity | None:
        order = [Severity.info, Severity.warning, Severity.critical]
        found = [f.severity for f in self.findings]
        return max(found, key=order.index) if found else None


def gpu_node(host: HostTopology, gpu: GpuPlacement) -> int | None:
    """A GPU's NUMA node: ``NUMA Affinity``, else the node that holds its CPU affinity."""
    if gpu.numa_node is not None:
        return gpu.numa_node
    if gpu.cpu_affinity:
        nodes = {host.node_of_cpu(cpu) for cpu in gpu.cpu_affinity} - {None}
        if len(nodes) == 1:
            return nodes.pop()
    return None


def check_placement(host: HostTopology, placement: Placement) -> PlacementCheck:
    """Judge one replica's placement on its host (see the module's notes for severities).

    Raises:
        TopologyError: If the placement names a GPU the topology does not have.
    """
    findings: list[NumaFinding] = []
    gpus = tuple(dict.fromkeys((*placement.target_gpus, *placement.draft_gpus)))
    gpu_nodes: dict[int, int | None] = {}
    worst: Link | None = None
    if gpus and host.gpus is None:
        findings.append(
            NumaFinding(
                severity=Severity.info,
                code="no_gpu_topology",
                message="no nvidia-smi topology on this host: GPU placement not checked",
            )
        )
    elif gpus and host.gpus is not None:
        for index in gpus:
            gpu_nodes[index] = gpu_node(host, host.gpus.gpu(index))
        for i, a in enumerate(gpus):
            for b in gpus[i + 1 :]:
                link = host.gpus.link(a, b)
                if link is not None and (worst is None or link.kind > worst.kind):
                    worst = link
        findings += _gpu_findings(host, placement, gpu_nodes, worst)
    thread_nodes: list[frozenset[int]] = []
    bind = placement.threads_bind
    if bind is not None:
        thread_nodes, more = _thread_findings(host, bind, gpu_nodes)
        findings += more
    return PlacementCheck(
        gpu_nodes=gpu_nodes,
        worst_link=worst.code if worst is not None else None,
        thread_nodes=tuple(thread_nodes),
        findings=tuple(findings),
    )


def _spread(host: HostTopology, nodes: Iterable[int]) -> tuple[int, int | None]:
    """(distinct nodes, distinct sockets or None when a socket is unknown)."""
    distinct = set(nodes)
    sockets = {host.socket_of_node(n) for n in distinct}
    return len(distinct), None if None in sockets else len(sockets)


def _gpu_findings(
    host: HostTopology,
    placement: Placement,
    gpu_nodes: Mapping[int, int | None],
    worst: Link | None,
) -> list[NumaFinding]:
    findings = []
    known = {g: n for g, n in gpu_nodes.items() if n is not None}
    draft = placement.draft_gpus or placement.target_gpus
    described = ", ".join(f"GPU{g} on node {n}" for g, n in known.items())
    who = f"the replica's GPUs (target {list(placement.target_gpus)}, draft {list(draft)})"
    node_count, socket_count = _spread(host, known.values())
    spans_sockets = node_count > 1 and (socket_count is None or socket_count > 1)
    if (worst is not None and worst.kind is LinkKind.SYS) or (
        spans_sockets and (worst is None or worst.kind is not LinkKind.NVLINK)
    ):
        findings.append(
            NumaFinding(
                severity=Severity.critical,
                code="gpus_cross_socket",
                message=(
                    f"{who} talk across sockets: {described or 'NUMA nodes unknown'}"
                    + (f", path {worst.code}" if worst is not None else "")
                    + "; keep draft and target on GPUs of one socket (CUDA_VISIBLE_DEVICES)"
                ),
            )
        )
    elif spans_sockets:
        findings.append(
            NumaFinding(
                severity=Severity.warning,
                code="gpus_span_sockets",
                message=(
                    f"{who} sit on both sockets ({described}); NVLink "
                    f"({worst.code if worst else '?'}) carries the traffic between them, but "
                    "each GPU worker's CPU threads should run on its own GPU's node"
                ),
            )
        )
    elif node_count > 1 or (worst is not None and worst.kind is LinkKind.NODE):
        findings.append(
            NumaFinding(
                severity=Severity.warning,
                code="gpus_cross_numa_node",
                message=(
                    f"{who} cross PCIe host bridges or NUMA nodes of one socket ({described}"
                    + (f", path {worst.code}" if worst is not None else "")
                    + ")"
                ),
            )
        )
    elif worst is not None:
        findings.append(
            NumaFinding(
                severity=Severity.info,
                code="gpu_link",
                message=f"path between the replica's GPUs: {worst.code} ({described})",
            )
        )
    if not known and gpu_nodes:
        findings.append(
            NumaFinding(
                severity=Severity.info,
                code="gpu_numa_unknown",
                message="nvidia-smi gives no NUMA or CPU affinity for the GPUs (N/A, as in "
                "many VMs): their node is unknown",
            )
        )
    return findings


def _thread_findings(
    host: HostTopology, bind: ThreadsBind, gpu_nodes: Mapping[int, int | None]
) -> tuple[list[frozenset[int]], list[NumaFinding]]:
    multi_node = len(host.nodes) > 1
    if bind.mode is BindMode.auto:
        return [], [
            NumaFinding(
                severity=Severity.info,
                code="threads_auto",
                message="VLLM_CPU_OMP_THREADS_BIND=auto: vLLM binds local rank N to the N-th "
                "NUMA node's CPUs (one node per rank)",
            )
        ]
    if bind.mode is BindMode.nobind:
        return [], [
            NumaFinding(
                severity=Severity.warning if multi_node else Severity.info,
                code="threads_unbound",
                message="VLLM_CPU_OMP_THREADS_BIND=nobind: OpenMP threads are not pinned"
                + (
                    f"; on this {len(host.nodes)}-node host they may run on any socket"
                    if multi_node
                    else ""
                ),
            )
        ]
    findings: list[NumaFinding] = []
    thread_nodes: list[frozenset[int]] = []
    known_cpus = host.cpus
    gpu_node_set = {n for n in gpu_nodes.values() if n is not None}
    ordered = list(gpu_nodes.values())
    # One rank per GPU (tensor parallelism): rank i serves the i-th GPU.
    per_rank = len(ordered) == len(bind.ranks) and None not in ordered
    for rank, cpus in enumerate(bind.ranks):
        missing = cpus - known_cpus
        if missing:
            findings.append(
                NumaFinding(
                    severity=Severity.critical,
                    code="threads_unknown_cpus",
                    message=(
                        f"VLLM_CPU_OMP_THREADS_BIND={bind.value!r}: rank {rank} binds CPUs "
                        f"{format_cpulist(missing)} that this host does not have (CPUs "
                        f"{format_cpulist(known_cpus)})"
                    ),
                )
            )
        nodes = frozenset(n for c in cpus if (n := host.node_of_cpu(c)) is not None)
        thread_nodes.append(nodes)
        node_count, socket_count = _spread(host, nodes)
        listed = ", ".join(f"node {n}" for n in sorted(nodes))
        if node_count > 1 and (socket_count is None or socket_count > 1):
            findings.append(
                NumaFinding(
                    severity=Severity.critical,
                    code="threads_cross_socket",
                    message=(
                        f"VLLM_CPU_OMP_THREADS_BIND={bind.value!r}: rank {rank}'s threads span "
                        f"sockets ({listed}); bind each rank to one node's CPUs"
                    ),
                )
            )
        elif node_count > 1:
            findings.append(
                NumaFinding(
                    severity=Severity.warning,
                    code="threads_cross_numa_node",
                    message=(
                        f"VLLM_CPU_OMP_THREADS_BIND={bind.value!r}: rank {rank}'s threads span "
                        f"NUMA nodes of one socket ({listed})"
                    ),
                )
            )
        home = {n for n in (ordered[rank],) if n is not None} if per_rank else gpu_node_set
        off = nodes - home
        if home and off:
            socket_gap = {host.socket_of_node(n) for n in off} - {
                host.socket_of_node(n) for n in home
            }
            findings.append(
                NumaFinding(
                    severity=Severity.critical if socket_gap else Severity.warning,
                    code="threads_off_gpu_node",
                    message=(
                        f"rank {rank}'s threads run on {listed}, its GPU"
                        + (f" (GPU{list(gpu_nodes)[rank]})" if per_rank else "s")
                        + f" on node(s) {sorted(home)}"
                        + ("; they cross sockets" if socket_gap else "")
                    ),
                )
            )
    return thread_nodes, findings
