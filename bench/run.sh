#!/usr/bin/env bash
# Benchmarks, from a fresh checkout: bash bench/run.sh
# Builds the release binaries, runs switchyard against the fake upstream on SQLite and (when a
# local PostgreSQL answers) on PostgreSQL, and prints markdown tables.
#   BENCH_REATTACHES (default 500)  BENCH_SECONDS per load step (default 10)
#   BENCH_RATE open-loop runs/s (default 500)  BENCH_CONCURRENCY closed-loop runs at once (default 32)
#   BENCH_PAUSE_RUNS runs per pause line (default 300)  BENCH_IDLE_STREAMS streams held open (default 10000)
#   BENCH_BACKENDS which backends, in order (default "sqlite postgres")
#   BENCH_PG_SSLMODE the PostgreSQL connection's sslmode (default disable)
#   PGHOST/PGPORT/PGUSER (default 127.0.0.1/5432/postgres)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

REATTACHES="${BENCH_REATTACHES:-500}"
SECONDS_PER_STEP="${BENCH_SECONDS:-10}"
RATE="${BENCH_RATE:-500}"
CONCURRENCY="${BENCH_CONCURRENCY:-32}"
PAUSE_RUNS="${BENCH_PAUSE_RUNS:-300}"
IDLE_STREAMS="${BENCH_IDLE_STREAMS:-10000}"
BACKENDS="${BENCH_BACKENDS:-sqlite postgres}"
PGHOST="${PGHOST:-127.0.0.1}"; PGPORT="${PGPORT:-5432}"; PGUSER="${PGUSER:-postgres}"
work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [[ -n "${pgdb:-}" ]] && psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d test -qc "DROP DATABASE IF EXISTS $pgdb WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

cargo build --release --quiet -p switchyard -p fake-llm -p switchyard-bench

# Waits for "pattern" in a log file and prints the address after it.
address_in() {
  local file=$1 pattern=$2
  for _ in $(seq 1 "${3:-200}"); do
    if grep -q "$pattern" "$file" 2>/dev/null; then
      grep -m1 -o "$pattern[^ ]*" "$file" | sed "s|$pattern||; s|\"||g"
      return 0
    fi
    sleep 0.05
  done
  echo "timed out waiting for $pattern in $file" >&2
  return 1
}

# The upstream answers every request with 20 text deltas at once (never the bottleneck); a
# request that offers tools first gets 3 turns of two current_time calls each.
target/release/fake-llm --listen 127.0.0.1:0 --deltas 20 --tool-turns 3 > "$work/fake.log" 2>&1 &
pids+=($!)
upstream="http://$(address_in "$work/fake.log" "listening on http://")/v1"
# The slow upstream of idle-streams: a first delta at once, the second 30 s later.
target/release/fake-llm --listen 127.0.0.1:0 --deltas 2 --inter-token-ms 30000 > "$work/slow.log" 2>&1 &
pids+=($!)
slow="http://$(address_in "$work/slow.log" "listening on http://")/v1"
# Two tool servers for the HTTP tool lines, with the same tool at the fake upstream's /tool: one
# read-only, one whose calls are saved as started (as any tool with effects).
tools_config="$work/tools.toml"
for server in read_only saved; do
  cat >> "$tools_config" <<TOML
[[tool_servers.bench_$server.tools]]
name = "stamp_$server"
parameters = { type = "object" }
url = "${upstream%/v1}/tool"
read_only = $([[ $server == read_only ]] && echo true || echo false)
TOML
done

# PostgreSQL's autovacuum analyzes and vacuums tables as they change; where a server runs without
# it (this machine's does), the tables are analyzed and vacuumed after each loaded line instead,
# as autovacuum would have, so that the figures are those of a maintained database.
upkeep() {
  local label=$1
  [[ "$label" == postgres && "${autovacuum:-on}" != on ]] || return 0
  psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d "$pgdb" -qc "VACUUM (ANALYZE)" > /dev/null
}

