"""LangChain (`langchain-openai`'s `ChatOpenAI(use_responses_api=True)`) against switchyard.

LangChain keeps the conversation itself: by default each call replays the whole message list
(no `previous_response_id`), with earlier output items (`function_call`, `mcp_list_tools`,
`mcp_approval_request`, `mcp_call`, assistant messages) copied back from the `AIMessage`
content blocks, and tool results and approval answers appended as new input items (SPEC §9,
continuation by replay). `use_previous_response_id=True`, or a `previous_response_id` call
argument, sends only the messages after the last `AIMessage` instead.

The scenarios:
1. client function tools: `bind_tools([@tool])`, the model calls it, the caller runs it and
   sends a `ToolMessage` with the full history;
2. approvals of a builtin server tool (`require_approval: "always"`), answered the LangChain
   way, by replay and by `previous_response_id`; the approved call must run exactly once;
3. server tools without approval: an `mcp_call` comes back, and the next turn replays it
   without running it again.

Approved and replayed calls go to the builtin `fetch_url` tool, pointed at a counting HTTP
server of the test, so how often a call really ran is measured, not inferred.

Self-contained: starts its own fake-llm and switchyard (binaries from target/release, or
SWITCHYARD_BIN / FAKE_LLM_BIN), reusing ../python/harness.py; conftest.py starts them.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from harness import (
    HTTP_TIMEOUT_S,
    MODEL,
    FakeLLM,
    Services,
    conversation,
    request,
    text_turn,
    tool_call_turn,
)

# --------------------------------------------------------------------------- fixtures


class Target:
    """A local HTTP server that counts the GETs of each path (what fetch_url really did)."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        hits = self.hits

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hits[self.path] += 1
                body = f"hello from {self.path}".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"


@pytest.fixture(scope="session")
def target() -> Iterator[Target]:
    t = Target()
    t.thread.start()
    try:
        yield t
    finally:
        t.server.shutdown()
        t.server.server_close()
        t.thread.join()


@pytest.fixture(autouse=True)
def fake(services: Services) -> FakeLLM:
    llm = FakeLLM(services.fake_url)
    llm.reset()
    return llm


