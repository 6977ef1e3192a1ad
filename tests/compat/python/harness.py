"""Process and HTTP helpers for the switchyard client-compatibility tests.

Only the standard library is used here, so that these helpers do not depend on
the HTTP client the `openai` SDK happens to ship with.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]
MODEL = "gpt-4o-mini"
HTTP_TIMEOUT_S = 30.0
STARTUP_TIMEOUT_S = 60.0

# SPEC §4: ids are a prefix followed by a UUIDv7 in lowercase hex. The SPEC does
# not say whether the hyphens of the canonical form are kept, so both are accepted;
# the version nibble (7) and the RFC 4122 variant are checked.
_UUID7 = r"[0-9a-f]{8}-?[0-9a-f]{4}-?7[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}"


def id_pattern(prefix: str) -> re.Pattern[str]:
    return re.compile(rf"^{prefix}_{_UUID7}$")


RESPONSE_ID = id_pattern("resp")
MESSAGE_ID = id_pattern("msg")
FUNCTION_CALL_ID = id_pattern("fc")
MCP_CALL_ID = id_pattern("mcp")
MCP_LIST_TOOLS_ID = id_pattern("mcpl")

# SPEC §6: the compiled-in tool server, executed by switchyard without asking the client.
BUILTIN_SERVER: dict[str, Any] = {"type": "mcp", "server_label": "builtin", "require_approval": "never"}
# SPEC §12, in the order the server lists them.
BUILTIN_TOOL_NAMES = ["current_time", "calculator", "fetch_url"]

# SPEC §4: every key of the Response object, always present.
RESPONSE_KEYS = frozenset(
    """
    id object created_at completed_at status error incomplete_details instructions model
    output parallel_tool_calls previous_response_id tools tool_choice truncation text
    reasoning temperature top_p presence_penalty frequency_penalty top_logprobs
    max_output_tokens max_tool_calls store background service_tier metadata
    safety_identifier prompt_cache_key user usage required_action
    """.split()
)


def binary(env_name: str, name: str) -> Path:
    path = Path(os.environ.get(env_name) or REPO_ROOT / "target" / "release" / name)
    if not path.is_file():
        raise RuntimeError(f"{name} binary not found at {path} (build it, or set {env_name})")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tail(path: Path, lines: int = 200) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log file)"
    kept = text.splitlines()[-lines:]
    return "\n".join(kept) if kept else "(empty)"


# --------------------------------------------------------------------------- HTTP


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


# The API key of each running switchyard, by its base URL (each has a database of its own).
_API_KEYS: dict[str, str] = {}


def api_key_for(url: str) -> str:
    """The API key of the switchyard instance `url` belongs to ("" for other servers)."""
    for base, key in _API_KEYS.items():
        if url.startswith(base):
            return key
    return ""


def request(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> RawResponse:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=HTTP_TIMEOUT_S)
    try:
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        payload = None if body is None else json.dumps(body).encode()
        key = api_key_for(url)
        all_headers = {**({"Authorization": f"Bearer {key}"} if key else {}), **(headers or {})}
        if payload is not None:
            all_headers["Content-Type"] = "application/json"
        conn.request(method, path, body=payload, headers=all_headers)
        resp = conn.getresponse()
        return RawResponse(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    finally:
        conn.close()


@dataclass
class SseEvent:
    """One SSE event block as it was framed on the wire."""

    event: str | None
    id: str | None
    data: str
    comments: list[str] = field(default_factory=list)

    def json(self) -> Any:
        return json.loads(self.data)


@dataclass
class SseStream:
    status: int
    headers: dict[str, str]
    events: list[SseEvent]
    body: bytes = b""

    def payloads(self) -> list[dict[str, Any]]:
        """The JSON of every event before `[DONE]`."""
        return [e.json() for e in self.events if e.data != "[DONE]"]


def parse_sse(text: str) -> list[SseEvent]:
    events: list[SseEvent] = []
    event: str | None = None
    event_id: str | None = None
    data: list[str] = []
    comments: list[str] = []
    for line in text.split("\n"):
        line = line.removesuffix("\r")
        if line == "":
            if data or event is not None or event_id is not None:
                events.append(SseEvent(event, event_id, "\n".join(data), comments))
            event, event_id, data, comments = None, None, [], []
            continue
        if line.startswith(":"):
            comments.append(line)
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "id":
            event_id = value
        elif name == "data":
            data.append(value)
    if data or event is not None:
        events.append(SseEvent(event, event_id, "\n".join(data), comments))
    return events


def sse(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> SseStream:
    """Performs a request and reads the whole SSE body (until the server closes it)."""
    raw = request(method, url, body, {"Accept": "text/event-stream", **(headers or {})})
    if raw.status != 200:
        return SseStream(raw.status, raw.headers, [], raw.body)
    return SseStream(raw.status, raw.headers, parse_sse(raw.body.decode()), raw.body)


# --------------------------------------------------------------------------- fake LLM


def text_turn(*chunks: str, prompt_tokens: int = 5, completion_tokens: int = 2, delay_ms: int = 0) -> dict[str, Any]:
    """A scripted model turn that streams `chunks` as content deltas and stops."""
    steps: list[dict[str, Any]] = []
    for chunk in chunks:
        if delay_ms:
            steps.append({"type": "delay", "ms": delay_ms})
        steps.append({"type": "text", "text": chunk})
    steps.append({"type": "finish", "reason": "stop"})
    steps.append({"type": "usage", "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens})
    return {"steps": steps}


def tool_call_turn(*calls: tuple[str, str, str], prompt_tokens: int = 10, completion_tokens: int = 5) -> dict[str, Any]:
    """A scripted model turn that calls tools, given as (call id, name, JSON arguments).

    The calls are streamed one after the other, as OpenAI streams parallel calls, and each
    argument string is split into two chunks; the turn stops with `tool_calls`.
    """
    steps: list[dict[str, Any]] = []
    for index, (call_id, name, arguments) in enumerate(calls):
        half = len(arguments) // 2
        steps.append({"type": "tool_call", "index": index, "id": call_id, "name": name, "arguments": arguments[:half]})
        steps.append({"type": "tool_args", "index": index, "arguments": arguments[half:]})
    steps.append({"type": "finish", "reason": "tool_calls"})
    steps.append({"type": "usage", "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens})
    return {"steps": steps}


def message_text(message: dict[str, Any]) -> str:
    """The text of a chat-completions message, whether its content is a string or parts."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


