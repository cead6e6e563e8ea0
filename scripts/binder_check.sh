#!/usr/bin/env bash
# Tests the Binder recipe (binder/) the way repo2docker applies it, in a fresh venv:
# requirements -> postBuild -> both extensions enabled -> the quickstart notebook runs.
# The PyTorch CPU index line is dropped (not reachable here); constraints.txt pins
# torch instead. pip's cache is reused, so a second run is much faster.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
start=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}/distrain-binder-XXXXXX")
trap 'rm -rf "$work"' EXIT
step() { echo "binder-check [$((SECONDS - start))s] $*"; }

step "fresh venv in $work"
python3 -m venv "$work/venv"
export PATH="$work/venv/bin:$PATH" VIRTUAL_ENV="$work/venv"
# no .pyc compilation at install time (torch alone has thousands of modules)
export PIP_CONSTRAINT="$repo/constraints.txt" PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_COMPILE=1
grep -v '^--' binder/requirements.txt > "$work/requirements.txt"

step "binder/requirements.txt"
pip install -qq -r "$work/requirements.txt"
step "binder/postBuild (pip install .)"
bash binder/postBuild > "$work/postBuild.log" 2>&1 || { cat "$work/postBuild.log"; exit 1; }
step "nbclient (to run the notebook)"
pip install -qq nbclient

strip() { sed 's/\x1b\[[0-9;]*m//g'; }
labext=$(jupyter labextension list 2>&1 | strip)
serverext=$(jupyter server extension list 2>&1 | strip)
echo "$labext" | grep -E 'jupyter-disttrain v[0-9.]+ enabled +OK' \
  || { echo "lab extension not enabled:"; echo "$labext"; exit 1; }
echo "$serverext" | grep -E 'jupyter_disttrain.server enabled' \
  && echo "$serverext" | grep -E 'jupyter_disttrain.server +OK' \
  || { echo "server extension not enabled:"; echo "$serverext"; exit 1; }

step "run notebooks/01-quickstart.ipynb"
# Its launcher ends with it (no linger): the venv it runs from is removed at the end. Its
# temporary files (torch's compile cache among them) go in the work folder, removed with it.
mkdir "$work/tmp"
TMPDIR="$work/tmp" DISTRAIN_HOME="$work/home" DISTRAIN_LINGER=0 python scripts/demo.py notebooks/01-quickstart.ipynb > "$work/demo.log" 2>&1 \
  || { cat "$work/demo.log"; exit 1; }
tail -n 3 "$work/demo.log"
step "binder recipe OK"
