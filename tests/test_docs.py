"""The documentation: the checks `make docs` runs (docsgen), on the real pages and on small
broken ones, without MkDocs (datasette's test_docs idea, extended to the whole site)."""

import json
import re
from pathlib import Path

import pytest

from docsgen import checks, cli_reference, layout, site
from docsgen.cli_reference import CommandInfo
from docsgen.text import slugify
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def tree() -> dict[tuple[str, ...], CommandInfo]:
    return cli_reference.command_tree()


@pytest.fixture(scope="module")
def written() -> dict[str, str]:
    return site.written_pages()


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return site.generated_pages()


def test_the_site_has_no_problems(written: dict[str, str], generated: dict[str, str]) -> None:
    assert site.problems(written, generated) == []


def test_every_setting_has_a_row_on_the_settings_page(written: dict[str, str]) -> None:
    from app.settings import Settings

    names = site.setting_names()
    assert {f"SPECLEDGER_{f.upper()}" for f in Settings.model_fields} <= names
    assert "SPECLEDGER_METER_TOKEN" in names  # read by the proxy, not the settings object
    assert checks.check_settings(names, "docs/settings.md", written["settings.md"]) == []


def test_every_command_is_in_the_reference_and_named_by_a_guide_page(
    written: dict[str, str], generated: dict[str, str], tree: dict[tuple[str, ...], CommandInfo]
) -> None:
    guide = {f"docs/{p}": t for p, t in written.items()}
    assert checks.check_documented(guide, generated[site.GENERATED_CLI], tree) == []
    assert len(tree) > 50  # the whole tree was walked, groups and their commands


def test_the_readme_is_a_front_page_with_the_two_commands_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 90
    quick_start = readme[readme.index("## Quick start") : readme.index("## Your own data")]
    assert "make demo" in quick_start
    assert "make test" in quick_start
    targets = checks.make_targets((ROOT / "Makefile").read_text())
    assert {"demo", "test", "docs"} <= targets
    assert checks.check_make({"README.md": readme}, targets) == []


def test_the_readmes_own_data_path_names_real_commands(
    tree: dict[tuple[str, ...], CommandInfo],
) -> None:
    readme = (ROOT / "README.md").read_text()
    own_data = readme[readme.index("## Your own data") :]
    named = checks.named_commands({"README.md": own_data}, tree)
    for command in ("ingest billing", "deployments add", "allocate", "reconcile", "costs"):
        assert ("specledger", *command.split()) in named
    assert ("specledger", "export", "chargeback") in named
    assert checks.check_commands({"README.md": readme}, tree) == []


def test_the_prototype_engine_config_on_the_serving_page_is_valid(
    written: dict[str, str],
) -> None:
    from serving.engine import launcher
    from serving.engine.config import EngineConfig

    page = written["serving.md"]
    block = re.search(r"```json\n(.*?)```", page[page.index("prototype") :], re.S)
    assert block is not None
    config = EngineConfig.model_validate(json.loads(block.group(1)))
    argv = launcher.build_argv(config)
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert (config.device, config.model) == ("cuda", "meta-llama/Llama-3.1-8B-Instruct")
    assert spec["model"] == "meta-llama/Llama-3.2-1B-Instruct"


def test_the_screenshot_the_pages_show_exists(written: dict[str, str]) -> None:
    assert "](screenshot-cost.png)" in written["getting-started.md"]
    assert (ROOT / "docs" / "screenshot-cost.png").is_file()


def test_the_api_reference_has_every_operation(generated: dict[str, str]) -> None:
    from docsgen import api_reference

    schema = api_reference.openapi_schema()
    anchors = checks.headings(generated[site.GENERATED_API])
    operations = api_reference.operations(schema)
    assert len(operations) > 20
    for method, path, _ in operations:
        assert slugify(f"{method} {path}") in anchors


def test_the_layout_page_follows_the_tree(generated: dict[str, str]) -> None:
    page = generated[site.GENERATED_LAYOUT]
    for name, _ in layout.packages(ROOT):
        assert f"### `{name}`" in page
    assert "## Import contracts" in page


# The checkers on small pages: each must find what it is for (and only that).

