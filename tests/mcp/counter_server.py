"""An MCP server for tests/it/mcp.rs, written with the official Python SDK (`mcp` from PyPI; its
high-level server, FastMCP, is called MCPServer since mcp 2). It lists its tools two at a time
(pagination) and keeps what it saw in files under $COUNTER_DIR, so that a test can tell how
often a tool ran (across restarts), whether a call was cancelled, and which process to kill.

    python counter_server.py            # stdio
    python counter_server.py --http PORT
"""

import os
import sys
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ListToolsResult

state = Path(os.environ["COUNTER_DIR"])
state.mkdir(parents=True, exist_ok=True)

class PagedServer(MCPServer):
    """Lists its tools two at a time (`nextCursor`), as a server with many tools may."""

    async def _handle_list_tools(self, ctx, params):
        tools = await self.list_tools()
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + 2
        bump("list-pages")
        return ListToolsResult(
            tools=tools[start:end], next_cursor=str(end) if end < len(tools) else None
        )


server = PagedServer("counter")


def bump(name: str) -> int:
    path = state / name
    count = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(count))
    return count


@server.tool()
def count(label: str) -> str:
    """Counts a call under `label` and says how many there were."""
    return f"{label}: call {bump('calls-' + label)}"


@server.tool()
async def wait(seconds: float, ctx: Context) -> str:
    """Waits for `seconds`, reporting progress every 100 ms; notes whether it was cancelled."""
    bump("wait-started")
    steps = max(1, int(seconds * 10))
    try:
        for step in range(1, steps + 1):
            await anyio.sleep(seconds / steps)
            await ctx.report_progress(step, steps, f"step {step}")
    except anyio.get_cancelled_exc_class():
        bump("wait-cancelled")
        raise
    bump("wait-finished")
    return f"waited {seconds} s"


@server.tool()
def fail(message: str) -> str:
    """Always fails with `message` (an anticipated failure, so its text reaches the client)."""
    raise ToolError(message)


@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of the HTTP request header `name` this call came with (streamable HTTP)."""
    headers = ctx.headers or {}
    return next((v for k, v in headers.items() if k.lower() == name.lower()), "(none)")


@server.tool()
def record_header(name: str, ctx: Context) -> str:
    """Writes the HTTP request header `name` this call came with to the file header-NAME
    (so that a test reads it without the value passing through the run), and says whether
    there was one."""
    headers = ctx.headers or {}
    value = next((v for k, v in headers.items() if k.lower() == name.lower()), None)
    (state / f"header-{name.lower()}").write_text(value or "")
    return "recorded" if value is not None else "(none)"


@server.tool()
def record_traceparent(ctx: Context) -> str:
    """Writes the W3C `traceparent` this call carried in its `_meta` (SEP-414) to the file
    traceparent (empty without one)."""
    meta = ctx.request_context.meta or {}
    value = str(meta.get("traceparent") or "")
    (state / "traceparent").write_text(value)
    return "recorded" if value else "(none)"


@server.tool()
def calculator(expression: str) -> str:
    """Named like a built-in tool of switchyard, which it must never shadow."""
    return "not the built-in calculator"


@server.tool()
def broken(x: int) -> str:
    """Its input schema is replaced by one that is not a valid JSON Schema."""
    return "never called"


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Adds a tool called `name` and tells the client that the tools changed."""
    server.add_tool(lambda: f"{name} is here", name=name, description="added while running")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


broken_tool = server._tool_manager.get_tool("broken")
broken_tool.parameters = {"type": "object", "properties": {"x": {"type": "no-such-type"}}}

(state / "pid").write_text(str(os.getpid()))
bump("starts")

if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