bench_on() {
  local label=$1 url=$2
  # Streams held open need a descriptor each (and the generator one per stream).
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  # Requests carry an API key, as in production: its check is part of what is measured. The
  # database first (`keys` never makes one).
  SWITCHYARD__DATABASE__URL="$url" target/release/switchyard migrate > /dev/null 2>&1
  SWITCHYARD_API_KEY="$(SWITCHYARD__DATABASE__URL="$url" target/release/switchyard keys create --tenant bench --name bench 2>/dev/null)"
  export SWITCHYARD_API_KEY
  SWITCHYARD__SERVER__PORT=0 SWITCHYARD__DATABASE__URL="$url" SWITCHYARD__LLM__BASE_URL="$upstream" \
    RUST_LOG=warn,switchyard::app=info target/release/switchyard --config "$tools_config" > "$work/$label.log" 2>&1 &
  local pid=$!
  pids+=($pid)
  local address
  address="$(address_in "$work/$label.log" "address=")"
  echo
  echo "### text on $label: streamed runs of 20 deltas; upstream = the same load sent to the fake upstream directly"
  echo
  target/release/switchyard-bench load-header
  local load=(--duration-s "$SECONDS_PER_STEP")
  target/release/switchyard-bench load --base "$upstream" --target upstream --concurrency "$CONCURRENCY" "${load[@]}"
  target/release/switchyard-bench load --base "http://$address" --target switchyard --concurrency "$CONCURRENCY" --pid "$pid" "${load[@]}"
  upkeep "$label"
  target/release/switchyard-bench load --base "$upstream" --target upstream --rate "$RATE" "${load[@]}"
  target/release/switchyard-bench load --base "http://$address" --target switchyard --rate "$RATE" --pid "$pid" "${load[@]}"
  upkeep "$label"
  echo
  echo "### tools on $label: three model turns with two tool calls each, then 20 deltas; one run at a time"
  echo
  echo "tools: the builtin current_time (read-only: started at once). http-tools: an HTTP tool at the fake upstream, read-only."
  echo "http-tools-saved: the same HTTP tool, not read-only: each call is saved as started first, as a tool with effects is."
  echo "Per tool-loop iteration added ≈ (tools total p50 − text total p50) / 3 − one upstream turn."
  echo
  target/release/switchyard-bench load-header
  target/release/switchyard-bench load --base "$upstream" --target upstream --concurrency 1 "${load[@]}"
  target/release/switchyard-bench load --base "http://$address" --target switchyard --concurrency 1 --pid "$pid" "${load[@]}"
  for scenario in tools http-tools http-tools-saved; do
    target/release/switchyard-bench load --base "http://$address" --target switchyard --scenario "$scenario" --concurrency 1 --pid "$pid" "${load[@]}"
  done
  echo
  echo "### stream resume on $label: reattach to a stored log (starting_after=3) → first replayed event"
  echo
  target/release/switchyard-bench resume --base "http://$address" --reattaches "$REATTACHES"
  echo
  echo "### pause on $label: each run pauses 3 times (two calls of a client-declared function each), resumed with streamed submit_tool_outputs"
  echo
  target/release/switchyard-bench pause-header
  target/release/switchyard-bench pause --upstream "$upstream" --runs "$PAUSE_RUNS"
  target/release/switchyard-bench pause --base "http://$address" --runs "$PAUSE_RUNS" --concurrency 1 --pid "$pid"
  target/release/switchyard-bench pause --base "http://$address" --runs "$PAUSE_RUNS" --concurrency 16 --pid "$pid"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  instructions_on "$label" "$url"
  # A fresh instance for idle-streams, so its memory before the streams is a clean baseline.
  # HTTP/2 to the upstream: one process may hold at most 20,000 descriptors here, and 10,000
  # client connections plus 10,000 upstream connections would not fit. The service serves
  # 8,192 connections at once by default (`server.max_connections`); beyond, a stream waits
  # to be accepted until another closes, and the bench would count it only then.
  SWITCHYARD__SERVER__PORT=0 SWITCHYARD__DATABASE__URL="$url" SWITCHYARD__LLM__BASE_URL="$slow" \
    SWITCHYARD__LLM__HTTP2=true SWITCHYARD__SERVER__SHUTDOWN_GRACE_SECONDS=0 \
    SWITCHYARD__SERVER__MAX_CONNECTIONS="$((IDLE_STREAMS + 64))" \
    RUST_LOG=warn,switchyard::app=info target/release/switchyard > "$work/$label-idle.log" 2>&1 &
  pid=$!
  pids+=($pid)
  address="$(address_in "$work/$label-idle.log" "address=")"
  echo
  echo "### idle-streams on $label: $IDLE_STREAMS streams held open at once (each past its first delta, waiting for the next)"
  echo
  target/release/switchyard-bench idle --base "http://$address" --streams "$IDLE_STREAMS" --pid "$pid"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

# Instructions the service executes per text run, counted by callgrind: unlike the times, the
# count does not move with the machine's load, so it shows a change in CPU cost that the
# latencies would hide. Skipped when valgrind is not installed.
instructions_on() {
  local label=$1 url=$2
  echo
  echo "### instructions per run on $label: text runs, 4 at once, under callgrind (counted after a warm-up)"
  echo
  if ! command -v valgrind > /dev/null || ! command -v callgrind_control > /dev/null; then
    echo "(valgrind is not installed: skipped)"
    return 0
  fi
  SWITCHYARD__SERVER__PORT=0 SWITCHYARD__DATABASE__URL="$url" SWITCHYARD__LLM__BASE_URL="$upstream" \
    RUST_LOG=warn,switchyard::app=info valgrind --tool=callgrind --callgrind-out-file="$work/$label.callgrind" \
    target/release/switchyard > "$work/$label-callgrind.log" 2>&1 &
  local pid=$!
  pids+=($pid)
  local address
  address="$(address_in "$work/$label-callgrind.log" "address=" 1200)"
  target/release/switchyard-bench load --base "http://$address" --target switchyard --concurrency 4 --duration-s 2 > /dev/null
  callgrind_control --zero "$pid" > /dev/null 2>&1
  local row runs total
  row="$(target/release/switchyard-bench load --base "http://$address" --target switchyard --concurrency 4 --duration-s "$SECONDS_PER_STEP")"
  kill -INT "$pid"
  wait "$pid" 2>/dev/null || true
  runs="$(awk -F'|' '{gsub(/ /, "", $4); print $4}' <<< "$row")"
  total="$(callgrind_annotate "$work/$label.callgrind" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(/,/, "", $1); print $1}')"
  echo "| runs | service instructions | per run |"
  echo "|---|---|---|"
  echo "| $runs | $total | **$((total / runs))** |"
}

echo "## switchyard benchmarks — $(date -u +%Y-%m-%d), $(nproc) cores, $(uname -m); generator, fake upstream and service on one machine"
for backend in $BACKENDS; do
  case "$backend" in
    sqlite) bench_on sqlite "sqlite://$work/bench.db" ;;
    postgres)
      if pg_isready -h "$PGHOST" -p "$PGPORT" -q 2>/dev/null; then
        pgdb="switchyard_bench_$$"
        psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d test -qc "CREATE DATABASE $pgdb"
        autovacuum="$(psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d test -Atc "SHOW autovacuum")"
        [[ "$autovacuum" == on ]] || { echo; echo "(PostgreSQL's autovacuum is off on this server: bench/run.sh runs VACUUM (ANALYZE) after each loaded line in its stead)"; }
        # Without TLS (BENCH_PG_SSLMODE changes it): the default, `prefer`, encrypts whenever
        # the server offers TLS, as this machine's does, which costs a text run ~10 % more
        # instructions and would make the figures incomparable with the earlier ones.
        bench_on postgres "postgres://$PGUSER@$PGHOST:$PGPORT/$pgdb?sslmode=${BENCH_PG_SSLMODE:-disable}"
      else
        echo; echo "(PostgreSQL not reachable on $PGHOST:$PGPORT: skipped)"
      fi
      ;;
    *) echo "unknown backend in BENCH_BACKENDS: $backend" >&2; exit 2 ;;
  esac
done
