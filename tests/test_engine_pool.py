"""The ordering of the tests that share pooled engines (tests/engine_pool.py)."""

import pytest

from tests.engine_pool import engine_order


def _starts(needs: list[tuple[str, ...]], order: list[int]) -> list[str]:
    """Engine starts when one runs at a time."""
    running: str | None = None
    starts: list[str] = []
    for i in order:
        for name in needs[i]:
            if name != running:
                starts.append(name)
                running = name
    return starts


def test_tests_of_one_engine_run_back_to_back():
    needs: list[tuple[str, ...]] = [("a",), ("b",), ("a",), (), ("b",), ("a",)]
    order = engine_order(needs)
    assert sorted(order) == list(range(len(needs)))
    assert _starts(needs, order) == ["a", "b"]
    assert order[0] == 3  # needing none, it goes first and stops nothing


def test_a_test_of_two_engines_runs_between_their_groups_in_its_order():
    needs: list[tuple[str, ...]] = [("x",), ("z",), ("y", "z"), ("x", "y"), ("x",)]
    order = engine_order(needs)
    assert _starts(needs, order) == ["x", "y", "z"]


def test_the_serving_suites_needs_start_each_engine_once_but_one():
    """What the pooled modules declare (engine memory, draft model, engine, probe, proxy):
    the model counts one restart, of the draft for the bfloat16 comparison, which in fact
    reads the draft's completions kept from the test before it."""
    needs: list[tuple[str, ...]] = [
        *[("ngram",)] * 6,
        ("draft",),
        ("draft", "plain"),
        ("plain", "draft"),
        ("plain-f32", "draft-f32"),
        (),
        ("ngram-f32", "plain-f32"),
    ]
    order = engine_order(needs)
    assert _starts(needs, order) == [
        "ngram", "draft", "plain", "draft", "ngram-f32", "plain-f32", "draft-f32"
    ]  # fmt: skip
    assert order.index(6) + 1 == order.index(7)  # the draft's completions, then its log


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(
        test_a=(
            "import pytest\n\n"
            "def test_plain_first():\n    pass\n\n"
            "@pytest.mark.engines('ngram')\ndef test_n1():\n    pass\n\n"
            "@pytest.mark.engines('plain')\ndef test_p1():\n    pass\n\n"
            "def test_between():\n    pass\n"
        ),
        test_b=(
            "import pytest\n\n"
            "@pytest.mark.engines('ngram')\ndef test_n2():\n    pass\n\n"
            "@pytest.mark.engines('plain', 'ngram')\ndef test_pn():\n    pass\n\n"
            "def test_last():\n    pass\n"
        ),
    )
    return pytester


def test_collection_gathers_the_pooled_tests_where_the_first_was(suite):
    result = suite.runpytest_inprocess("-p", "tests.engine_pool", "-p", "no:xdist", "--co", "-q")
    ids = [line for line in result.stdout.lines if "::" in line]
    assert ids == [
        "test_a.py::test_plain_first",
        "test_a.py::test_n1",
        "test_b.py::test_n2",
        "test_a.py::test_p1",
        "test_b.py::test_pn",
        "test_a.py::test_between",
        "test_b.py::test_last",
    ]


def test_an_unknown_engine_is_refused(pytester: pytest.Pytester):
    pytester.makepyfile("import pytest\n\n@pytest.mark.engines('nope')\ndef test_x():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "tests.engine_pool", "-p", "no:xdist")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown engines*nope*known: *plain*"])
