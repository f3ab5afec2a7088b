"""NUMA topology parsing and the placement check, on recorded host topologies
(tests/fixtures/numa/README.md says where each comes from)."""

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.engine_health.rules.numa import (
    BindMode,
    HostTopology,
    Link,
    LinkKind,
    Placement,
    PlacementCheck,
    Severity,
    TopologyError,
    check_placement,
    format_cpulist,
    node_sockets,
    parse_cpulist,
    parse_link,
    parse_lscpu_json,
    parse_lscpu_parsable,
    parse_sys_nodes,
    parse_threads_bind,
    parse_topo_matrix,
)
from tests.conftest import FIXTURES

HOSTS = FIXTURES / "numa"


def host(name: str) -> HostTopology:
    root = HOSTS / name
    node_dir = root / "sys" / "devices" / "system" / "node"
    nodes = parse_sys_nodes(
        {p.name: (p / "cpulist").read_text() for p in sorted(node_dir.glob("node*"))}
    )
    rows = parse_lscpu_parsable((root / "lscpu-p.txt").read_text())
    topo = root / "nvidia-smi-topo-m.txt"
    return HostTopology(
        nodes=nodes,
        node_sockets=node_sockets(rows),
        gpus=parse_topo_matrix(topo.read_text()) if topo.exists() else None,
    )


def code(link: Link | None) -> str:
    assert link is not None
    return link.code


def codes(check: PlacementCheck) -> dict[str, Severity]:
    return {f.code: f.severity for f in check.findings}


def test_cpulists_read_and_write() -> None:
    assert parse_cpulist("0-2,4,7-8\n") == {0, 1, 2, 4, 7, 8}
    assert parse_cpulist("") == frozenset()
    assert format_cpulist({0, 1, 2, 4, 7, 8}) == "0-2,4,7-8"
    for bad in ("0-x", "3-1", "0,,1", "a"):
        with pytest.raises(TopologyError, match=repr(bad)):
            parse_cpulist(bad)


@given(st.frozensets(st.integers(0, 300)))
def test_format_cpulist_round_trips(cpus: frozenset[int]) -> None:
    assert parse_cpulist(format_cpulist(cpus)) == cpus


def test_threads_bind_values() -> None:
    assert parse_threads_bind("auto").mode is BindMode.auto
    assert parse_threads_bind("nobind").mode is BindMode.nobind
    one = parse_threads_bind("0-31")
    assert (one.mode, one.ranks) == (BindMode.explicit, (frozenset(range(32)),))
    two = parse_threads_bind("0-15|16-31")
    assert two.ranks == (frozenset(range(16)), frozenset(range(16, 32)))


@pytest.mark.parametrize("bad", ["0-x", "31-0", "0-3||4-7", "", "all", "0-15;16-31"])
def test_a_bad_binding_is_refused_naming_the_value(bad: str) -> None:
    with pytest.raises(TopologyError, match="VLLM_CPU_OMP_THREADS_BIND") as caught:
        parse_threads_bind(bad)
    if bad:
        assert repr(bad) in caught.value.message


def test_link_codes_rank_nvlink_best_sys_worst() -> None:
    assert parse_link(" X ") is None
    nv = parse_link("NV18")
    assert nv is not None
    assert (nv.kind, nv.nvlinks, nv.code) == (LinkKind.NVLINK, 18, "NV18")
    links = [parse_link(c) for c in ("NV4", "PIX", "PXB", "PHB", "NODE", "SYS")]
    kinds = [link.kind for link in links if link is not None]
    assert kinds == sorted(kinds)
    assert code(parse_link("SOC")) == "SYS"  # drivers before 2017
    with pytest.raises(TopologyError, match="'QPI'"):
        parse_link("QPI")


