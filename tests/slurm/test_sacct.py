"""Slurm accounting: sacct output, TRES strings, hostlists and GPU-seconds (pure).

The literal sacct lines marked "real" were captured on Debian 12's Slurm 22.05.8 (see
shared/reference/usage-sources.md, B1); the rest are written in the same format, for what
that build cannot produce (NVML GPU usage, typed H100s, requeues, arrays, het jobs).
"""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.slurm.rules.sacct import (
    SACCT_FIELDS,
    SacctError,
    allocation_lines,
    expand_hostlist,
    gpu_count,
    gpu_types,
    hourly_gpu_seconds,
    parse_sacct,
    parse_tres,
    sacct_arguments,
    split_per_node,
)

KIB, MIB, GIB = 1024, 1024**2, 1024**3
UNIT_BYTES = {"K": KIB, "M": MIB, "G": GIB, "T": 1024**4, "P": 1024**5}

# Real: sacct -P -X --format=JobID,JobName,AllocTRES,ReqTRES,ElapsedRaw,State,Start,End -j 2
REAL_X = (
    "JobID|JobName|AllocTRES|ReqTRES|ElapsedRaw|State|Start|End\n"
    "2|wrap|billing=1,cpu=1,gres/gpu=2,node=1|billing=1,cpu=1,gres/gpu=2,mem=4000M,node=1|5"
    "|COMPLETED|2026-12-03T07:28:55|2026-12-03T07:29:00\n"
)
# Real: sacct -P --format=JobID,JobName,AllocTRES,TRESUsageInTot,TRESUsageInMax,ElapsedRaw,State
REAL_STEPS_HEADER = "JobID|JobName|AllocTRES|TRESUsageInTot|TRESUsageInMax|ElapsedRaw|State"
REAL_BATCH_USAGE = "cpu=00:00:02,energy=0,fs/disk=1690123,mem=219656K,pages=1,vmem=223976K"
REAL_TYPED_ALLOC = "billing=1,cpu=1,gres/gpu:fake=1,gres/gpu=1,node=1"

HEADER = "|".join(SACCT_FIELDS)
FULL = f"""{HEADER}
research|2|2|wrap|research|root|debug|normal|COMPLETED|2026-12-03T07:28:50|2026-12-03T07:28:55|2026-12-03T07:29:00|5|billing=1,cpu=1,gres/gpu=2,node=1||localhost
research|2.batch|2.batch|batch|research||||COMPLETED|2026-12-03T07:28:55|2026-12-03T07:28:55|2026-12-03T07:29:00|5|cpu=1,gres/gpu=2,mem=0,node=1|{REAL_BATCH_USAGE}|localhost
research|7|7|train|research|alice|gpu|high|CANCELLED by 0|2026-12-03T08:00:00|2026-12-03T08:00:05|2026-12-03T09:30:05|5400|billing=32,cpu=32,gres/gpu:h100=16,gres/gpu=16,mem=1T,node=2||gpu[01-02]
research|8|8|serve|research|bob|gpu|normal|RUNNING|2026-12-03T09:00:00|2026-12-03T09:00:01|Unknown|3600|billing=4,cpu=4,gres/gpu=1,mem=64G,node=1||gpu03
research|9|9|sim|research|carol|gpu|normal|REQUEUED|2026-12-03T06:00:00|2026-12-03T06:00:10|2026-12-03T06:30:10|1800|billing=8,cpu=8,gres/gpu=2,node=1||gpu04
research|9|9|sim|research|carol|gpu|normal|COMPLETED|2026-12-03T06:30:11|2026-12-03T06:32:00|2026-12-03T07:32:00|3600|billing=8,cpu=8,gres/gpu=2,node=1||gpu05

research|42_3|45|sweep|research|dave|gpu|normal|COMPLETED|2026-12-03T08:00:00|2026-12-03T08:10:00|2026-12-03T08:11:00|60|billing=1,cpu=1,gres/gpu=1,node=1||gpu06
research|42_3.batch|45.batch|batch|research||||COMPLETED|2026-12-03T08:10:00|2026-12-03T08:10:00|2026-12-03T08:11:00|60|cpu=1,gres/gpu=1,mem=0,node=1|cpu=00:00:59,gres/gpumem=2048M,gres/gpuutil=73,mem=1G|gpu06
research|42_[4-9%2]|42|sweep|research|dave|gpu|normal|PENDING|2026-12-03T08:00:00|Unknown|Unknown|0|||None assigned
research|50+0|50|het|research|erin|gpu|normal|COMPLETED|2026-12-03T08:00:00|2026-12-03T08:00:00|2026-12-03T08:02:00|120|billing=2,cpu=2,gres/gpu=4,node=1||gpu07
research|50+1|51|het|research|erin|cpu|normal|COMPLETED|2026-12-03T08:00:00|2026-12-03T08:00:00|2026-12-03T08:02:00|120|billing=2,cpu=2,node=1||cpu01
research|50+1.0|51.0|python|research||||COMPLETED|2026-12-03T08:00:00|2026-12-03T08:00:00|2026-12-03T08:02:00|120|cpu=2,mem=8G,node=1|cpu=00:03:59|cpu01
research|60|60|wait|research|frank|gpu|normal|PENDING|2026-12-03T09:10:00|Unknown|Unknown|0|||None assigned
research|61|61|never|research|frank|gpu|normal|CANCELLED by 1001|2026-12-03T09:10:00|None|2026-12-03T09:11:00|0|||None assigned
"""


