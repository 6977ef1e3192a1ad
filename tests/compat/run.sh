#!/usr/bin/env bash
# Client-compatibility tests for switchyard: the official `openai` SDKs for Python and Node and
# the OpenAI Agents SDK (`openai-agents`, Python) against a switchyard binary in front of the
# scripted fake-llm upstream.
#
#   bash tests/compat/run.sh        (from the repository root, after `cargo build --release`)
#
# Binaries: target/release/{switchyard,fake-llm}, or SWITCHYARD_BIN / FAKE_LLM_BIN.
# Installs its own dependencies (tests/compat/.venv, tests/compat/node/node_modules) and only
# reinstalls them when the pinned requirements change. Exits non-zero on any failure.
set -euo pipefail

COMPAT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$COMPAT_DIR/../.." && pwd)"
VENV="$COMPAT_DIR/.venv"
NODE_DIR="$COMPAT_DIR/node"
RUN_TIMEOUT="${COMPAT_TIMEOUT:-900}"

export PYTHONDONTWRITEBYTECODE=1
export PIP_DISABLE_PIP_VERSION_CHECK=1
export SWITCHYARD_BIN="${SWITCHYARD_BIN:-$REPO_ROOT/target/release/switchyard}"
export FAKE_LLM_BIN="${FAKE_LLM_BIN:-$REPO_ROOT/target/release/fake-llm}"

say() { printf '\n==> %s\n' "$*"; }

for bin in "$SWITCHYARD_BIN" "$FAKE_LLM_BIN"; do
  if [[ ! -x "$bin" ]]; then
    echo "error: $bin is missing or not executable; run 'cargo build --release' first" >&2
    exit 2
  fi
done

fingerprint() { cat "$@" | sha256sum | cut -d' ' -f1; }

# ---------------------------------------------------------------- Python
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "error: Python >= 3.11 is required ($PYTHON is $("$PYTHON" --version 2>&1))" >&2
  exit 2
fi
py_stamp="$(fingerprint "$COMPAT_DIR/python/requirements.txt"; "$PYTHON" --version)"
if [[ ! -x "$VENV/bin/python" || "$(cat "$VENV/.compat-stamp" 2>/dev/null)" != "$py_stamp" ]]; then
  say "creating $VENV"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --no-input -r "$COMPAT_DIR/python/requirements.txt"
  printf '%s' "$py_stamp" > "$VENV/.compat-stamp"
fi

# ---------------------------------------------------------------- Node
node_major="$(node -p 'process.versions.node.split(".")[0]')"
if (( node_major < 20 )); then
  echo "error: Node >= 20 is required (found $(node --version))" >&2
  exit 2
fi
node_stamp="$(fingerprint "$NODE_DIR/package.json" "$NODE_DIR/package-lock.json"; node --version)"
if [[ ! -d "$NODE_DIR/node_modules" || "$(cat "$NODE_DIR/node_modules/.compat-stamp" 2>/dev/null)" != "$node_stamp" ]]; then
  say "npm ci in $NODE_DIR"
  (cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error)
  printf '%s' "$node_stamp" > "$NODE_DIR/node_modules/.compat-stamp"
fi

# ---------------------------------------------------------------- run
py_status=0
say "Python: $("$VENV/bin/python" -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("openai", "openai-agents")))') with pytest"
(cd "$COMPAT_DIR/python" && timeout "$RUN_TIMEOUT" "$VENV/bin/python" -m pytest -W error -v) || py_status=$?

node_status=0
say "Node $(node --version): openai $(node -p "require('$NODE_DIR/node_modules/openai/package.json').version") with node:test"
(cd "$NODE_DIR" && timeout "$RUN_TIMEOUT" node --test --test-reporter=spec test.mjs) || node_status=$?

say "summary"
(( py_status == 0 )) && echo "python: passed" || echo "python: FAILED (exit $py_status)"
(( node_status == 0 )) && echo "node:   passed" || echo "node:   FAILED (exit $node_status)"
(( py_status == 0 && node_status == 0 ))