def test_the_p5_matrix() -> None:
    topo = host("p5_8xh100_2socket").gpus
    assert topo is not None
    assert [g.index for g in topo.gpus] == list(range(8))
    assert topo.nics == ("NIC0", "NIC1", "NIC2", "NIC3")
    assert code(topo.link(0, 7)) == "NV18"
    assert topo.gpu(0).numa_node == 0
    assert topo.gpu(4).numa_node == 1
    assert topo.gpu(4).cpu_affinity == parse_cpulist("48-95,144-191")
    assert topo.gpu(4).gpu_numa_id is None  # N/A


def test_tab_separated_and_old_driver_matrices() -> None:
    p4d = host("p4d_8xa100_2socket")
    assert p4d.gpus is not None
    assert len(p4d.gpus.gpus) == 8
    assert p4d.gpus.gpu(5).numa_node == 1
    assert code(p4d.gpus.link(2, 6)) == "NV12"
    old = host("old_driver_8gpu_2socket").gpus
    assert old is not None
    assert old.nics == ("mlx4_0",)
    assert old.gpu(5).numa_node is None  # no NUMA Affinity column
    assert old.gpu(5).cpu_affinity == parse_cpulist("10-19,30-39")
    assert code(old.link(0, 1)) == "PIX"
    assert code(old.link(0, 4)) == "SYS"


def test_topology_text_errors() -> None:
    with pytest.raises(TopologyError, match="no `nvidia-smi topo -m` header"):
        parse_topo_matrix("No devices were found\n")
    with pytest.raises(TopologyError, match="'ZZZ' is not a link code"):
        parse_topo_matrix("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tZZZ\t0-3\n")


def test_lscpu_reads_sockets_of_nodes() -> None:
    rows = parse_lscpu_parsable((HOSTS / "p5_8xh100_2socket" / "lscpu-p.txt").read_text())
    assert len(rows) == 192
    assert node_sockets(rows) == {0: 0, 1: 1}
    plain = parse_lscpu_parsable("# CPU,Core,Socket,Node,,L1d,L1i,L2,L3\n0,0,0,,,0,0,0,0\n")
    assert plain[0].node is None
    assert plain[0].socket == 0
    with pytest.raises(TopologyError, match="line 2"):
        parse_lscpu_parsable("# CPU,Node,Socket\n0,x,0\n")


def test_lscpu_json_of_this_project_machine() -> None:
    summary = parse_lscpu_json((HOSTS / "kvm_2cpu_1socket" / "lscpu.json").read_text())
    assert (summary.cpus, summary.sockets, summary.numa_nodes) == (2, 1, 1)
    assert summary.node_cpus == {0: frozenset({0, 1})}
    nested = (
        '{"lscpu": [{"field": "Architecture:", "data": "x86_64", "children": '
        '[{"field": "Socket(s):", "data": "2"}, {"field": "NUMA node(s):", "data": "2"}, '
        '{"field": "NUMA node1 CPU(s):", "data": "24-47,72-95"}]}]}'
    )
    assert parse_lscpu_json(nested).node_cpus == {1: parse_cpulist("24-47,72-95")}
    with pytest.raises(TopologyError):
        parse_lscpu_json("Architecture: x86_64")


def test_gpus_on_two_sockets_over_pcie_are_critical() -> None:
    check = check_placement(host("pcie_5gpu_mixed"), Placement(target_gpus=(0, 1)))
    assert check.gpu_nodes == {0: 1, 1: 0}
    assert check.worst_link == "SYS"
    assert codes(check) == {"gpus_cross_socket": Severity.critical}
    old = check_placement(host("old_driver_8gpu_2socket"), Placement(target_gpus=(3, 4)))
    assert codes(old) == {"gpus_cross_socket": Severity.critical}  # node from CPU affinity
    assert old.gpu_nodes == {3: 0, 4: 1}


def test_a_draft_on_the_other_socket_is_critical() -> None:
    check = check_placement(
        host("old_driver_8gpu_2socket"), Placement(target_gpus=(0, 1), draft_gpus=(5,))
    )
    assert check.severity is Severity.critical
    assert "draft [5]" in check.findings[0].message