def utc(day: int, hour: int, minute: int = 0, second: int = 0) -> datetime:
    return datetime(2026, 12, day, hour, minute, second, tzinfo=UTC)


# --- sacct_arguments -------------------------------------------------------------------


def test_sacct_arguments_ask_for_every_run_of_every_user_in_utc() -> None:
    start = datetime(2026, 12, 3, 1, 0, 0, 500, tzinfo=timezone(timedelta(hours=1)))
    end = datetime(2026, 12, 4, 0, 0, 0, 1, tzinfo=UTC)
    assert sacct_arguments(start=start, end=end) == [
        "--parsable2",
        "--allusers",
        "--duplicates",
        "--format=Cluster,JobID,JobIDRaw,JobName,Account,User,Partition,QOS,State,Submit,"
        "Start,End,ElapsedRaw,AllocTRES,TRESUsageInTot,NodeList",
        "--starttime",
        "2026-12-03T00:00:00",
        "--endtime",
        "2026-12-04T00:00:01",
    ]


def test_sacct_arguments_without_end_or_other_users() -> None:
    args = sacct_arguments(start=utc(3, 0), end=None, all_users=False)
    assert args[0] == "--parsable2"
    assert "--allusers" not in args
    assert "--endtime" not in args
    assert args[-2:] == ["--starttime", "2026-12-03T00:00:00"]


def test_sacct_arguments_refuse_naive_or_backward_windows() -> None:
    with pytest.raises(ValueError, match="time zone"):
        sacct_arguments(start=datetime(2026, 12, 3), end=None)  # noqa: DTZ001
    with pytest.raises(ValueError, match="ends before"):
        sacct_arguments(start=utc(3, 1), end=utc(3, 0))


# --- parse_tres ------------------------------------------------------------------------


def test_parse_tres_real_allocation_and_request() -> None:
    assert parse_tres("billing=1,cpu=1,gres/gpu=2,node=1") == {
        "billing": 1,
        "cpu": 1,
        "gres/gpu": 2,
        "node": 1,
    }
    request = parse_tres("billing=1,cpu=1,gres/gpu=2,mem=4000M,node=1", field="ReqTRES")
    assert request["mem"] == 4_194_304_000


def test_parse_tres_real_step_usage() -> None:
    assert parse_tres(REAL_BATCH_USAGE, field="TRESUsageInTot") == {
        "cpu": 2,
        "energy": 0,
        "fs/disk": 1_690_123,
        "mem": 224_927_744,
        "pages": 1,
        "vmem": 229_351_424,
    }
    # The batch step's AllocTRES from the same run: cpu is a count, a bare mem is MiB.
    assert parse_tres("cpu=1,gres/gpu=2,mem=0,node=1") == {
        "cpu": 1,
        "gres/gpu": 2,
        "mem": 0,
        "node": 1,
    }


def test_parse_tres_nvml_gpu_usage() -> None:
    usage = parse_tres("cpu=00:01,gres/gpuutil=73,gres/gpumem=2048M", field="TRESUsageInMax")
    assert usage == {"cpu": 1, "gres/gpuutil": 73, "gres/gpumem": 2_147_483_648}
    assert gpu_count(usage) == 0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("00:00:02", 2),
        ("01:02", 62),
        ("1-02:03:04", 93_784),
        ("00:01.500", 1),
        ("59:59.999", 3_599),
        ("10:00:00", 36_000),
        ("12-00:00:00", 1_036_800),
    ],
)
def test_usage_cpu_time_in_whole_seconds_rounded_down(text: str, seconds: int) -> None:
    assert parse_tres(f"cpu={text}", field="TRESUsageInTot") == {"cpu": seconds}