class Recorder:
    """What LangChain sent to switchyard: the JSON body of every `POST /v1/responses`."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.statuses: list[int] = []

    def on_request(self, req: Any) -> None:
        if req.method == "POST" and req.url.path.endswith("/responses"):
            self.bodies.append(json.loads(req.content))

    def on_response(self, resp: Any) -> None:
        if resp.request.method == "POST" and resp.request.url.path.endswith("/responses"):
            self.statuses.append(resp.status_code)


@pytest.fixture
def sent() -> Recorder:
    return Recorder()


@pytest.fixture
def make_llm(services: Services, sent: Recorder) -> Iterator[Callable[..., ChatOpenAI]]:
    clients: list[Any] = []

    def make(**kwargs: Any) -> ChatOpenAI:
        # openai.DefaultHttpxClient is whichever httpx flavour the installed SDK uses.
        http_client = openai.DefaultHttpxClient(
            event_hooks={"request": [sent.on_request], "response": [sent.on_response]},
            timeout=HTTP_TIMEOUT_S,
        )
        clients.append(http_client)
        return ChatOpenAI(
            model=MODEL,
            base_url=f"{services.base_url}/v1",
            api_key=services.api_key,
            use_responses_api=True,
            max_retries=0,
            http_client=http_client,
            **kwargs,
        )

    yield make
    for c in clients:
        c.close()


# --------------------------------------------------------------------------- helpers

STREAMING = pytest.mark.parametrize("streaming", [False, True], ids=["invoke", "stream"])


def call(model: Any, messages: list[BaseMessage], streaming: bool, **kwargs: Any) -> AIMessage:
    """`.invoke`, or `.stream` with the chunks added up, as LangChain users do."""
    if not streaming:
        result = model.invoke(messages, **kwargs)
        assert isinstance(result, AIMessage)
        return result
    total = None
    for chunk in model.stream(messages, **kwargs):
        total = chunk if total is None else total + chunk
    assert total is not None
    return total


def blocks(message: AIMessage, kind: str) -> list[dict[str, Any]]:
    """The content blocks of one type, without the `index` that streaming adds."""
    assert isinstance(message.content, list), message.content
    return [
        {k: v for k, v in b.items() if k != "index"}
        for b in message.content
        if isinstance(b, dict) and b.get("type") == kind
    ]


def response_id(message: AIMessage) -> str:
    rid = message.response_metadata["id"]
    assert rid.startswith("resp_"), rid
    return rid


def stored(services: Services, rid: str) -> dict[str, Any]:
    raw = request("GET", f"{services.base_url}/v1/responses/{rid}")
    assert raw.status == 200, (raw.status, raw.body)
    return raw.json()


def input_types(body: dict[str, Any]) -> list[str]:
    return [item.get("type") for item in body["input"]]


def tool_messages(chat_request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in chat_request["messages"] if m["role"] == "tool"]


# --------------------------------------------------------------------------- 1. function tools


@tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"sunny, 24C in {city}"


@STREAMING
def test_a_function_tool_call_is_answered_with_a_tool_message_by_replaying_the_history(
    make_llm: Callable[..., ChatOpenAI], fake: FakeLLM, sent: Recorder, services: Services, streaming: bool
) -> None:
    fake.script(tool_call_turn(("call_w1", "get_weather", '{"city": "Paris"}')), text_turn("Sunny in Paris."))
    model = make_llm().bind_tools([get_weather])
    messages: list[BaseMessage] = [HumanMessage("Weather in Paris?")]

    first = call(model, messages, streaming)
    assert first.tool_calls == [
        {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_w1", "type": "tool_call"}
    ]
    assert first.text == ""
    [call_block] = blocks(first, "function_call")
    assert (call_block["call_id"], call_block["name"]) == ("call_w1", "get_weather")
    assert call_block["id"].startswith("fc_")
    assert stored(services, response_id(first))["required_action"] is not None

    # What LangChain users do: run the tool, append the AIMessage and the ToolMessage.
    messages += [first, get_weather.invoke(first.tool_calls[0])]
    second = call(model, messages, streaming)
    assert second.text == "Sunny in Paris."
    assert second.tool_calls == []
    assert second.response_metadata["status"] == "completed"

    # LangChain replayed the whole history, the call item with its switchyard id included.
    assert sent.statuses == [200, 200]
    replay = sent.bodies[1]
    assert "previous_response_id" not in replay
    assert replay["stream"] is streaming
    assert input_types(replay) == ["message", "function_call", "function_call_output"]
    replayed_call = replay["input"][1]
    assert {k: replayed_call[k] for k in ("id", "call_id", "name", "arguments")} == {
        "id": call_block["id"],
        "call_id": "call_w1",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    }
    assert replay["input"][2] == {"type": "function_call_output", "call_id": "call_w1", "output": "sunny, 24C in Paris"}

    # The model saw the call and its result once.
    upstream = fake.requests()
    assert len(upstream) == 2
    assert conversation(upstream[1]) == [
        ("user", "Weather in Paris?"),
        ("assistant", ""),
        ("tool", "sunny, 24C in Paris"),
    ]
    assert [c["id"] for c in upstream[1]["messages"][1]["tool_calls"]] == ["call_w1"]


def test_a_replay_that_answers_a_paused_function_call_completes_the_paused_response(
    make_llm: Callable[..., ChatOpenAI], fake: FakeLLM, services: Services
) -> None:
    """SPEC §9: outputs in a replay that answer a paused response's calls complete it.
    Fails today: the paused response keeps `required_action` (and later expires)."""
    fake.script(tool_call_turn(("call_w3", "get_weather", '{"city": "Rome"}')), text_turn("Sunny in Rome."))
    model = make_llm().bind_tools([get_weather])
    messages: list[BaseMessage] = [HumanMessage("Weather in Rome?")]
    first = model.invoke(messages)
    paused_id = response_id(first)

    second = model.invoke([*messages, first, get_weather.invoke(first.tool_calls[0])])

    assert second.text == "Sunny in Rome."
    paused = stored(services, paused_id)
    assert (paused["status"], paused["required_action"]) == ("completed", None)


@STREAMING
def test_a_function_tool_call_is_answered_through_use_previous_response_id(
    make_llm: Callable[..., ChatOpenAI], fake: FakeLLM, sent: Recorder, streaming: bool
) -> None:
    fake.script(tool_call_turn(("call_w2", "get_weather", '{"city": "Oslo"}')), text_turn("Sunny in Oslo."))
    model = make_llm(use_previous_response_id=True).bind_tools([get_weather])
    messages: list[BaseMessage] = [HumanMessage("Weather in Oslo?")]

    first = call(model, messages, streaming)
    messages += [first, get_weather.invoke(first.tool_calls[0])]
    second = call(model, messages, streaming)

    assert second.text == "Sunny in Oslo."
    assert sent.bodies[1]["previous_response_id"] == response_id(first)
    assert sent.bodies[1]["input"] == [
        {"type": "function_call_output", "call_id": "call_w2", "output": "sunny, 24C in Oslo"}
    ]
    assert len(fake.requests()) == 2


# --------------------------------------------------------------------------- 2. approvals

GUARDED_FETCH = {"type": "mcp", "server_label": "builtin", "require_approval": "always", "allowed_tools": ["fetch_url"]}


def approval_answer(first: AIMessage, approve: bool) -> tuple[str, HumanMessage]:
    """The LangChain-documented answer: a HumanMessage carrying `mcp_approval_response` blocks."""
    [req] = blocks(first, "mcp_approval_request")
    assert (req["server_label"], req["name"]) == ("builtin", "fetch_url")
    answer = HumanMessage(
        content=[{"type": "mcp_approval_response", "approve": approve, "approval_request_id": req["id"]}]
    )
    return req["id"], answer


def ask_for_a_guarded_fetch(
    model: Any, fake: FakeLLM, target: Target, path: str, streaming: bool
) -> tuple[list[BaseMessage], AIMessage]:
    arguments = json.dumps({"url": target.url(path)})
    fake.script(tool_call_turn(("call_f1", "fetch_url", arguments)), text_turn("Fetched it."))
    messages: list[BaseMessage] = [HumanMessage("Fetch the page.")]
    first = call(model, messages, streaming)
    assert [b["type"] for b in first.content if isinstance(b, dict)] == ["mcp_list_tools", "mcp_approval_request"]
    assert first.tool_calls == []
    assert target.hits[path] == 0
    return messages, first


def assert_approved_call(second: AIMessage, request_id: str, path: str) -> None:
    [done] = blocks(second, "mcp_call")
    assert (done["name"], done["approval_request_id"], done["status"]) == ("fetch_url", request_id, "completed")
    assert f"hello from {path}" in done["output"]
    assert second.text == "Fetched it."


@STREAMING
def test_an_approval_answered_by_replaying_the_history_runs_the_call_exactly_once(
    make_llm: Callable[..., ChatOpenAI],
    fake: FakeLLM,
    sent: Recorder,
    services: Services,
    target: Target,
    streaming: bool,
) -> None:
    """LangChain's default (no previous_response_id). Fails today: 400 "No pending approval
    request with id mcpr_…" (param input[3]), because switchyard looks for the pending request
    only through previous_response_id."""
    path = f"/replay-{streaming}"
    model = make_llm().bind_tools([GUARDED_FETCH])
    messages, first = ask_for_a_guarded_fetch(model, fake, target, path, streaming)
    request_id, answer = approval_answer(first, approve=True)
    paused_id = response_id(first)

    messages += [first, answer]
    second = call(model, messages, streaming)

    replay = sent.bodies[1]
    assert "previous_response_id" not in replay
    assert input_types(replay) == ["message", "mcp_list_tools", "mcp_approval_request", "mcp_approval_response"]
    assert replay["input"][3] == {"type": "mcp_approval_response", "approve": True, "approval_request_id": request_id}
    assert_approved_call(second, request_id, path)
    assert target.hits[path] == 1
    assert len(fake.requests()) == 2
    paused = stored(services, paused_id)
    assert (paused["status"], paused["required_action"]) == ("completed", None)

    # The conversation goes on: the next replay carries the answered approval again, and the
    # call it approved must not run a second time (SPEC §9).
    messages += [second, HumanMessage("Thanks.")]
    third = call(model, messages, streaming)
    assert input_types(sent.bodies[2]) == [
        "message",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
        "mcp_call",
        "message",
        "message",
    ]
    assert third.text == "Echo: Thanks."
    assert blocks(third, "mcp_call") == []
    assert target.hits[path] == 1
    upstream = fake.requests()
    assert len(upstream) == 3
    assert [m["content"] for m in tool_messages(upstream[2])] == [tool_messages(upstream[1])[0]["content"]]
    assert conversation(upstream[2])[-2:] == [("assistant", "Fetched it."), ("user", "Thanks.")]


@STREAMING
def test_a_denial_answered_by_replaying_the_history_never_runs_the_call(
    make_llm: Callable[..., ChatOpenAI], fake: FakeLLM, target: Target, streaming: bool
) -> None:
    """Fails today like the approval by replay (400 "No pending approval request")."""
    path = f"/deny-{streaming}"
    model = make_llm().bind_tools([GUARDED_FETCH])
    messages, first = ask_for_a_guarded_fetch(model, fake, target, path, streaming)
    request_id, answer = approval_answer(first, approve=False)

    second = call(model, [*messages, first, answer], streaming)

    [denied] = blocks(second, "mcp_call")
    assert (denied["approval_request_id"], denied["status"]) == (request_id, "failed")
    assert denied.get("error")
    assert not denied.get("output")
    assert second.text == "Fetched it."  # the scripted model goes on
    assert target.hits[path] == 0
    assert len(fake.requests()) == 2


@STREAMING
def test_an_approval_answered_through_use_previous_response_id_runs_the_call_exactly_once(
    make_llm: Callable[..., ChatOpenAI], fake: FakeLLM, sent: Recorder, target: Target, streaming: bool
) -> None:
    path = f"/previous-{streaming}"
    model = make_llm(use_previous_response_id=True).bind_tools([GUARDED_FETCH])
    messages, first = ask_for_a_guarded_fetch(model, fake, target, path, streaming)
    request_id, answer = approval_answer(first, approve=True)

    messages += [first, answer]
    second = call(model, messages, streaming)

    assert sent.bodies[1]["previous_response_id"] == response_id(first)
    assert sent.bodies[1]["input"] == [
        {"type": "mcp_approval_response", "approve": True, "approval_request_id": request_id}
    ]
    assert_approved_call(second, request_id, path)
    assert target.hits[path] == 1
    assert len(fake.requests()) == 2

    # Sending the same answer again (same messages, same previous response) never reruns it.
    try:
        again = call(model, messages, streaming)
    except openai.BadRequestError as e:
        assert "No pending approval request" in str(e)
    else:
        assert blocks(again, "mcp_call") == []
    assert target.hits[path] == 1

    # The next turn sends only the new message, chained to the second response.
    messages += [second, HumanMessage("Thanks.")]
    third = call(model, messages, streaming)
    assert sent.bodies[-1]["previous_response_id"] == response_id(second)
    assert input_types(sent.bodies[-1]) == ["message"]
    assert third.text == "Echo: Thanks."
    assert target.hits[path] == 1


@STREAMING
def test_an_approval_sent_with_an_explicit_previous_response_id_as_the_langchain_docs_show(
    make_llm: Callable[..., ChatOpenAI], fake: FakeLLM, sent: Recorder, target: Target, streaming: bool
) -> None:
    path = f"/docs-{streaming}"
    model = make_llm().bind_tools([GUARDED_FETCH])
    _, first = ask_for_a_guarded_fetch(model, fake, target, path, streaming)
    request_id, answer = approval_answer(first, approve=True)

    second = call(model, [answer], streaming, previous_response_id=response_id(first))

    assert sent.bodies[1]["previous_response_id"] == response_id(first)
    assert input_types(sent.bodies[1]) == ["mcp_approval_response"]
    assert_approved_call(second, request_id, path)
    assert target.hits[path] == 1
    assert len(fake.requests()) == 2


# --------------------------------------------------------------------------- 3. server tools


@STREAMING
def test_a_server_call_comes_back_as_an_mcp_call_and_a_replay_of_it_does_not_run_it_again(
    make_llm: Callable[..., ChatOpenAI], fake: FakeLLM, sent: Recorder, target: Target, streaming: bool
) -> None:
    path = f"/never-{streaming}"
    arguments = json.dumps({"url": target.url(path)})
    fake.script(tool_call_turn(("call_n1", "fetch_url", arguments)), text_turn("Fetched it."))
    # No server_url: LangChain passes the dict through as it is.
    model = make_llm().bind_tools(
        [{"type": "mcp", "server_label": "builtin", "require_approval": "never", "allowed_tools": ["fetch_url"]}]
    )
    messages: list[BaseMessage] = [HumanMessage("Fetch the page.")]

    first = call(model, messages, streaming)
    assert [b["type"] for b in first.content if isinstance(b, dict)] == ["mcp_list_tools", "mcp_call", "text"]
    [done] = blocks(first, "mcp_call")
    assert (done["server_label"], done["name"], done["arguments"], done["status"]) == (
        "builtin",
        "fetch_url",
        arguments,
        "completed",
    )
    assert f"hello from {path}" in done["output"]
    assert first.tool_calls == []  # a hosted call: nothing for the caller to run
    assert first.text == "Fetched it."
    assert target.hits[path] == 1
    assert len(fake.requests()) == 2

    messages += [first, HumanMessage("And now?")]
    second = call(model, messages, streaming)

    replay = sent.bodies[1]
    assert "previous_response_id" not in replay
    assert input_types(replay) == ["message", "mcp_list_tools", "mcp_call", "message", "message"]
    assert replay["input"][2]["id"] == done["id"]
    assert second.text == "Echo: And now?"
    assert blocks(second, "mcp_call") == []
    assert target.hits[path] == 1
    upstream = fake.requests()
    assert len(upstream) == 3
    assert len(tool_messages(upstream[2])) == 1
    assert f"hello from {path}" in tool_messages(upstream[2])[0]["content"]
    assert conversation(upstream[2])[-2:] == [("assistant", "Fetched it."), ("user", "And now?")]
