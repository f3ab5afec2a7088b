"""The data folder is absolute: a command run from another folder opens the same database,
and a command that creates a new database says so."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from platformdirs import user_data_path

from app.settings import Settings
from tests.conftest import ROOT


def test_the_default_data_folder_is_the_platforms_user_data_folder() -> None:
    settings = Settings()
    assert settings.data_dir == user_data_path("specledger")
    assert settings.data_dir.is_absolute()
    assert settings.database_url == f"sqlite+pysqlite:///{settings.data_dir / 'specledger.db'}"
    assert settings.engines_dir.is_absolute()
    assert settings.models_dir.is_absolute()


def test_a_relative_data_folder_is_taken_from_where_the_command_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPECLEDGER_DATA_DIR", "ledger-data")
    settings = Settings()
    assert settings.data_dir == tmp_path / "ledger-data"
    assert settings.database_url == f"sqlite+pysqlite:///{tmp_path / 'ledger-data'}/specledger.db"


def test_an_explicit_database_url_wins_over_the_data_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SPECLEDGER_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("SPECLEDGER_DATABASE_URL", "sqlite+pysqlite:///elsewhere.db")
    assert Settings().database_url == "sqlite+pysqlite:///elsewhere.db"


def _specledger(args: list[str], cwd: Path, data: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SPECLEDGER_")}
    env["SPECLEDGER_DATA_DIR"] = str(data)
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-c", "from app.cli import main; main()", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_new_database_is_announced_once_and_found_again_from_another_folder(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    created = _specledger(["deployments", "add", "smol"], first, data)
    assert created.returncode == 0, created.stderr
    assert "creating a new, empty database" in created.stderr
    assert str(data / "specledger.db") in created.stderr.replace("\n", "")

    listed = _specledger(["deployments", "list"], second, data)
    assert listed.returncode == 0, listed.stderr
    assert "smol" in listed.stdout
    assert "new, empty database" not in listed.stderr