@pytest.mark.parametrize(
    ("text", "field", "expected"),
    [
        ("mem=4", "AllocTRES", {"mem": 4 * MIB}),
        ("mem=1T,gres/gpumem=80G,bb/datawarp=2G", "AllocTRES", {"mem": 1024 * GIB, "gres/gpumem": 80 * GIB, "bb/datawarp": 2 * GIB}),
        ("mem=1.50G", "TRESUsageInAve", {"mem": 1_610_612_736}),
        ("mem=1.25K", "TRESUsageOutTot", {"mem": 1_280}),
        ("pages=2K,gres/gpuutil=1K", "TRESUsageInTot", {"pages": 2_048, "gres/gpuutil": 1_024}),
        ("mem=4096", "TRESUsageInTot", {"mem": 4_096}),
        ("cpu=1,license/matlab@flex=3,fs/lustre=NONE", "AllocTRES", {"cpu": 1, "license/matlab@flex": 3}),
        ("", "AllocTRES", {}),
        ("", "TRESUsageInTot", {}),
    ],
)  # fmt: skip
def test_parse_tres_units_and_fields(text: str, field: str, expected: dict[str, int]) -> None:
    assert parse_tres(text, field=field) == expected


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("cpu=1,cpu=2", "AllocTRES", "TRES 'cpu' appears twice"),
        ("cpu=1,gpu", "AllocTRES", "TRES item 'gpu' is not key=value"),
        ("cpu=1,", "AllocTRES", "TRES item '' is not key=value"),
        ("=3", "AllocTRES", "TRES item '=3' is not key=value"),
        ("cpu=00:00:02", "AllocTRES", "TRES 'cpu': '00:00:02' is not a whole number"),
        ("gres/gpu=2K", "AllocTRES", "TRES 'gres/gpu': '2K' is not a whole number"),
        ("mem=4000X", "AllocTRES", "TRES 'mem': '4000X' is not an amount (e.g. 512, 4000M)"),
        ("mem=1.5", "TRESUsageInTot", "TRES 'mem': '1.5' is not an amount (e.g. 512, 4000M)"),
        ("mem=-1", "TRESUsageInTot", "TRES 'mem': '-1' is not an amount (e.g. 512, 4000M)"),
        ("cpu=2", "TRESUsageInTot", "TRES 'cpu': '2' is not a time such as 1-02:03:04"),
        ("cpu=00:61:00", "TRESUsageInTot", "TRES 'cpu': '00:61:00' is not a time such as 1-02:03:04"),
        ("cpu=00:60", "TRESUsageInTot", "TRES 'cpu': '00:60' is not a time such as 1-02:03:04"),
        ("cpu=1-24:00:00", "TRESUsageInTot", "TRES 'cpu': '1-24:00:00' is not a time such as 1-02:03:04"),
        ("cpu=1-02:03", "TRESUsageInTot", "TRES 'cpu': '1-02:03' is not a time such as 1-02:03:04"),
        ("cpu=INVALID", "TRESUsageInTot", "TRES 'cpu': 'INVALID' is not a time such as 1-02:03:04"),
        ("cpu=1", "TRESUsageInMaxNode", "TRESUsageInMaxNode is not a TRES column this parser knows"),
    ],
)  # fmt: skip
def test_parse_tres_errors_name_the_key(text: str, field: str, message: str) -> None:
    with pytest.raises(ValueError, match="TRES") as raised:
        parse_tres(text, field=field)
    assert str(raised.value) == message


# --- GPUs in a TRES map -----------------------------------------------------------------


def test_gpu_count_real_typed_fake_gpu() -> None:
    tres = parse_tres(REAL_TYPED_ALLOC)
    assert gpu_count(tres) == 1
    assert gpu_types(tres) == {"fake": 1}


@pytest.mark.parametrize(
    ("tres", "gpus", "types"),
    [
        ({}, 0, {}),
        ({"cpu": 8, "gres/gpumem": 80 * GIB, "gres/gpuutil": 90}, 0, {}),
        ({"gres/gpu": 3}, 3, {}),
        ({"gres/gpu:h100": 8}, 8, {"h100": 8}),
        ({"gres/gpu:h100": 4, "gres/gpu:a100": 2}, 6, {"h100": 4, "a100": 2}),
        ({"gres/gpu:h100": 4, "gres/gpu": 6}, 6, {"h100": 4}),
        ({"gres/gpu": 0, "gres/gpu:h100": 4}, 0, {"h100": 4}),
        ({"gres/shard": 4, "gres/mps": 100}, 0, {}),
    ],
)
def test_gpu_count_prefers_the_untyped_total(
    tres: dict[str, int], gpus: int, types: dict[str, int]
) -> None:
    assert gpu_count(tres) == gpus
    assert gpu_types(tres) == types


