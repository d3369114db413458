#!/usr/bin/env bash
# Create .venv and install astream with every extra and the test tools.
# torch is pinned to the CPU build that installs quickly; an unpinned torch would pull CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# astream is installed editable: only a change to the dependencies (pyproject.toml, the
# constraints, this script) needs pip again. The stamp records what the last install used.
stamp=$(cat pyproject.toml scripts/constraints.txt scripts/setup.sh | sha256sum | cut -c1-64)
if [ "$(cat .venv/.astream-setup 2>/dev/null)" != "$stamp" ] \
  || ! .venv/bin/python -c "import astream, torch" >/dev/null 2>&1; then
  rm -f .venv/.astream-setup
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q torch==2.13.0
  .venv/bin/python -m pip install -q -c scripts/constraints.txt -e ".[all,test,trainers,spark,ray]"
  echo "$stamp" > .venv/.astream-setup
fi
if [ "${1:-}" = "--emulators" ]; then
  # Azurite (Azure Blob emulator) from npm, 3.35.0: 3.36+ needs Node 21+.
  if [ ! -x .tools/node_modules/.bin/azurite ]; then
    mkdir -p .tools
    (cd .tools && npm install --silent --no-audit --no-fund --prefix . azurite@3.35.0 >/dev/null)
  fi
fi
