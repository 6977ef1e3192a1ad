#!/usr/bin/env bash
# Browser end-to-end tests of switchyard's run inspector (/ui): pytest with Playwright for
# Python, driving the system's headless Chromium against a switchyard binary in front of the
# scripted fake-llm upstream (the services come from tests/compat/python/harness.py).
#
#   bash tests/ui/run.sh                  the tests (after `cargo build --release`)
#   bash tests/ui/run.sh -k cancel        extra arguments go to pytest
#   bash tests/ui/run.sh --screenshots    writes docs/ui/{list,run}-{light,dark}.png instead
#
# Binaries: target/release/{switchyard,fake-llm}, or SWITCHYARD_BIN / FAKE_LLM_BIN.
# Browser: CHROMIUM (default /usr/bin/chromium, installed with apt-get when missing; Playwright's
# own browser download is not used). UI_CHROMIUM_ARGS adds Chromium flags. Installs its Python
# dependencies in tests/ui/.venv and reinstalls them only when requirements.txt changes. On a
# failure, screenshots and HTML of the open pages are kept in UI_ARTIFACTS (tests/ui/artifacts).
set -euo pipefail

UI_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$UI_DIR/../.." && pwd)"
VENV="$UI_DIR/.venv"
RUN_TIMEOUT="${UI_TIMEOUT:-900}"

export PYTHONDONTWRITEBYTECODE=1
export PIP_DISABLE_PIP_VERSION_CHECK=1
export SWITCHYARD_BIN="${SWITCHYARD_BIN:-$REPO_ROOT/target/release/switchyard}"
export FAKE_LLM_BIN="${FAKE_LLM_BIN:-$REPO_ROOT/target/release/fake-llm}"
export CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
# Never let Playwright look for (or fetch) a browser of its own.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

say() { printf '\n==> %s\n' "$*"; }

screenshots=0
pytest_args=()
for arg in "$@"; do
  case "$arg" in
    --screenshots) screenshots=1 ;;
    *) pytest_args+=("$arg") ;;
  esac
done

for bin in "$SWITCHYARD_BIN" "$FAKE_LLM_BIN"; do
  if [[ ! -x "$bin" ]]; then
    echo "error: $bin is missing or not executable; run 'cargo build --release' first" >&2
    exit 2
  fi
done

# ---------------------------------------------------------------- Chromium
if [[ ! -x "$CHROMIUM" ]]; then
  if [[ "$CHROMIUM" != /usr/bin/chromium ]]; then
    echo "error: CHROMIUM=$CHROMIUM is missing or not executable" >&2
    exit 2
  fi
  say "installing chromium with apt-get"
  sudo=()
  if (( EUID != 0 )); then sudo=(sudo -n); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
fi
# The Debian launcher script may print a harmless shell warning on stderr; keep it out of --version.
chromium_version="$("$CHROMIUM" --version 2>/dev/null || true)"

# ---------------------------------------------------------------- Python
fingerprint() { cat "$@" | sha256sum | cut -d' ' -f1; }

PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "error: Python >= 3.11 is required ($PYTHON is $("$PYTHON" --version 2>&1))" >&2
  exit 2
fi
py_stamp="$(fingerprint "$UI_DIR/requirements.txt"; "$PYTHON" --version)"
if [[ ! -x "$VENV/bin/python" || "$(cat "$VENV/.ui-stamp" 2>/dev/null)" != "$py_stamp" ]]; then
  say "creating $VENV"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --no-input -r "$UI_DIR/requirements.txt"
  printf '%s' "$py_stamp" > "$VENV/.ui-stamp"
fi

versions() { "$VENV/bin/python" -c 'import importlib.metadata as m, sys; print(", ".join(f"{p} {m.version(p)}" for p in sys.argv[1:]))' "$@"; }

# ---------------------------------------------------------------- run
if (( screenshots )); then
  say "screenshots with $(versions playwright) and ${chromium_version:-$CHROMIUM}"
  cd "$UI_DIR"
  timeout "$RUN_TIMEOUT" "$VENV/bin/python" -W error screenshots.py --out "$REPO_ROOT/docs/ui"
  exit 0
fi

# The reference MCP server the approval test runs (pinned; quick once installed).
bash "$REPO_ROOT/tests/mcp/setup.sh" > /dev/null

say "$(versions playwright pytest) with ${chromium_version:-$CHROMIUM}"
cd "$UI_DIR"
timeout "$RUN_TIMEOUT" "$VENV/bin/python" -m pytest -W error -v "${pytest_args[@]}"