# --- hostlists -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("localhost", ("localhost",)),
        ("gpu[01-03,05]", ("gpu01", "gpu02", "gpu03", "gpu05")),
        ("a[1-2],b3", ("a1", "a2", "b3")),
        ("rack[1-2]-n[01-02]", ("rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02")),
        ("gpu[8-10]", ("gpu8", "gpu9", "gpu10")),
        ("gpu[098-101]", ("gpu098", "gpu099", "gpu100", "gpu101")),
        ("node[7]", ("node7",)),
        ("n[3].cluster.example,login_1", ("n3.cluster.example", "login_1")),
        ("None assigned", ()),
        ("", ()),
    ],
)
def test_expand_hostlist(text: str, hosts: tuple[str, ...]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize(
    "text",
    ["gpu[01-03", "gpu01-03]", "gpu[[1-2]]", "gpu[]", "gpu[3-1]", "gpu[a-b]", "gpu[1-]",
     "gpu[1,,2]", "a,,b", ",a", "gpu 01", "gpu[1-2]x[", "n[1-200000]", "gpu[١-٣]"],
)  # fmt: skip
def test_expand_hostlist_rejects_malformed(text: str) -> None:
    with pytest.raises(ValueError, match="hostlist"):
        expand_hostlist(text)


def _ranges(numbers: list[int], width: int) -> str:
    """Write sorted numbers as Slurm does: runs of consecutive numbers as lo-hi."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and runs[-1][1] == n - 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(
        f"{low:0{width}d}" if low == high else f"{low:0{width}d}-{high:0{width}d}"
        for low, high in runs
    )


@st.composite
def host_groups(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A hostlist of groups with distinct prefixes, and the hosts it names, in order."""
    prefixes = draw(
        st.lists(
            st.sampled_from(["gpu", "node-", "a", "rack1-n", "x.y"]),
            min_size=1,
            max_size=4,
            unique=True,
        )
    )
    texts: list[str] = []
    hosts: list[str] = []
    for prefix in prefixes:
        width = draw(st.integers(1, 4))
        numbers = sorted(draw(st.sets(st.integers(0, 10**width - 1), min_size=1, max_size=40)))
        hosts += [f"{prefix}{n:0{width}d}" for n in numbers]
        if len(numbers) == 1 and draw(st.booleans()):
            texts.append(hosts[-1])
        else:
            texts.append(f"{prefix}[{_ranges(numbers, width)}]")
    return ",".join(texts), hosts


@given(host_groups())
def test_expand_hostlist_round_trip(case: tuple[str, list[str]]) -> None:
    text, hosts = case
    assert list(expand_hostlist(text)) == hosts


@given(
    st.sets(st.integers(0, 99), min_size=1, max_size=10),
    st.sets(st.integers(0, 999), min_size=1, max_size=10),
)
def test_expand_hostlist_groups_give_every_combination(racks: set[int], nodes: set[int]) -> None:
    text = f"r[{_ranges(sorted(racks), 2)}]-n[{_ranges(sorted(nodes), 3)}]"
    expected = [f"r{r:02d}-n{n:03d}" for r in sorted(racks) for n in sorted(nodes)]
    assert list(expand_hostlist(text)) == expected


# --- split_per_node ---------------------------------------------------------------------


def test_split_per_node_gives_the_remainder_to_the_first_nodes() -> None:
    assert split_per_node(8, ["a", "b", "c"]) == {"a": 3, "b": 3, "c": 2}
    assert split_per_node(2, ["a", "b", "c"]) == {"a": 1, "b": 1, "c": 0}
    assert split_per_node(16, expand_hostlist("gpu[01-02]")) == {"gpu01": 8, "gpu02": 8}
    assert split_per_node(0, []) == {}


def test_split_per_node_errors() -> None:
    with pytest.raises(ValueError, match="2 GPUs but no nodes"):
        split_per_node(2, [])
    with pytest.raises(ValueError, match="negative"):
        split_per_node(-1, ["a"])
    with pytest.raises(ValueError, match="twice"):
        split_per_node(2, ["a", "a"])


@given(st.integers(0, 10_000), st.lists(st.text(min_size=1), min_size=1, max_size=20, unique=True))
def test_split_per_node_preserves_the_sum_and_is_even(gpus: int, nodes: list[str]) -> None:
    parts = split_per_node(gpus, nodes)
    assert list(parts) == nodes
    assert sum(parts.values()) == gpus
    shares = list(parts.values())
    assert shares == sorted(shares, reverse=True)
    assert shares[0] - shares[-1] <= 1


# --- parse_sacct -----------------------------------------------------------------------


def test_parse_sacct_real_allocation_line() -> None:
    [record] = parse_sacct(REAL_X, source="sacct-X.txt", cluster="research")
    assert record.cluster == "research"
    assert (record.job_id, record.job_id_raw, record.job, record.step) == ("2", "2", "2", None)
    assert record.name == "wrap"
    assert record.alloc_tres == {"billing": 1, "cpu": 1, "gres/gpu": 2, "node": 1}
    assert (record.state, record.state_reason) == ("COMPLETED", None)
    assert (record.start, record.end) == (utc(3, 7, 28, 55), utc(3, 7, 29, 0))
    assert (record.elapsed_s, record.gpus, record.gpu_seconds()) == (5, 2, 10)
    assert record.finished
    assert (record.submit, record.account, record.user, record.nodes) == (None, None, None, ())


def test_parse_sacct_real_steps_header_lacks_the_times() -> None:
    text = f"{REAL_STEPS_HEADER}\n2|wrap|billing=1,cpu=1,gres/gpu=2,node=1|||5|COMPLETED\n"
    with pytest.raises(SacctError) as raised:
        parse_sacct(text, source="sacct-steps.txt", cluster="research")
    assert str(raised.value) == "sacct-steps.txt, line 1, field Start: required column missing"


def test_parse_sacct_full_format() -> None:
    records = parse_sacct(FULL, source="full.txt")
    summary = [
        (r.job_id, r.job, r.step, r.state, r.state_reason, r.gpus, r.gpu_seconds(), r.finished)
        for r in records
    ]
    assert summary == [
        ("2", "2", None, "COMPLETED", None, 2, 10, True),
        ("2.batch", "2", "batch", "COMPLETED", None, 2, 10, True),
        ("7", "7", None, "CANCELLED", "by 0", 16, 86_400, True),
        ("8", "8", None, "RUNNING", None, 1, 3_600, False),
        ("9", "9", None, "REQUEUED", None, 2, 3_600, True),
        ("9", "9", None, "COMPLETED", None, 2, 7_200, True),
        ("42_3", "42_3", None, "COMPLETED", None, 1, 60, True),
        ("42_3.batch", "42_3", "batch", "COMPLETED", None, 1, 60, True),
        ("50+0", "50+0", None, "COMPLETED", None, 4, 480, True),
        ("50+1", "50+1", None, "COMPLETED", None, 0, 0, True),
        ("50+1.0", "50+1", "0", "COMPLETED", None, 0, 0, True),
        ("60", "60", None, "PENDING", None, 0, 0, False),
        ("61", "61", None, "CANCELLED", "by 1001", 0, 0, True),
    ]
    assert [r.job_id for r in allocation_lines(records)] == [
        "2", "7", "8", "9", "9", "42_3", "50+0", "50+1", "60", "61"
    ]  # fmt: skip
    by_id = {r.job_id: r for r in records}  # the later run of 9 wins
    batch = by_id["2.batch"]
    assert batch.usage_in_tot == parse_tres(REAL_BATCH_USAGE, field="TRESUsageInTot")
    assert (batch.account, batch.user, batch.partition, batch.qos) == ("research", None, None, None)
    train = by_id["7"]
    assert train.alloc_tres["mem"] == 1024 * GIB
    assert gpu_types(train.alloc_tres) == {"h100": 16}
    assert train.nodes == ("gpu01", "gpu02")
    assert (train.user, train.partition, train.qos) == ("alice", "gpu", "high")
    assert train.submit == utc(3, 8, 0, 0)
    running = by_id["8"]
    assert (running.start, running.end) == (utc(3, 9, 0, 1), None)
    task = by_id["42_3.batch"]
    assert (task.job_id_raw, task.array_job_id, task.array_task_id) == ("45.batch", "42", "3")
    assert task.usage_in_tot == {
        "cpu": 59,
        "gres/gpumem": 2 * GIB,
        "gres/gpuutil": 73,
        "mem": GIB,
    }
    het = by_id["50+1.0"]
    assert (het.job_id_raw, het.het_job_id, het.het_offset) == ("51.0", "50", 1)
    assert (het.array_job_id, het.array_task_id) == (None, None)
    assert by_id["50+0"].het_offset == 0
    never = by_id["61"]
    assert (never.start, never.end, never.nodes) == (None, utc(3, 9, 11), ())


def test_requeued_runs_are_separate_lines() -> None:
    runs = [r for r in parse_sacct(FULL, source="full.txt") if r.job == "9"]
    assert [(r.state, r.start, r.nodes) for r in runs] == [
        ("REQUEUED", utc(3, 6, 0, 10), ("gpu04",)),
        ("COMPLETED", utc(3, 6, 32, 0), ("gpu05",)),
    ]
    still_requeued = FULL.replace(
        "REQUEUED|2026-12-03T06:00:00|2026-12-03T06:00:10|2026-12-03T06:30:10",
        "REQUEUED|2026-12-03T06:00:00|2026-12-03T06:00:10|Unknown",
    )
    first = next(r for r in parse_sacct(still_requeued, source="x") if r.job == "9")
    assert not first.finished


def test_parse_sacct_reads_times_in_the_given_zone() -> None:
    [record] = parse_sacct(REAL_X, source="x", cluster="c", tz=timezone(timedelta(hours=1), "CET"))
    assert record.start == utc(3, 6, 28, 55)
    assert record.start is not None
    assert record.start.tzinfo is UTC


def test_parse_sacct_any_column_order_and_case_crlf_and_blank_lines() -> None:
    text = (
        "\r\nelapsedraw|STATE|End|Start|AllocTRES|jobid|Cluster\r\n\r\n"
        "5|COMPLETED|2026-12-03T07:29:00|2026-12-03T07:28:55|gres/gpu:h100=8|2|research\r\n"
    )
    [record] = parse_sacct(text, source="x", cluster="ignored")
    assert (record.cluster, record.job_id, record.gpus, record.elapsed_s) == ("research", "2", 8, 5)
    assert (record.name, record.job_id_raw, record.usage_in_tot) == ("", "2", {})


def test_parse_sacct_header_only_is_no_records() -> None:
    assert parse_sacct(HEADER + "\n", source="x") == []


def test_pending_placeholder_that_started_is_an_error() -> None:
    line = _line(JobID="42_[4-9]", State="RUNNING", Start="2026-12-03T08:00:00")
    with pytest.raises(SacctError) as raised:
        parse_sacct(f"{HEADER}\n{line}\n", source="x")
    assert (
        str(raised.value) == "x, line 2, field JobID: array placeholder '42_[4-9]' has a start time"
    )


def _line(**changes: str) -> str:
    values = dict.fromkeys(SACCT_FIELDS, "")
    values.update(Cluster="research", JobID="2", State="COMPLETED", ElapsedRaw="5")
    values.update(changes)
    return "|".join(values[name] for name in SACCT_FIELDS)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "t.txt, line 1: no header line (run sacct without --noheader)"),
        (f"{HEADER}|MaxRSS\n", "t.txt, line 1, field MaxRSS: unknown column"),
        (f"{HEADER}|\n", "t.txt, line 1: empty column name (output of --parsable? use --parsable2)"),
        (f"{HEADER}|jobid\n", "t.txt, line 1, field JobID: column appears twice"),
        (HEADER.replace("ElapsedRaw|", "") + "\n", "t.txt, line 1, field ElapsedRaw: required column missing"),
        (HEADER.removeprefix("Cluster|") + "\n", "t.txt, line 1, field Cluster: required column missing (or pass cluster=)"),
        (f"{HEADER}\n{_line()}\n2|wrap\n", "t.txt, line 3: 2 fields where the header has 16"),
        (f"{HEADER}\n\n{_line(ElapsedRaw='5s')}\n", "t.txt, line 3, field ElapsedRaw: '5s' is not a whole number of seconds"),
        (f"{HEADER}\n{_line(ElapsedRaw='')}\n", "t.txt, line 2, field ElapsedRaw: '' is not a whole number of seconds"),
        (f"{HEADER}\n{_line(Start='2026-12-03 07:28:55')}\n", "t.txt, line 2, field Start: '2026-12-03 07:28:55' is not a time (YYYY-MM-DDTHH:MM:SS)"),
        (f"{HEADER}\n{_line(End='2026-12-03T07:28:55Z')}\n", "t.txt, line 2, field End: '2026-12-03T07:28:55Z' is not a time (YYYY-MM-DDTHH:MM:SS)"),
        (f"{HEADER}\n{_line(AllocTRES='cpu=1,gres/gpu=two')}\n", "t.txt, line 2, field AllocTRES: TRES 'gres/gpu': 'two' is not a whole number"),
        (f"{HEADER}\n{_line(TRESUsageInTot='cpu=1:2:3:4')}\n", "t.txt, line 2, field TRESUsageInTot: TRES 'cpu': '1:2:3:4' is not a time such as 1-02:03:04"),
        (f"{HEADER}\n{_line(JobID='2.')}\n", "t.txt, line 2, field JobID: '2.' is not a job id (42, 42_3, 42+1, 42.batch)"),
        (f"{HEADER}\n{_line(JobID='abc')}\n", "t.txt, line 2, field JobID: 'abc' is not a job id (42, 42_3, 42+1, 42.batch)"),
        (f"{HEADER}\n{_line(State='')}\n", "t.txt, line 2, field State: empty"),
        (f"{HEADER}\n{_line(NodeList='gpu[1-')}\n", "t.txt, line 2, field NodeList: hostlist 'gpu[1-' has unbalanced or nested brackets"),
        (f"{HEADER}\n{_line(Cluster='')}\n", "t.txt, line 2, field Cluster: empty (pass cluster= to name it)"),
    ],
)  # fmt: skip
def test_parse_sacct_errors_name_line_and_field(text: str, message: str) -> None:
    with pytest.raises(SacctError) as raised:
        parse_sacct(text, source="t.txt")
    assert str(raised.value) == message
    assert raised.value.source == "t.txt"


