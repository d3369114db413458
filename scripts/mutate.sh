#!/usr/bin/env bash
# Mutation testing of the invariant-holding modules (mutmut 3): see scripts/mutate.py.
#   bash scripts/mutate.sh astream/core/eviction.py     one module
#   bash scripts/mutate.sh --all                        every module it knows
# Results land in mutation/ (committed); the scratch copies in .mutate/ (ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --emulators
.venv/bin/python -m pip install -q -c scripts/constraints.txt "mutmut==3.8.1" 2>&1 | grep -v "^WARNING: Location" || true
exec .venv/bin/python scripts/mutate.py "$@"
