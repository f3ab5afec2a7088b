"""``xdist_group`` working again under pytest 9 (a pytest plugin, tests/conftest.py).

With ``--dist loadgroup`` pytest-xdist (3.8) sends every test marked
``@pytest.mark.xdist_group(name)`` to one worker by suffixing the test's node id with
``@name`` on the worker. It does so by assigning ``item._nodeid``, which pytest 9 no longer
reads (a node's id is ``item._id``), so the groups were silently ignored: ``loadgroup``
scheduled like ``load``, and two tests of one group (two engines, two Slurm jobs that want both
fake GPUs) could run at once. This plugin gives each grouped test the node id xdist meant,
after xdist's own hook, and does nothing where xdist's rename took effect or without
``loadgroup``. ``tests/test_xdist_groups.py`` runs a small suite on two workers and fails if a
group is split.
"""

from __future__ import annotations

import pytest

__all__ = ["group_of"]


def group_of(item: pytest.Item) -> str | None:
    """The group xdist's ``loadgroup`` gives ``item`` (its ``xdist_group`` names, sorted and
    joined by ``_``, as xdist joins them), or None when it has none."""
    names = {
        str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        for mark in item.iter_markers("xdist_group")
    }
    return "_".join(sorted(names)) if names else None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):  # set on xdist's workers only
        return
    for item in items:
        group = group_of(item)
        if group is not None and not item.nodeid.endswith(f"@{group}"):
            from _pytest.nodeid import coerce_node_id  # pytest 9's (pytest 8 never gets here)

            item._id = coerce_node_id(f"{item.nodeid}@{group}")