def test_sacct_error_quotes_long_values_cut_short() -> None:
    text = f"{HEADER}\n{_line(JobID='9' * 200 + 'x')}\n"
    with pytest.raises(SacctError) as raised:
        parse_sacct(text, source="t.txt")
    error = raised.value
    assert (error.line, error.field) == (2, "JobID")
    assert error.message == f"'{'9' * 80}'... is not a job id (42, 42_3, 42+1, 42.batch)"


# --- generated TRES strings (what Debian's build cannot produce) ---------------------------

GPU_TYPE = st.from_regex(r"[a-z][a-z0-9_]{0,9}", fullmatch=True)


@st.composite
def memory_amount(draw: st.DrawFn, *, bare_bytes: int) -> tuple[str, int]:
    """A memory value as sacct writes it, and its bytes."""
    number = draw(st.integers(0, 100_000))
    unit = draw(st.sampled_from(["", "K", "M", "G", "T", "P"]))
    return f"{number}{unit}", number * UNIT_BYTES.get(unit, bare_bytes)


@st.composite
def alloc_tres(draw: st.DrawFn) -> tuple[str, dict[str, int], dict[str, int], int | None]:
    """An AllocTRES string; the map it means; its typed GPUs; its untyped total, if any."""
    items: dict[str, tuple[str, int]] = {}
    for key in draw(st.sets(st.sampled_from(["billing", "cpu", "node", "energy", "license/x"]))):
        count = draw(st.integers(0, 10**6))
        items[key] = (str(count), count)
    for key in draw(st.sets(st.sampled_from(["mem", "gres/gpumem", "bb/datawarp"]))):
        items[key] = draw(memory_amount(bare_bytes=MIB))
    typed = draw(st.dictionaries(GPU_TYPE, st.integers(0, 64), max_size=3))
    for gpu_type, count in typed.items():
        items[f"gres/gpu:{gpu_type}"] = (str(count), count)
    untyped_extra = draw(st.none() | st.integers(0, 64))  # GPUs asked for without a type
    total = None if untyped_extra is None else sum(typed.values()) + untyped_extra
    if total is not None:
        items["gres/gpu"] = (str(total), total)
    order = draw(st.permutations(list(items)))
    text = ",".join(f"{key}={items[key][0]}" for key in order)
    return text, {key: value for key, (_, value) in items.items()}, typed, total


