#!/usr/bin/env bash
# Installs the MCP servers tests/it/mcp.rs runs against, none of them written by this project:
# the reference server @modelcontextprotocol/server-everything (npm) and the official Python SDK
# (`mcp` from PyPI, for tests/mcp/counter_server.py). Idempotent and quick once installed.
#
# Where: $SWITCHYARD_MCP_CACHE, else ~/.cache/switchyard-mcp (tests/it/mcp.rs looks in the same
# place). Versions are pinned so that a new release cannot change what the tests see.
set -euo pipefail

EVERYTHING_VERSION="2026.8.31"
PYTHON_MCP_VERSION="2.3.0"

cache="${SWITCHYARD_MCP_CACHE:-$HOME/.cache/switchyard-mcp}"
mkdir -p "$cache"

everything="$cache/npm/node_modules/@modelcontextprotocol/server-everything"
if [ "$(cat "$cache/npm/.installed" 2>/dev/null)" != "$EVERYTHING_VERSION" ]; then
  echo "installing @modelcontextprotocol/server-everything@$EVERYTHING_VERSION into $cache/npm"
  mkdir -p "$cache/npm"
  npm install --prefix "$cache/npm" --no-audit --no-fund --loglevel=error \
    "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION"
  echo "$EVERYTHING_VERSION" > "$cache/npm/.installed"
fi
test -f "$everything/package.json"

if [ "$(cat "$cache/venv/.installed" 2>/dev/null)" != "$PYTHON_MCP_VERSION" ]; then
  echo "installing mcp==$PYTHON_MCP_VERSION (PyPI) into $cache/venv"
  rm -rf "$cache/venv"
  python3 -m venv "$cache/venv"
  "$cache/venv/bin/pip" install --quiet --disable-pip-version-check "mcp==$PYTHON_MCP_VERSION"
  echo "$PYTHON_MCP_VERSION" > "$cache/venv/.installed"
fi
"$cache/venv/bin/python" -c 'from mcp.server.mcpserver import MCPServer'

echo "MCP test servers ready in $cache"