def conversation(chat_request: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, text) of every message of an upstream chat-completions request."""
    return [(m["role"], message_text(m)) for m in chat_request["messages"]]


class FakeLLM:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def script(self, *turns: dict[str, Any]) -> None:
        raw = request("POST", f"{self.base_url}/control/turns", list(turns))
        assert raw.status in (200, 201, 204), (raw.status, raw.body)

    def requests(self) -> list[dict[str, Any]]:
        raw = request("GET", f"{self.base_url}/control/requests")
        assert raw.status == 200, (raw.status, raw.body)
        return raw.json()

    def reset(self) -> None:
        raw = request("POST", f"{self.base_url}/control/reset")
        assert raw.status in (200, 204), (raw.status, raw.body)


# --------------------------------------------------------------------------- processes


class Services:
    """fake-llm and switchyard as subprocesses, logs captured to files in `workdir`.

    `settings` are extra `SWITCHYARD__…` variables for switchyard (SPEC §11); `fake_args` extra
    arguments for fake-llm.
    """

    def __init__(
        self, workdir: Path, settings: dict[str, str] | None = None, fake_args: list[str] | None = None
    ) -> None:
        self.workdir = workdir
        self.settings = settings or {}
        self.fake_args = fake_args or []
        self.fake_log = workdir / "fake-llm.log"
        self.switchyard_log = workdir / "switchyard.log"
        self._procs: list[tuple[subprocess.Popen[bytes], Any]] = []
        self.fake_url = ""
        self.base_url = ""
        self.api_key = ""
        # The environment switchyard runs with (set by start()).
        self.env: dict[str, str] = {}

    @property
    def logs(self) -> list[Path]:
        return [self.switchyard_log, self.fake_log]

    def _spawn(self, argv: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
        log_file = open(log, "wb")  # noqa: SIM115 - closed in stop()
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT
        )
        self._procs.append((proc, log_file))
        return proc

    def _failed_start(self, what: str) -> RuntimeError:
        return RuntimeError(
            f"{what}\n--- switchyard log ---\n{tail(self.switchyard_log)}\n--- fake-llm log ---\n{tail(self.fake_log)}"
        )

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SWITCHYARD__", "OPENAI_"))}
        env.setdefault("RUST_LOG", "info")
        env.setdefault("RUST_BACKTRACE", "1")

        fake = self._spawn(
            [str(binary("FAKE_LLM_BIN", "fake-llm")), "--listen", "127.0.0.1:0", *self.fake_args], self.fake_log, env
        )
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self.fake_url:
            match = re.search(rb"listening on (http://127\.0\.0\.1:\d+)", self.fake_log.read_bytes())
            if match:
                self.fake_url = match.group(1).decode()
            elif fake.poll() is not None:
                raise self._failed_start(f"fake-llm exited with status {fake.returncode} before listening")
            elif time.monotonic() > deadline:
                raise self._failed_start("fake-llm did not print its address in time")
            else:
                time.sleep(0.05)

        port = free_port()
        env.update(
            {
                "SWITCHYARD__SERVER__HOST": "127.0.0.1",
                "SWITCHYARD__SERVER__PORT": str(port),
                "SWITCHYARD__DATABASE__URL": f"sqlite://{self.workdir}/s.db",
                "SWITCHYARD__LLM__BASE_URL": f"{self.fake_url}/v1",
                "SWITCHYARD__LLM__API_KEY": "test",
                # Scripted upstream failures are what the tests look at: no retries.
                "SWITCHYARD__LLM__RETRIES": "0",
                **self.settings,
            }
        )
        self.env = env
        # A key of its own (SPEC §2: every /v1 request needs one), made as an operator would:
        # the database first (`keys` never makes one).
        self._command("migrate")
        self.api_key = self.create_key("compat", "suite")
        switchyard = self._spawn([str(binary("SWITCHYARD_BIN", "switchyard"))], self.switchyard_log, env)
        self.base_url = f"http://127.0.0.1:{port}"
        _API_KEYS[self.base_url] = self.api_key
        while True:
            try:
                if request("GET", f"{self.base_url}/readyz").status == 200:
                    return
            except OSError:
                pass
            if switchyard.poll() is not None:
                raise self._failed_start(f"switchyard exited with status {switchyard.returncode} before ready")
            if time.monotonic() > deadline:
                raise self._failed_start("switchyard did not answer GET /readyz with 200 in time")
            time.sleep(0.05)

    def _command(self, *args: str) -> bytes:
        """`switchyard ARGS…` with the environment switchyard runs with (its database); its
        standard output."""
        done = subprocess.run(
            [str(binary("SWITCHYARD_BIN", "switchyard")), *args],
            env=self.env,
            cwd=REPO_ROOT,
            capture_output=True,
            timeout=STARTUP_TIMEOUT_S,
        )
        if done.returncode != 0:
            raise RuntimeError(f"switchyard {' '.join(args)} failed: {done.stderr.decode(errors='replace')}")
        return done.stdout

    def create_key(self, tenant: str, name: str) -> str:
        """An API key of `tenant`, made as an operator makes one: `switchyard keys create`."""
        made = self._command("keys", "create", "--tenant", tenant, "--name", name)
        key = made.decode().strip()
        assert key and "\n" not in key, f"unexpected output of keys create: {made!r}"
        return key

    def stop(self) -> None:
        for proc, _ in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
        for proc, log_file in reversed(self._procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log_file.close()
        self._procs.clear()