def test_nvlinked_gpus_on_both_sockets_are_a_warning() -> None:
    check = check_placement(host("p5_8xh100_2socket"), Placement(target_gpus=(3, 4)))
    assert check.worst_link == "NV18"
    assert codes(check) == {"gpus_span_sockets": Severity.warning}


def test_same_socket_placements_have_no_finding() -> None:
    p5 = check_placement(
        host("p5_8xh100_2socket"),
        Placement(target_gpus=(0, 1, 2, 3), threads_bind=parse_threads_bind("0-47")),
    )
    assert codes(p5) == {"gpu_link": Severity.info}
    assert p5.thread_nodes == (frozenset({0}),)
    single = check_placement(
        host("pcie_2gpu_1socket"),
        Placement(target_gpus=(0, 1), threads_bind=parse_threads_bind("0-31")),
    )
    assert single.worst_link == "PHB"
    assert single.severity is Severity.info
    tp = check_placement(  # one rank per GPU, each on its GPU's node
        host("p5_8xh100_2socket"),
        Placement(target_gpus=(3, 4), threads_bind=parse_threads_bind("0-47|48-95")),
    )
    assert "threads_off_gpu_node" not in codes(tp)


def test_threads_across_sockets_or_away_from_the_gpus_are_critical() -> None:
    p5 = host("p5_8xh100_2socket")
    spanning = check_placement(
        p5, Placement(target_gpus=(0,), threads_bind=parse_threads_bind("0-95"))
    )
    assert codes(spanning)["threads_cross_socket"] is Severity.critical
    away = check_placement(
        p5, Placement(target_gpus=(0,), threads_bind=parse_threads_bind("48-95"))
    )
    assert codes(away)["threads_off_gpu_node"] is Severity.critical
    swapped = check_placement(  # rank 0 serves GPU3 (node 0) from node 1's CPUs
        p5, Placement(target_gpus=(3, 4), threads_bind=parse_threads_bind("48-95|0-47"))
    )
    assert codes(swapped)["threads_off_gpu_node"] is Severity.critical
    cpu_only = check_placement(p5, Placement(threads_bind=parse_threads_bind("40-55")))
    assert codes(cpu_only) == {"threads_cross_socket": Severity.critical}


def test_same_socket_nodes_and_unbound_threads_are_warnings() -> None:
    mixed = check_placement(host("pcie_5gpu_mixed"), Placement(target_gpus=(1, 3)))
    assert codes(mixed) == {"gpus_cross_numa_node": Severity.warning}
    unbound = check_placement(
        host("p5_8xh100_2socket"), Placement(threads_bind=parse_threads_bind("nobind"))
    )
    assert codes(unbound) == {"threads_unbound": Severity.warning}
    one_node = check_placement(
        host("pcie_2gpu_1socket"), Placement(threads_bind=parse_threads_bind("nobind"))
    )
    assert codes(one_node) == {"threads_unbound": Severity.info}


def test_a_binding_of_cpus_the_host_lacks_is_critical() -> None:
    check = check_placement(
        host("kvm_2cpu_1socket"), Placement(threads_bind=parse_threads_bind("0-31"))
    )
    finding = check.findings[0]
    assert (finding.code, finding.severity) == ("threads_unknown_cpus", Severity.critical)
    assert "'0-31'" in finding.message
    assert "2-31" in finding.message


def test_gpus_without_topology_or_unknown_gpus() -> None:
    kvm = host("kvm_2cpu_1socket")
    assert codes(check_placement(kvm, Placement(target_gpus=(0,)))) == {
        "no_gpu_topology": Severity.info
    }
    with pytest.raises(TopologyError, match="GPU 9 is not in the topology"):
        check_placement(host("p5_8xh100_2socket"), Placement(target_gpus=(9,)))


def test_fixture_readme_names_every_host() -> None:
    readme = (HOSTS / "README.md").read_text(encoding="utf-8")
    for folder in Path(HOSTS).iterdir():
        if folder.is_dir():
            assert f"`{folder.name}/`" in readme
