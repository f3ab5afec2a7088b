#!/usr/bin/env bash
# The FinOps Foundation's focus-validator in its own Python 3.12 virtual environment.
# focus-validator 2.x needs Python >= 3.12; the project runs on 3.11, so it gets a side venv.
# Python 3.12 comes from (first found): $FOCUS_PYTHON, pyenv's 3.12.1, python3.12 on PATH.
set -euo pipefail
venv="${1:-.venv-focus}"
version="2.2.1"
stamp="$venv/.installed-$version"
[ -f "$stamp" ] && exit 0

python="${FOCUS_PYTHON:-}"
if [ -z "$python" ] && command -v pyenv >/dev/null 2>&1; then
    candidate="$(pyenv root)/versions/3.12.1/bin/python"
    [ -x "$candidate" ] && python="$candidate"
fi
if [ -z "$python" ] && command -v python3.12 >/dev/null 2>&1 && python3.12 -c '' 2>/dev/null; then
    python="$(command -v python3.12)"
fi
if [ -z "$python" ]; then
    cat >&2 <<'MSG'
focus-validator needs Python 3.12, and none was found (tried $FOCUS_PYTHON, pyenv's 3.12.1,
python3.12 on PATH). Get one of:
  pyenv install 3.12.1                 (https://github.com/pyenv/pyenv), or
  uv python install 3.12 && export FOCUS_PYTHON="$(uv python find 3.12)", or
  your distribution's python3.12 package (Debian 13, Ubuntu 24.04: apt-get install python3.12-venv)
then run `make focus-validator` again.
MSG
    exit 1
fi
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
# pyarrow>=21 needs NumPy 2, but focus-validator pins numpy 1.26 (reference/focus.md).
"$venv/bin/python" -m pip install --quiet "focus-validator==$version" "pyarrow<21"
touch "$stamp"