@given(alloc_tres())
def test_alloc_tres_round_trip_and_gpu_count(
    case: tuple[str, dict[str, int], dict[str, int], int | None],
) -> None:
    text, expected, typed, total = case
    tres = parse_tres(text, field="AllocTRES")
    assert tres == expected
    assert gpu_types(tres) == typed
    assert gpu_count(tres) == (sum(typed.values()) if total is None else total)
    assert gpu_count(tres) >= sum(typed.values())


@st.composite
def cpu_time(draw: st.DrawFn) -> tuple[str, int]:
    """CPU time in one of the forms sacct prints, and its whole seconds."""
    seconds = draw(st.integers(0, 30 * 86_400))
    days, rest = divmod(seconds, 86_400)
    hours, minutes, secs = rest // 3600, rest % 3600 // 60, rest % 60
    forms = [f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"] if days else []
    if not days:
        forms.append(f"{hours:02d}:{minutes:02d}:{secs:02d}")
    if seconds < 3600:
        forms.append(f"{minutes:02d}:{secs:02d}")
    text = draw(st.sampled_from(forms))
    if draw(st.booleans()):
        text += f".{draw(st.integers(0, 999)):03d}"
    return text, seconds


@st.composite
def usage_tres(draw: st.DrawFn) -> tuple[str, dict[str, int]]:
    """A TRESUsageInTot string with NVML GPU usage, and the map it means."""
    items: dict[str, tuple[str, int]] = {}
    if draw(st.booleans()):
        items["cpu"] = draw(cpu_time())
    for key in draw(st.sets(st.sampled_from(["energy", "fs/disk", "pages", "gres/gpuutil"]))):
        count = draw(st.integers(0, 10**9))
        items[key] = (str(count), count)
    for key in draw(st.sets(st.sampled_from(["mem", "vmem", "gres/gpumem"]))):
        items[key] = draw(memory_amount(bare_bytes=1))
    order = draw(st.permutations(list(items)))
    return ",".join(f"{key}={items[key][0]}" for key in order), {
        key: value for key, (_, value) in items.items()
    }


@given(usage_tres())
def test_usage_tres_round_trip(case: tuple[str, dict[str, int]]) -> None:
    text, expected = case
    assert parse_tres(text, field="TRESUsageInTot") == expected


@given(alloc_tres(), usage_tres(), st.integers(0, 10**7))
def test_generated_lines_parse_through_sacct(
    alloc: tuple[str, dict[str, int], dict[str, int], int | None],
    usage: tuple[str, dict[str, int]],
    elapsed: int,
) -> None:
    text = (
        f"{HEADER}\n{_line(AllocTRES=alloc[0], TRESUsageInTot=usage[0], ElapsedRaw=str(elapsed))}"
    )
    [record] = parse_sacct(text, source="gen")
    assert (record.alloc_tres, record.usage_in_tot) == (alloc[1], usage[1])
    assert record.gpu_seconds() == gpu_count(alloc[1]) * elapsed


# --- hourly_gpu_seconds ----------------------------------------------------------------


def test_hourly_gpu_seconds_example() -> None:
    assert hourly_gpu_seconds(utc(3, 10, 59, 30), utc(3, 12, 0, 10), 2) == [
        (utc(3, 10), 60),
        (utc(3, 11), 7_200),
        (utc(3, 12), 20),
    ]


def test_hourly_gpu_seconds_rounds_cumulatively() -> None:
    start = utc(3, 10, 59, 59) + timedelta(microseconds=500_000)
    # 2.9 s is 2 whole seconds; 0.5 s of them fall before 11:00: floor(3 x 0.5) = 1.
    assert hourly_gpu_seconds(start, start + timedelta(seconds=2.9), 3) == [
        (utc(3, 10), 1),
        (utc(3, 11), 5),
    ]


def test_hourly_gpu_seconds_buckets_in_utc_and_skips_nothing_to_book() -> None:
    india = timezone(timedelta(hours=5, minutes=30))
    start = datetime(2026, 12, 3, 16, 0, tzinfo=india)  # 10:30 UTC
    assert hourly_gpu_seconds(start, start + timedelta(minutes=60), 1) == [
        (utc(3, 10), 1_800),
        (utc(3, 11), 1_800),
    ]
    assert hourly_gpu_seconds(start, start, 8) == []
    assert hourly_gpu_seconds(start, start + timedelta(hours=3), 0) == []
    assert hourly_gpu_seconds(start, start + timedelta(microseconds=999_999), 8) == []


def test_hourly_gpu_seconds_errors() -> None:
    with pytest.raises(ValueError, match="time zone"):
        hourly_gpu_seconds(datetime(2026, 12, 3), utc(3, 1), 1)  # noqa: DTZ001
    with pytest.raises(ValueError, match="start <= end"):
        hourly_gpu_seconds(utc(3, 1), utc(3, 0), 1)
    with pytest.raises(ValueError, match="gpus >= 0"):
        hourly_gpu_seconds(utc(3, 0), utc(3, 1), -1)


@given(
    st.datetimes(datetime(2020, 1, 1), datetime(2030, 1, 1), timezones=st.just(UTC)),  # noqa: DTZ001
    st.timedeltas(timedelta(0), timedelta(days=3)),
    st.integers(0, 64),
)
def test_hourly_gpu_seconds_sum_is_exact_and_parts_stay_in_their_hour(
    start: datetime, length: timedelta, gpus: int
) -> None:
    parts = hourly_gpu_seconds(start, start + length, gpus)
    whole_seconds = length.days * 86_400 + length.seconds
    assert sum(part for _, part in parts) == gpus * whole_seconds
    run_end = start + timedelta(seconds=whole_seconds)
    hours = [hour for hour, _ in parts]
    assert hours == sorted(set(hours))
    for hour, part in parts:
        assert hour.tzinfo is UTC
        assert (hour.minute, hour.second, hour.microsecond) == (0, 0, 0)
        overlap = min(hour + timedelta(hours=1), run_end) - max(hour, start)
        assert overlap > timedelta(0)
        exact = gpus * overlap / timedelta(seconds=1)
        assert part > 0
        assert abs(part - exact) < 1
