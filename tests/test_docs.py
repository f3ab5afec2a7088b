"""The README documents every setting (datasette's test_docs idea)."""

from app.settings import Settings
from tests.conftest import ROOT


def test_every_setting_is_in_the_readme_table() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in Settings.model_fields:
        assert f"| `SPECLEDGER_{name.upper()}` |" in readme, name


def test_readme_quick_start_has_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme
    assert "make test" in readme
