#!/usr/bin/env bash
# Create .venv and install astream into it.
#
#   bash scripts/setup.sh               every extra and the test tools (what scripts/test.sh needs)
#   bash scripts/setup.sh --demo        only what `astream demo` needs: the [demo] extra
#   bash scripts/setup.sh --emulators   everything, and Azurite from npm into .tools/
#
# torch is pinned to the CPU build that installs quickly; an unpinned torch would pull CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
level=full
emulators=0
for arg in "$@"; do
  case "$arg" in
    --demo) level=demo ;;
    --emulators) emulators=1 ;;
    *) echo "setup.sh: unknown argument $arg (use --demo or --emulators)" >&2; exit 2 ;;
  esac
done
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# astream is installed editable: only a change to the dependencies (pyproject.toml, the
# constraints, this script) needs pip again. The stamp records what the last install used and
# at which level: a full install serves the demo too; a demo venv is upgraded by a full run.
digest=$(cat pyproject.toml scripts/constraints.txt scripts/setup.sh | sha256sum | cut -c1-64)
have=$(cat .venv/.astream-setup 2>/dev/null || true)
case "$level:$have" in
  "full:$digest full" | "demo:$digest full" | "demo:$digest demo") current=1 ;;
  *) current=0 ;;
esac
if [ "$current" = 0 ] || ! .venv/bin/python -c "import astream, torch" >/dev/null 2>&1; then
  rm -f .venv/.astream-setup
  extras=all,test,trainers,spark,ray,sftp
  compile=()
  # the demo's venv skips pip's bytecode pass (~190 MB for modules the demo never imports):
  # what it imports is compiled on first import
  [ "$level" = demo ] && extras=demo && compile=(--no-compile)
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q "${compile[@]}" torch==2.13.0
  .venv/bin/python -m pip install -q "${compile[@]}" -c scripts/constraints.txt -e ".[$extras]"
  echo "$digest $level" > .venv/.astream-setup
fi
# The reference, mosaicml-streaming 0.13.0, in a venv of its own (.venv-ref), for the
# differential test (tests/order/test_diff_reference.py; under a minute to install). Only what
# `import streaming` loads, not its cloud SDKs; torchvision is a stub that scripts/peer.py puts
# first on PYTHONPATH (the PyPI build does not load beside the CPU torch). Not for --demo;
# ASTREAM_NO_REF=1 skips it too, and the test then skips.
ref_pkgs='torch==2.13.0 numpy==2.1.3 xxhash<4 zstd<2 Brotli python-snappy<1 tqdm<5 catalogue<3 pillow transformers<5'
ref_stamp=$(echo "mosaicml-streaming==0.13.0 $ref_pkgs" | sha256sum | cut -c1-64)
if [ "$level" = full ] && [ "${ASTREAM_NO_REF:-0}" != 1 ] \
  && [ "$(cat .venv-ref/.astream-ref 2>/dev/null)" != "$ref_stamp" ]; then
  rm -rf .venv-ref
  "$PY" -m venv .venv-ref
  # shellcheck disable=SC2086  # the list splits into its requirements
  .venv-ref/bin/python -m pip install -q $ref_pkgs
  .venv-ref/bin/python -m pip install -q --no-deps mosaicml-streaming==0.13.0
  echo "$ref_stamp" > .venv-ref/.astream-ref
fi
if [ "$emulators" = 1 ]; then
  # Azurite (Azure Blob emulator) from npm, 3.35.0: 3.36+ needs Node 21+.
  if [ ! -x .tools/node_modules/.bin/azurite ]; then
    mkdir -p .tools
    (cd .tools && npm install --silent --no-audit --no-fund --prefix . azurite@3.35.0 >/dev/null)
  fi
fi