TREE = {
    ("specledger",): CommandInfo(
        ("specledger",), frozenset({"allocate", "ledger"}), frozenset({"--help"})
    ),
    ("specledger", "allocate"): CommandInfo(
        ("specledger", "allocate"),
        frozenset(),
        frozenset({"--help", "--month", "--share-idle", "--no-share-idle"}),
    ),
    ("specledger", "ledger"): CommandInfo(
        ("specledger", "ledger"), frozenset({"close"}), frozenset({"--help"})
    ),
    ("specledger", "ledger", "close"): CommandInfo(
        ("specledger", "ledger", "close"), frozenset(), frozenset({"--help"})
    ),
}


def _cli_problems(text: str) -> list[str]:
    return checks.check_commands({"docs/x.md": text}, TREE)


@pytest.mark.parametrize(
    "text",
    [
        "```sh\nspecledger allocate --month 2026-11 [--share-idle]   # a comment --nope\n```",
        "Run `specledger allocate --month=2026-11` or `.venv/bin/specledger ledger close 2026-11`.",
        "```sh\nspecledger allocate \\\n    --month 2026-11 --no-share-idle | tee out.txt -x\n```",
        "the `specledger` command line; `specledger.key` is a tag; `specledger_proxy_total` a metric",
        "`specledger ledger close [--help | --help]` and `specledger ledger ...`",
    ],
)
def test_real_commands_and_options_pass(text: str) -> None:
    assert _cli_problems(text) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("```sh\nspecledger allocate --mnth 2026-11\n```", "has no option --mnth"),
        ("`specledger alocate --month 2026-11`", "has no command 'alocate'"),
        ("`specledger ledger open 2026-11`", "has no command 'open'"),
        ("```sh\nspecledger allocate \\\n    --month 1 --idle\n```", "has no option --idle"),
        ("`specledger allocate [--month X | --shared]`", "has no option --shared"),
    ],
)
def test_a_command_or_option_that_does_not_exist_is_found(text: str, expected: str) -> None:
    problems = _cli_problems(text)
    assert len(problems) == 1
    assert expected in problems[0]
    assert problems[0].startswith("docs/x.md:")


def test_a_command_no_guide_page_names_is_found() -> None:
    reference = "\n".join(f"## {' '.join(path)}" for path in TREE)
    guide = {"docs/a.md": "`specledger allocate --month 2026-11` and `specledger ledger close M`"}
    assert checks.check_documented(guide, reference, TREE) == []
    problems = checks.check_documented({"docs/a.md": "`specledger ledger`"}, reference, TREE)
    assert problems == [
        "no guide page names `specledger allocate` (document it)",
        "no guide page names `specledger ledger close` (document it)",
    ]
    missing = checks.check_documented(guide, "## specledger allocate", TREE)
    assert "the CLI reference has no section for `specledger ledger close`" in missing


def test_links_and_anchors_resolve_and_broken_ones_are_found() -> None:
    pages = {
        "README.md": "[manual](docs/index.md) [ledger](docs/ledger.md#closing-a-month)",
        "docs/index.md": "# Home\n\n[ledger](ledger.md#closing-a-month) ![shot](shot.png)\n"
        "[web](https://example.com) [self](#home) `[not a link](nowhere.md)`\n"
        "```md\n[in code](nowhere.md)\n```",
        "docs/ledger.md": "# The ledger\n\n## Closing a month\n",
    }

    def exists(path: str) -> bool:
        return path == "docs/shot.png"

    assert checks.check_links(pages, exists) == []
    broken = {
        "docs/index.md": "# Home\n\n[a](missing.md)\n\n[b](ledger.md#no-such)\n[c](../README.md)\n"
        "[d](#elsewhere) ![e](gone.png)",
        "docs/ledger.md": "# The ledger\n",
        "README.md": "[f](docs/nope.md)",
    }
    problems = checks.check_links(broken, exists)
    assert [p.split(": link ")[0] for p in problems] == [
        "docs/index.md:3",
        "docs/index.md:5",
        "docs/index.md:6",
        "docs/index.md:7",
        "docs/index.md:7",
        "README.md:1",
    ]
    assert "leaves the docs folder" in problems[2]


