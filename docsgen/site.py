"""The site's pages as the checks see them, and every check run over them at once.

Used by the MkDocs hook (:mod:`docsgen.hooks`) and by tests/test_docs.py, which need no
MkDocs.
"""

from pathlib import Path

from docsgen import checks, cli_reference, layout

ROOT = Path(__file__).resolve().parent.parent
DOCS = "docs"
GENERATED_CLI = "reference/cli.md"
GENERATED_API = "reference/api.md"
GENERATED_LAYOUT = "reference/layout.md"
GENERATED_ASSETS = ("openapi.json",)
"""Files the build adds beside the pages (the hook writes them)."""
SETTINGS_PAGE = "settings.md"
SETTINGS_SOURCES = ("app", "ingest", "serving", "dashboards", "bench", "scripts", "tests")
"""Where a ``SPECLEDGER_*`` name in use may appear (and the Makefile)."""


def generated_pages(root: Path = ROOT, *, api: bool = True) -> dict[str, str]:
    """The pages made from the code, keyed by their path in ``docs/``. ``api=False`` leaves
    out the API reference (it imports the whole app: seconds)."""
    pages = {
        GENERATED_CLI: cli_reference.render(),
        GENERATED_LAYOUT: layout.render(root),
    }
    if api:
        from docsgen import api_reference

        pages[GENERATED_API] = api_reference.render()
    return pages


def written_pages(root: Path = ROOT) -> dict[str, str]:
    """The hand-written pages in ``docs/``, keyed by their path in it."""
    docs = root / DOCS
    return {
        path.relative_to(docs).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(docs.rglob("*.md"))
    }


def load_nav(root: Path = ROOT) -> object:
    """The ``nav`` of mkdocs.yml."""
    import yaml

    config = yaml.safe_load((root / "mkdocs.yml").read_text(encoding="utf-8"))
    return config.get("nav", []) if isinstance(config, dict) else []


def setting_names(root: Path = ROOT) -> set[str]:
    """Every ``SPECLEDGER_*`` name the code, scripts, tests and Makefile use, and every
    field of the settings."""
    from app.settings import Settings

    texts = [(root / "Makefile").read_text(encoding="utf-8")]
    for folder in SETTINGS_SOURCES:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in (".py", ".sh", ".toml") and path.is_file():
                texts.append(path.read_text(encoding="utf-8"))
    names = checks.settings_named(texts)
    names.update(f"SPECLEDGER_{field.upper()}" for field in Settings.model_fields)
    return names


def problems(
    written: dict[str, str],
    generated: dict[str, str],
    root: Path = ROOT,
    *,
    readme: str | None = None,
) -> list[str]:
    """Everything the strict build refuses, for these pages (docs-relative keys) and the
    README (the repository's unless given)."""
    readme = readme if readme is not None else (root / "README.md").read_text(encoding="utf-8")
    pages = {f"{DOCS}/{path}": text for path, text in {**written, **generated}.items()}
    everything = {"README.md": readme, **pages}
    assets = {f"{DOCS}/{path}" for path in GENERATED_ASSETS}

    def exists(path: str) -> bool:
        return path in assets or (root / path).exists()

    tree = cli_reference.command_tree()
    guide = {"README.md": readme} | {f"{DOCS}/{p}": t for p, t in written.items()}
    found = checks.check_links(everything, exists)
    found += checks.check_commands(everything, tree)
    found += checks.check_paths(everything, exists)
    found += checks.check_documented(guide, generated.get(GENERATED_CLI, ""), tree)
    makefile = (root / "Makefile").read_text(encoding="utf-8")
    found += checks.check_make(everything, checks.make_targets(makefile))
    found += checks.check_nav(load_nav(root), [*written, *generated])
    found += checks.check_settings(
        setting_names(root), f"{DOCS}/{SETTINGS_PAGE}", written.get(SETTINGS_PAGE, "")
    )
    return found
