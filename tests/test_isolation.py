"""The suite is isolated from the developer's configuration: no ``.env``, no ``SPECLEDGER_*``."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from platformdirs import user_data_path

from app.settings import Settings, get_settings
from tests.conftest import ROOT

DEFAULT_DATABASE_URL = f"sqlite+pysqlite:///{user_data_path('specledger') / 'specledger.db'}"
LEAKED_URL = "sqlite+pysqlite:///leaked-from-the-developer.db"

CHILD_TEST = textwrap.dedent(
    f"""
    import os

    from app.settings import Settings, get_settings


    def test_sees_no_outer_configuration():
        assert "SPECLEDGER_DATABASE_URL" not in os.environ
        assert "specledger_billing_tag_key" not in os.environ
        assert os.environ["SPECLEDGER_TEST_POSTGRES_URL"] == "kept"
        for settings in (Settings(), get_settings()):
            assert settings.database_url == {DEFAULT_DATABASE_URL!r}
            assert settings.billing_tag_key == "specledger-deployment"
            assert settings.default_currency == "USD"
    """
)


def test_settings_ignore_a_dotenv_file_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text(
        f"SPECLEDGER_DATABASE_URL={LEAKED_URL}\nSPECLEDGER_DEFAULT_CURRENCY=EUR\n"
    )
    get_settings.cache_clear()
    try:
        assert get_settings().database_url == DEFAULT_DATABASE_URL
        assert get_settings().default_currency == "USD"
    finally:
        get_settings.cache_clear()
    assert Settings().database_url == DEFAULT_DATABASE_URL
    # The file itself is valid: read on request, it is picked up.
    assert Settings(_env_file=".env").database_url == LEAKED_URL


def test_no_specledger_variable_of_the_outer_environment_is_visible() -> None:
    assert [
        name
        for name in os.environ
        if name.upper().startswith("SPECLEDGER_") and name != "SPECLEDGER_TEST_POSTGRES_URL"
    ] == []


def _run_child(tmp_path: Path, *plugins: str) -> subprocess.CompletedProcess[str]:
    """A pytest session started with SPECLEDGER_* variables set and a ``.env`` in its cwd."""
    (tmp_path / "test_child.py").write_text(CHILD_TEST)
    (tmp_path / ".env").write_text(f"SPECLEDGER_DATABASE_URL={LEAKED_URL}\n")
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_XDIST_WORKER")},
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "SPECLEDGER_DATABASE_URL": LEAKED_URL,
        "specledger_billing_tag_key": "leaked",
        "SPECLEDGER_TEST_POSTGRES_URL": "kept",
    }
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    for plugin in plugins:
        args += ["-p", plugin]
    return subprocess.run(
        [*args, "test_child.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_session_started_with_specledger_variables_and_a_dotenv_sees_neither(
    tmp_path: Path,
) -> None:
    isolated = _run_child(tmp_path, "tests.conftest")
    assert isolated.returncode == 0, isolated.stdout + isolated.stderr
    assert "1 passed" in isolated.stdout

    # Without this suite's conftest the same child test sees the leak: it can fail.
    leaky = _run_child(tmp_path)
    assert leaky.returncode == 1, leaky.stdout + leaky.stderr
    assert "1 failed" in leaky.stdout