def test_heading_anchors_are_the_ones_markdown_makes() -> None:
    text = "# The ledger: allocation, reconciliation\n## `specledger collect` (OTel)\n"
    text += "## Limits\n## Limits\n```sh\n# not a heading\n```\n"
    assert checks.headings(text) == {
        "the-ledger-allocation-reconciliation",
        "specledger-collect-otel",
        "limits",
        "limits_1",
    }


def test_inline_code_does_not_run_across_paragraphs() -> None:
    text = "a ` stray backtick\n\n`specledger alocate` is wrong"
    assert len(_cli_problems(text)) == 1


def test_make_targets_are_checked() -> None:
    makefile = "VENV ?= .venv\nBIN := x\n.PHONY: demo\ndemo: install\n\tcmd\ninstall: $(STAMP)\n"
    targets = checks.make_targets(makefile)
    assert targets == {"demo", "install"}
    pages = {"README.md": "```sh\nmake demo\nmake VENV=/tmp/v install\n```\n`make tset`"}
    assert checks.check_make(pages, targets) == ["README.md:5: `make tset`: no such target"]


def test_a_setting_without_a_row_is_found() -> None:
    new = "SPECLEDGER_" + "NEW_THING"  # spelled apart: the site's own check reads tests/ too
    page = "| Setting | Default |\n| --- | --- |\n| `SPECLEDGER_ENV` | `dev` |\n"
    names = checks.settings_named(['os.environ["SPECLEDGER_ENV"]', f"{new}=1"])
    assert names == {"SPECLEDGER_ENV", new}
    assert checks.check_settings(names, "docs/settings.md", page) == [
        f"docs/settings.md: the setting {new} is not documented (add a row to its table)"
    ]
    mentioned_only = page + f"\nSee `{new}`.\n"
    assert len(checks.check_settings(names, "docs/settings.md", mentioned_only)) == 1


def test_the_nav_lists_every_page_once() -> None:
    nav = [{"Home": "index.md"}, {"Part": [{"A": "a.md"}, {"B": "b.md"}]}, {"A again": "a.md"}]
    assert checks.check_nav(nav, ["index.md", "a.md", "b.md", "c.md"]) == [
        "mkdocs.yml: nav lacks c.md",
        "mkdocs.yml: nav names a.md twice",
    ]
    assert checks.check_nav(nav[:2], ["index.md", "a.md"]) == [
        "mkdocs.yml: nav names b.md, which is not a page"
    ]


def test_the_layout_is_read_from_the_tree(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[[tool.importlinter.contracts]]\nname = "Layers"\ntype = "layers"\nlayers = ["pkg.a", "pkg.b"]\n'
    )
    package = tmp_path / "pkg" / "sub"
    package.mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text('"""The top package."""\n')
    (package / "__init__.py").write_text("")
    (package / "rules.py").write_text('"""Pure rules: no I/O.\n\nMore detail."""\n')
    (tmp_path / "notapackage").mkdir()
    page = layout.render(tmp_path)
    assert [name for name, _ in layout.packages(tmp_path)] == ["pkg", "pkg.sub"]
    assert "The top package." in page
    assert "| `rules` | Pure rules: no I/O. |" in page
    assert "*No package docstring.*" in page
    assert "1. `pkg.a`" in page
    assert "notapackage" not in page


def test_a_path_or_module_the_pages_name_must_exist() -> None:
    files = {"app/ledger/costs.py", "app/domain/alerts.py", "bench/allocate.py", "tests/fixtures"}

    def exists(path: str) -> bool:
        return path in files

    fine = (
        "`app/ledger/costs.py`, `app/ledger/costs.py: ledger_costs`, `tests/fixtures/`, "
        "`app/domain/alerts.verify_signature`, `app.domain.alerts.verify_signature`, "
        "`bench.allocate`, `.specledger/engines/NAME.json`, `usage/month=YYYY-MM/`"
    )
    assert checks.check_paths({"docs/a.md": fine}, exists) == []
    moved = "`app/domain/findings.py` and\n`app.domain.findings.rule` and `bench.alocate`"
    assert checks.check_paths({"docs/a.md": moved}, exists) == [
        "docs/a.md:1: `app/domain/findings.py`: no such file or folder (moved?)",
        "docs/a.md:2: `app.domain.findings.rule`: no such module (moved?)",
        "docs/a.md:2: `bench.alocate`: no such module (moved?)",
    ]
