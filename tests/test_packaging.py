"""A non-editable install migrates: the migrations ship inside the wheel."""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.conftest import ROOT


def _run(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, check=True, capture_output=True, text=True, cwd=cwd, env=env)


def test_an_installed_wheel_migrates_without_the_source_tree(tmp_path: Path) -> None:
    source, wheels, site = tmp_path / "source", tmp_path / "wheels", tmp_path / "site"
    # Build from the files git knows, not the working tree: a stale build/ folder there
    # would hide a file missing from the package.
    listed = _run("git", "ls-files", "-co", "--exclude-standard", cwd=ROOT).stdout.split()
    for name in listed:
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(wheels), str(source))  # fmt: skip
    (wheel,) = wheels.glob("specledger-*.whl")
    _run(
        sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)
    )
    assert (site / "migrations" / "versions").is_dir()
    database = tmp_path / "installed.db"
    env = {
        "PATH": os.environ["PATH"],
        # -S below skips site-packages processing, so the editable install's finder is not
        # loaded: `app` can only come from the wheel, its dependencies from the venv.
        "PYTHONPATH": os.pathsep.join([str(site), sysconfig.get_paths()["purelib"]]),
        "SPECLEDGER_DATABASE_URL": f"sqlite+pysqlite:///{database}",
    }
    cli = (sys.executable, "-S", "-c", "from app.cli import main; main()")
    where = _run(
        sys.executable, "-S", "-c", "import app; print(app.__file__)", env=env, cwd=tmp_path
    )
    assert where.stdout.strip().startswith(str(site))
    _run(*cli, "db", "upgrade", env=env, cwd=tmp_path)
    current = _run(*cli, "db", "current", env=env, cwd=tmp_path).stdout
    revision = current.split()[1]
    assert revision != "(empty)"
    assert current.split() == ["current:", revision, "head:", revision]
