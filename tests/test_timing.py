"""The suite's time per group (tests/timing.py), on a small suite run by pytester."""

import re

import pytest

from tests.timing import GroupTimes, directory_of, format_times


def test_directory_of_a_node_id():
    assert directory_of("tests/serving/test_x.py::test_a[1]") == "tests/serving"
    assert directory_of("tests/test_cli.py::test_b") == "tests"
    assert directory_of("test_top.py::test_c") == "."


def test_times_add_up_per_folder_and_marker_and_the_largest_comes_first():
    times = GroupTimes()
    times.add("tests/a/test_1.py::t1", ["serving"], 3.0)
    times.add("tests/a/test_1.py::t1", ["serving"], 1.0)  # its teardown
    times.add("tests/b/test_2.py::t2", [], 0.5)
    times.add("tests/b/test_2.py::t3", ["postgres", "serving"], 2.0)
    lines = format_times(times, wall_s=7.0)
    folders = lines[1:3]
    assert folders[0].split() == ["tests/a", "1", "4.0", "61.5%"]
    assert folders[1].split() == ["tests/b", "2", "2.5", "38.5%"]
    markers = {line.split()[0]: line.split()[1:] for line in lines[5:8]}
    assert markers == {
        "serving": ["2", "6.0", "92.3%"],
        "postgres": ["1", "2.0", "30.8%"],
        "(no": ["marker)", "1", "0.5", "7.7%"],
    }
    assert lines[-1] == "3 tests: 6.5 s in tests, 7.0 s wall"


def test_the_run_ends_with_its_time_per_folder_and_marker(pytester: pytest.Pytester):
    pytester.makeini("[pytest]\nmarkers =\n    slow: a slow one\n")
    pytester.mkpydir("fast")
    pytester.mkpydir("slow")
    pytester.makepyfile(
        **{
            "fast/test_fast.py": "def test_a():\n    pass\n\ndef test_b():\n    pass\n",
            "slow/test_slow.py": (
                "import time\nimport pytest\n\n@pytest.fixture\ndef setup():\n"
                "    time.sleep(0.2)\n\n@pytest.mark.slow\n"
                "@pytest.mark.parametrize('n', [1])\ndef test_c(setup, n):\n    time.sleep(0.3)\n"
            ),
            # In a folder named like a marker, without the marker: not counted as marked.
            "slow/test_unmarked.py": "def test_d():\n    pass\n",
        }
    )
    result = pytester.runpytest_inprocess("-p", "tests.timing", "-p", "no:xdist")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK, out
    assert "4 passed" in out
    section = out[out.index("suite time per group") :]
    folders, markers = section.split("\nmarker ", 1)
    assert re.search(r"^slow\s+2\s+", folders, re.MULTILINE)
    assert re.search(r"^fast\s+2\s+", folders, re.MULTILINE)
    slow = re.search(r"^slow\s+1\s+([\d.]+)\s+", markers, re.MULTILINE)
    assert slow is not None, markers
    assert float(slow[1]) >= 0.5  # setup and call
    assert re.search(r"^\(no marker\)\s+3\s+", markers, re.MULTILINE), markers
    assert "parametrize" not in section
    assert re.search(r"^4 tests: [\d.]+ s in tests, [\d.]+ s wall$", section, re.MULTILINE)
