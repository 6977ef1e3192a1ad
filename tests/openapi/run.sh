#!/usr/bin/env bash
# The OpenAPI document against the service: schemathesis reads GET /openapi.json from a
# running switchyard (release binary, fresh SQLite database, fake-llm upstream), generates a
# bounded number of requests for every operation from it, and checks each answer: no server
# error (5xx), and status code, content type, headers and body as the document says.
#
#   bash tests/openapi/run.sh        (from anywhere, after `cargo build --release --workspace`)
#
# Binaries: target/release/{switchyard,fake-llm}, or SWITCHYARD_BIN / FAKE_LLM_BIN.
# Installs schemathesis (pinned in requirements.txt) into tests/openapi/.venv, only again when
# the pins change. Settings: schemathesis.toml beside this script, hooks.py (steers generated
# ids and keys); OPENAPI_MAX_EXAMPLES and OPENAPI_SEED override the examples per operation and
# the seed. Exits non-zero on any failure.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HERE/../.." && pwd)"
VENV="$HERE/.venv"
SWITCHYARD_BIN="${SWITCHYARD_BIN:-$REPO_ROOT/target/release/switchyard}"
FAKE_LLM_BIN="${FAKE_LLM_BIN:-$REPO_ROOT/target/release/fake-llm}"
MAX_EXAMPLES="${OPENAPI_MAX_EXAMPLES:-50}"
SEED="${OPENAPI_SEED:-20260101}"
# A hard stop, should the run hang (it takes well under a minute).
RUN_TIMEOUT="${OPENAPI_TIMEOUT:-300}"

export PYTHONDONTWRITEBYTECODE=1
export PIP_DISABLE_PIP_VERSION_CHECK=1

say() { printf '\n==> %s\n' "$*"; }

for bin in "$SWITCHYARD_BIN" "$FAKE_LLM_BIN"; do
  if [[ ! -x "$bin" ]]; then
    echo "error: $bin is missing or not executable; run 'cargo build --release --workspace' first" >&2
    exit 2
  fi
done

# ---------------------------------------------------------------- schemathesis
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "error: Python >= 3.11 is required ($PYTHON is $("$PYTHON" --version 2>&1))" >&2
  exit 2
fi
stamp="$(sha256sum "$HERE/requirements.txt" | cut -d' ' -f1) $("$PYTHON" --version)"
if [[ ! -x "$VENV/bin/schemathesis" || "$(cat "$VENV/.openapi-stamp" 2>/dev/null)" != "$stamp" ]]; then
  say "creating $VENV"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --no-input -r "$HERE/requirements.txt"
  printf '%s' "$stamp" > "$VENV/.openapi-stamp"
fi

# ---------------------------------------------------------------- services
work="$(mktemp -d)"
pids=()
stop() {
  local status=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if (( status != 0 )); then
    echo "--- switchyard log (last 40 lines) ---"; tail -n 40 "$work/switchyard.log" 2>/dev/null || true
  fi
  rm -rf "$work"
  exit "$status"
}
trap stop EXIT

free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }

# The fake upstream answers every unscripted request at once; with --call-tools a request that
# offers tools calls the first one, so runs also pause and call server tools.
"$FAKE_LLM_BIN" --listen 127.0.0.1:0 --call-tools > "$work/fake-llm.log" 2>&1 &
pids+=($!)
fake_url=""
for _ in $(seq 1 100); do
  fake_url="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$work/fake-llm.log" | head -n1 || true)"
  [[ -n "$fake_url" ]] && break
  sleep 0.1
done
[[ -n "$fake_url" ]] || { echo "error: fake-llm did not start" >&2; cat "$work/fake-llm.log" >&2; exit 1; }

port="$(free_port)"
base="http://127.0.0.1:$port"
export SWITCHYARD__SERVER__HOST=127.0.0.1
export SWITCHYARD__SERVER__PORT="$port"
export SWITCHYARD__DATABASE__URL="sqlite://$work/switchyard.db"
export SWITCHYARD__LLM__BASE_URL="$fake_url/v1"
export SWITCHYARD__LLM__API_KEY=test
export SWITCHYARD__LLM__RETRIES=0
export RUST_LOG="${RUST_LOG:-warn}"

# A key of its own, made as an operator would (every /v1 request needs one): the database
# first (`keys` never makes one), then the key.
"$SWITCHYARD_BIN" migrate > "$work/migrate.log" 2>&1
key="$("$SWITCHYARD_BIN" keys create --tenant openapi --name schemathesis 2> "$work/keys.log")"
"$SWITCHYARD_BIN" > "$work/switchyard.log" 2>&1 &
pids+=($!)
ready=""
for _ in $(seq 1 200); do
  if curl -sf "$base/readyz" > /dev/null 2>&1; then ready=1; break; fi
  sleep 0.1
done
[[ -n "$ready" ]] || { echo "error: switchyard did not become ready" >&2; exit 1; }

# ---------------------------------------------------------------- run
say "schemathesis $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("schemathesis"))') against $base/openapi.json (at most $MAX_EXAMPLES examples per operation, seed $SEED)"
report="$work/report.json"
status=0
(cd "$HERE" && SCHEMATHESIS_HOOKS="$HERE/hooks.py" timeout "$RUN_TIMEOUT" "$VENV/bin/schemathesis" --config-file "$HERE/schemathesis.toml" run \
  "$base/openapi.json" \
  --header "Authorization: Bearer $key" \
  --max-examples "$MAX_EXAMPLES" \
  --seed "$SEED" \
  --report json --report-json-path "$report" \
  --no-color) || status=$?

# The figures, from schemathesis's report; the last line is the plain "N passed, N failed"
# that CI reads (a test case passes when every check passed on it).
say "summary"
"$VENV/bin/python" - "$report" <<'PY' || status=1
import json
import sys

try:
    with open(sys.argv[1]) as file:
        report = json.load(file)
except (OSError, ValueError) as e:
    print(f"no report: {e}")
    sys.exit(1)
# A run that could not start (the document did not load) has no figures.
operations = report.get("operations") or {}
cases = report.get("test_cases") or {}
tested, generated = operations.get("tested", 0), cases.get("generated", 0)
errors = report.get("errors") or []
failed = cases.get("with_failures", 0) + cases.get("errored", 0) + len(errors)
print(f"operations: {tested} tested of {operations.get('total', 0)}")
print(f"test cases: {generated} generated, {cases.get('with_failures', 0)} with failures, {cases.get('errored', 0)} errored")
for failure in report.get("failures") or []:
    print(f"failure {failure['code']} {failure['title']}: {failure['count']} in {', '.join(failure['operations'])}")
for error in errors:
    print(f"error: {error}")
print(f"openapi: {max(generated - failed, 0)} passed, {failed} failed")
sys.exit(1 if failed or tested == 0 else 0)
PY
exit "$status"
