#!/usr/bin/env bash
# Client-compatibility tests for switchyard, against a switchyard binary in front of the
# scripted fake-llm upstream: the official `openai` SDKs for Python (python/) and Node (node/),
# the OpenAI Agents SDKs for Python (python/) and JavaScript (agents-js/), LangChain
# (langchain/, `langchain-openai` with the Responses API), the Vercel AI SDK (vercel/) and
# Codex CLI (codex/, `codex exec`).
#
#   bash tests/compat/run.sh        (from the repository root, after `cargo build --release`)
#
# Binaries: target/release/{switchyard,fake-llm}, or SWITCHYARD_BIN / FAKE_LLM_BIN.
# Installs its own dependencies (tests/compat/.venv for python/ and langchain/, node_modules in
# each Node folder) and only reinstalls them when the pinned requirements change. Exits non-zero
# on any failure.
set -euo pipefail

COMPAT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$COMPAT_DIR/../.." && pwd)"
VENV="$COMPAT_DIR/.venv"
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
# Each Node client has a folder of its own with exact pins; reinstalled when they change.
NODE_SUITES=(node agents-js vercel codex)
for suite in "${NODE_SUITES[@]}"; do
  dir="$COMPAT_DIR/$suite"
  stamp="$(fingerprint "$dir/package.json" "$dir/package-lock.json"; node --version)"
  if [[ ! -d "$dir/node_modules" || "$(cat "$dir/node_modules/.compat-stamp" 2>/dev/null)" != "$stamp" ]]; then
    say "npm ci in $dir"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    printf '%s' "$stamp" > "$dir/node_modules/.compat-stamp"
  fi
done

# ---------------------------------------------------------------- run
declare -A status
versions() { "$VENV/bin/python" -c 'import importlib.metadata as m, sys; print(", ".join(f"{p} {m.version(p)}" for p in sys.argv[1:]))' "$@"; }
say "Python: $(versions openai openai-agents) with pytest"
(cd "$COMPAT_DIR/python" && timeout "$RUN_TIMEOUT" "$VENV/bin/python" -m pytest -W error -v) && status[python]=0 || status[python]=$?
say "LangChain: $(versions langchain-openai langchain-core) with pytest"
(cd "$COMPAT_DIR/langchain" && timeout "$RUN_TIMEOUT" "$VENV/bin/python" -m pytest -W error -v) && status[langchain]=0 || status[langchain]=$?

node_version() { node -p "require('$COMPAT_DIR/$1/node_modules/$2/package.json').version"; }
for suite in "${NODE_SUITES[@]}"; do
  case "$suite" in
    node) what="openai $(node_version node openai)" ;;
    agents-js) what="@openai/agents $(node_version agents-js @openai/agents)" ;;
    vercel) what="ai $(node_version vercel ai), @ai-sdk/openai $(node_version vercel @ai-sdk/openai)" ;;
    codex) what="@openai/codex $(node_version codex @openai/codex)" ;;
  esac
  say "Node $(node --version), $suite: $what with node:test"
  (cd "$COMPAT_DIR/$suite" && timeout "$RUN_TIMEOUT" node --test --test-reporter=spec test.mjs) && status[$suite]=0 || status[$suite]=$?
done

say "summary"
failed=0
for suite in python langchain "${NODE_SUITES[@]}"; do
  if (( status[$suite] == 0 )); then
    printf '%-10s passed\n' "$suite:"
  else
    printf '%-10s FAILED (exit %s)\n' "$suite:" "${status[$suite]}"
    failed=1
  fi
done
(( failed == 0 ))
