#!/usr/bin/env bash
# Creates or updates the project environment .venv from requirements.txt: the pinned torch from
# PyPI that Cumulus builds against, and the Python packages its tests use. Called by `make run`
# and `make test` (after install-deps.sh). A second run installs nothing: .venv/cumulus-requirements
# holds the requirements it was made from. CUMULUS_VENV names another directory.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${CUMULUS_VENV:-.venv}
stamp=$venv/cumulus-requirements

if [[ -x $venv/bin/python ]] && [[ -f $stamp ]] && cmp -s requirements.txt "$stamp"; then
  exit 0
fi

# The interpreter the environment is made from: the first python3 on PATH that can make one with
# pip, else Debian's (install-deps.sh installs python3-venv and python3-dev).
base=""
for candidate in python3 /usr/bin/python3; do
  exe=$(command -v "$candidate" 2>/dev/null) || continue
  if "$exe" -c 'import ensurepip, venv, sysconfig, os, sys
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
      2>/dev/null; then
    base=$exe
    break
  fi
done
if [[ -z $base ]]; then
  echo "cumulus: no python3 here can make a virtual environment with Python's headers;" \
       "install python3-venv and python3-dev (scripts/install-deps.sh does)" >&2
  exit 1
fi

if [[ ! -x $venv/bin/python ]]; then
  echo "cumulus: making the project environment $venv from $base ($("$base" --version 2>&1))"
  "$base" -m venv "$venv"
fi
echo "cumulus: installing requirements.txt into $venv (torch and its libraries: about 5 GB the" \
     "first time)"
# Progress: pip's own bars on a terminal, one line a package otherwise (CI's log).
progress=off
[[ -t 1 ]] && progress=on
if ! "$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar "$progress" \
       -r requirements.txt; then
  echo "cumulus: pip could not install requirements.txt into $venv: see its message above" \
       "(no route to PyPI? set PIP_INDEX_URL to a mirror)" >&2
  exit 1
fi
cp requirements.txt "$stamp"
"$venv/bin/python" -c 'import torch; print("cumulus: torch", torch.__version__, "in", torch.__file__.rsplit("/", 2)[0])'
