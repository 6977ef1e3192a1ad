"""The persisted pause driven with plain HTTP (SPEC §3, §7 B and C, cancel, §8).

The client side here is what an integrator without an SDK writes: `urllib.request` and `json`
from the standard library, and an SSE reader that takes the stream line by line as it arrives.
Only the fake upstream is scripted with helpers from harness.py.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from harness import (
    BUILTIN_TOOL_NAMES,
    HTTP_TIMEOUT_S,
    MCP_CALL_ID,
    MODEL,
    RESPONSE_KEYS,
    FakeLLM,
    Services,
    api_key_for,
    id_pattern,
    text_turn,
    tool_call_turn,
)

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
PARIS = '{"city": "Paris"}'
ROME = '{"city": "Rome"}'
# config/default.toml: runs.requires_action_ttl_ms = 600000.
DEFAULT_PAUSE_S = 600
APPROVAL_REQUEST_ID = id_pattern("mcpr")


# --------------------------------------------------------------------------- the client side


@dataclass
class Frame:
    """One SSE event as framed on the wire."""

    event: str | None
    id: str | None
    data: str


def read_frames(lines: Iterator[bytes]) -> Iterator[Frame]:
    """SSE framing (HTML Living Standard, 9.2.6): fields until a blank line; comments skipped."""
    event: str | None = None
    event_id: str | None = None
    data: list[str] = []
    for raw in lines:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data:
                yield Frame(event, event_id, "\n".join(data))
            event, event_id, data = None, None, []
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "id":
                event_id = value
            elif name == "data":
                data.append(value)


@dataclass
class Transcript:
    """Every frame of one SSE response, read until the server closed it."""

    frames: list[Frame]

    @property
    def events(self) -> list[dict[str, Any]]:
        """The JSON payloads, after checking the framing: `[DONE]` exactly once, at the end, and
        each event's `event:` and `id:` fields naming its type and sequence number (SPEC §7)."""
        *frames, last = self.frames
        assert last.data == "[DONE]", f"the stream did not end with [DONE] but with {last}"
        assert [f.data for f in frames].count("[DONE]") == 0, "[DONE] was sent more than once"
        payloads = [json.loads(f.data) for f in frames]
        for frame, payload in zip(frames, payloads, strict=True):
            assert (frame.event, frame.id) == (payload["type"], str(payload["sequence_number"])), frame
        return payloads


class Api:
    """JSON in and out, errors included, and SSE read as it arrives."""

    def __init__(self, base_url: str) -> None:
        self.root = f"{base_url}/v1"

    def _request(
        self, method: str, path: str, body: Any, accept: str, extra_headers: dict[str, str] | None = None
    ) -> urllib.request.Request:
        headers = {"Authorization": f"Bearer {api_key_for(self.root)}", "Accept": accept, **(extra_headers or {})}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        return urllib.request.Request(self.root + path, data=data, headers=headers, method=method)

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """The status and the JSON body of a reply, an error reply too."""
        request = self._request(method, path, body, "application/json")
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as reply:
                assert reply.headers["Content-Type"].startswith("application/json")
                return reply.status, json.load(reply)
        except urllib.error.HTTPError as error:
            with error:
                assert error.headers["Content-Type"].startswith("application/json")
                return error.code, json.load(error)

    @contextmanager
    def open_stream(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Iterator[Iterator[Frame]]:
        """The frames of an SSE reply, each as soon as it has arrived."""
        request = self._request(method, path, body, "text/event-stream", headers)
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as reply:
            assert reply.status == 200
            assert reply.headers["Content-Type"].startswith("text/event-stream")
            yield read_frames(reply)

    def stream(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Transcript:
        with self.open_stream(method, path, body, headers) as frames:
            return Transcript(list(frames))

    # The calls of SPEC §2 used below.

    def create(self, **body: Any) -> tuple[int, Any]:
        return self.call("POST", "/responses", {"model": MODEL, **body})

    def create_streamed(self, **body: Any) -> Transcript:
        return self.stream("POST", "/responses", {"model": MODEL, **body, "stream": True})

    def submit(self, response_id: str, body: dict[str, Any]) -> tuple[int, Any]:
        return self.call("POST", f"/responses/{response_id}/submit_tool_outputs", body)

    def submit_streamed(self, response_id: str, body: dict[str, Any]) -> Transcript:
        return self.stream("POST", f"/responses/{response_id}/submit_tool_outputs", {**body, "stream": True})

    def cancel(self, response_id: str) -> tuple[int, Any]:
        return self.call("POST", f"/responses/{response_id}/cancel")

    def get(self, response_id: str) -> Any:
        status, body = self.call("GET", f"/responses/{response_id}")
        assert status == 200, body
        return body

    def replay(self, response_id: str) -> list[dict[str, Any]]:
        return self.stream("GET", f"/responses/{response_id}?stream=true").events


@pytest.fixture
def api(base_url: str) -> Api:
    return Api(base_url)


def outputs(*pairs: tuple[str, str]) -> dict[str, Any]:
    return {"tool_outputs": [{"tool_call_id": call_id, "output": output} for call_id, output in pairs]}


def weather_calls(*calls: tuple[str, str]) -> dict[str, Any]:
    """SPEC §3: `required_action.submit_tool_outputs` naming get_weather calls, without `expires_at`."""
    return {
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
            for call_id, arguments in calls
        ]
    }


def weather_turns(*turns: tuple[str, str, str]) -> list[dict[str, Any]]:
    """The chat messages of model turns that each called get_weather once: (call id, arguments, output)."""
    messages: list[dict[str, Any]] = []
    for call_id, arguments, output in turns:
        call = {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
    return messages


def pending(response: dict[str, Any]) -> dict[str, Any]:
    """What a paused response asks for; checks the rest of `required_action`."""
    action = response["required_action"]
    assert action is not None, "the response does not wait for the client"
    assert sorted(action) == ["expires_at", "submit_tool_outputs", "type"]
    assert action["type"] == "submit_tool_outputs"
    assert isinstance(action["expires_at"], int)
    return action["submit_tool_outputs"]


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def numbers(events: list[dict[str, Any]]) -> list[int]:
    return [e["sequence_number"] for e in events]


def lifecycle(events: list[dict[str, Any]]) -> list[str]:
    return [t for t in types(events) if t in ("response.created", "response.in_progress", "response.completed")]


FUNCTION_CALL_EVENTS = [
    "response.output_item.added",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
]


def message_events(deltas: int) -> list[str]:
    return [
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * deltas,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]


# --------------------------------------------------------------------------- tests


def test_a_streamed_run_pauses_with_required_action_and_a_streamed_submission_continues_its_numbering(
    api: Api, fake: FakeLLM
) -> None:
    fake.script(tool_call_turn(("call_w", "get_weather", PARIS)), text_turn("Sunny, ", "24 °C."))

    before = int(time.time())
    first = api.create_streamed(input="Weather in Paris?", tools=[WEATHER_TOOL]).events
    after = int(time.time())

    # SPEC §7 B: the model's turn ends with the call, then `response.completed`.
    assert types(first) == ["response.created", "response.in_progress", *FUNCTION_CALL_EVENTS, "response.completed"]
    assert numbers(first) == list(range(8))
    response_id = first[0]["response"]["id"]
    call = first[6]["item"]
    assert (call["type"], call["call_id"], call["arguments"], call["status"]) == (
        "function_call",
        "call_w",
        PARIS,
        "completed",
    )
    paused = first[-1]["response"]
    assert sorted(RESPONSE_KEYS - paused.keys()) == []
    assert (paused["id"], paused["status"], paused["output"]) == (response_id, "completed", [call])
    assert pending(paused) == weather_calls(("call_w", PARIS))
    assert before + DEFAULT_PAUSE_S <= paused["required_action"]["expires_at"] <= after + DEFAULT_PAUSE_S + 1
    # Stored as it was announced (SPEC §7 B: persisted before `response.completed` was sent).
    assert api.get(response_id) == paused

    resumed = api.submit_streamed(response_id, outputs(("call_w", "sunny, 24C"))).events

    # SPEC §7 C: the same response, the numbering goes on from 8.
    assert types(resumed) == ["response.in_progress", *message_events(2), "response.completed"]
    assert numbers(resumed) == list(range(8, 8 + len(resumed)))
    in_progress = resumed[0]["response"]
    assert (in_progress["id"], in_progress["status"], in_progress["required_action"]) == (
        response_id,
        "in_progress",
        None,
    )
    # The call stays where it was; the answer is appended after it.
    assert in_progress["output"] == [call]
    assert {e["output_index"] for e in resumed[1:-1]} == {1}
    done = resumed[-1]["response"]
    assert (done["id"], done["status"], done["required_action"]) == (response_id, "completed", None)
    assert done["output"][0] == call
    assert done["output"][1]["content"][0]["text"] == "Sunny, 24 °C."
    # SPEC §4: usage is summed over both model turns, across the pause.
    assert (done["usage"]["input_tokens"], done["usage"]["output_tokens"]) == (10 + 5, 5 + 2)
    assert api.get(response_id) == done

    assert fake.requests()[1]["messages"] == [
        {"role": "user", "content": "Weather in Paris?"},
        *weather_turns(("call_w", PARIS, "sunny, 24C")),
    ]
    # SPEC §2, §7 F: one log across the pause, replayed as it was sent, `[DONE]` once at the end.
    assert api.replay(response_id) == first + resumed


def test_a_run_that_pauses_twice_is_resumed_twice_without_streaming_and_replays_as_one_log(
    api: Api, fake: FakeLLM
) -> None:
    fake.script(
        tool_call_turn(("call_1", "get_weather", PARIS)),
        tool_call_turn(("call_2", "get_weather", ROME)),
        text_turn("Paris sunny, ", "Rome rainy."),
    )

    status, paused = api.create(input="Paris, then Rome?", tools=[WEATHER_TOOL])

    assert status == 200, paused
    response_id = paused["id"]
    assert paused["status"] == "completed"
    assert pending(paused) == weather_calls(("call_1", PARIS))
    assert [(item["type"], item["call_id"]) for item in paused["output"]] == [("function_call", "call_1")]

    # A non-streamed submission replies once the run has stopped again: here, at the next pause.
    status, again = api.submit(response_id, outputs(("call_1", "sunny")))

    assert status == 200, again
    assert (again["id"], again["status"]) == (response_id, "completed")
    assert pending(again) == weather_calls(("call_2", ROME))
    assert again["required_action"]["expires_at"] >= paused["required_action"]["expires_at"]
    assert again["output"][0] == paused["output"][0]
    assert [(item["type"], item["call_id"]) for item in again["output"]] == [
        ("function_call", "call_1"),
        ("function_call", "call_2"),
    ]

    status, done = api.submit(response_id, outputs(("call_2", "rainy")))

    assert status == 200, done
    assert (done["id"], done["status"], done["required_action"]) == (response_id, "completed", None)
    assert done["output"][:2] == again["output"]
    assert [item["type"] for item in done["output"]] == ["function_call", "function_call", "message"]
    assert done["output"][2]["content"][0]["text"] == "Paris sunny, Rome rainy."
    assert (done["usage"]["input_tokens"], done["usage"]["output_tokens"]) == (10 + 10 + 5, 5 + 5 + 2)
    assert api.get(response_id) == done

    # The submitted outputs became input items of the run.
    status, items = api.call("GET", f"/responses/{response_id}/input_items?order=asc")
    assert status == 200, items
    assert [(i["type"], i.get("call_id"), i.get("output")) for i in items["data"]] == [
        ("message", None, None),
        ("function_call_output", "call_1", "sunny"),
        ("function_call_output", "call_2", "rainy"),
    ]
    # After the first pause the model sees its call and the output (what it sees after the second
    # pause is checked by the last test of this module).
    assert fake.requests()[1]["messages"] == [
        {"role": "user", "content": "Paris, then Rome?"},
        *weather_turns(("call_1", PARIS, "sunny")),
    ]

    log = api.replay(response_id)

    assert numbers(log) == list(range(len(log)))
    assert lifecycle(log) == [
        "response.created",
        "response.in_progress",
        "response.completed",
        "response.in_progress",
        "response.completed",
        "response.in_progress",
        "response.completed",
    ]
    completed = [e["response"] for e in log if e["type"] == "response.completed"]
    assert completed == [paused, again, done]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(
    ("answers", "got"),
    [
        ([("call_A", "x")], "['call_A']"),
        ([("call_A", "x"), ("call_B", "y"), ("call_C", "z")], "['call_A', 'call_B', 'call_C']"),
        ([("call_A", "x"), ("call_A", "y")], "['call_A', 'call_A']"),
        ([("call_A", "x"), ("call_X", "y")], "['call_A', 'call_X']"),
        ([], "[]"),
    ],
    ids=["missing", "extra", "duplicate", "unknown", "none"],
)
def test_a_submission_that_does_not_answer_every_pending_call_exactly_once_is_refused(
    api: Api, fake: FakeLLM, answers: list[tuple[str, str]], got: str, stream: bool
) -> None:
    fake.script(tool_call_turn(("call_A", "get_weather", PARIS), ("call_B", "get_weather", ROME)))
    _, paused = api.create(input="Paris and Rome?", tools=[WEATHER_TOOL])

    # SPEC §7 E: refused before any stream starts, so a JSON error even with `stream: true`.
    status, reply = api.submit(paused["id"], {**outputs(*answers), "stream": stream})

    assert status == 400
    assert reply == {
        "error": {
            "message": f"Expected tool outputs for call_ids ['call_A', 'call_B'], got {got}",
            "type": "invalid_request_error",
            "param": "tool_outputs",
            "code": None,
        }
    }
    # Nothing was resumed: the run still waits for both calls.
    assert len(fake.requests()) == 1
    assert api.get(paused["id"]) == paused


def test_a_tool_output_without_output_is_refused_naming_the_field(api: Api, fake: FakeLLM) -> None:
    fake.script(tool_call_turn(("call_w", "get_weather", PARIS)))
    _, paused = api.create(input="Weather in Paris?", tools=[WEATHER_TOOL])

    status, reply = api.submit(paused["id"], {"tool_outputs": [{"tool_call_id": "call_w"}]})

    assert status == 400
    assert reply["error"]["type"] == "invalid_request_error"
    assert reply["error"]["param"] == "tool_outputs[0].output"
    assert api.get(paused["id"]) == paused


def test_an_unknown_response_id_is_not_found_for_a_submission_and_for_a_cancel(api: Api) -> None:
    unknown = "resp_01900000000070008000000000000000"
    not_found = {
        "error": {
            "message": f"Response with id '{unknown}' not found.",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }

    assert api.submit(unknown, outputs(("call_w", "x"))) == (404, not_found)
    assert api.cancel(unknown) == (404, not_found)


def test_the_outputs_answer_in_any_order_once_and_a_second_submission_finds_the_run_completed(
    api: Api, fake: FakeLLM
) -> None:
    fake.script(tool_call_turn(("call_A", "get_weather", PARIS), ("call_B", "get_weather", ROME)), text_turn("Both."))
    _, paused = api.create(input="Paris and Rome?", tools=[WEATHER_TOOL])
    assert pending(paused) == weather_calls(("call_A", PARIS), ("call_B", ROME))

    status, done = api.submit(paused["id"], outputs(("call_B", "rainy"), ("call_A", "sunny")))

    assert status == 200, done
    assert (done["status"], done["required_action"]) == ("completed", None)
    # The model sees the results in the order of its calls.
    tool_messages = [m for m in fake.requests()[1]["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages] == [("call_A", "sunny"), ("call_B", "rainy")]

    status, reply = api.submit(paused["id"], outputs(("call_A", "sunny"), ("call_B", "rainy")))

    assert status == 400
    assert reply == {
        "error": {
            "message": 'Runs in status "completed" do not accept tool outputs.',
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
    assert len(fake.requests()) == 2


def test_a_run_resumed_and_still_running_refuses_outputs_and_a_cancel_ends_its_live_stream(
    api: Api, fake: FakeLLM
) -> None:
    fake.script(
        tool_call_turn(("call_w", "get_weather", PARIS)),
        # The resumed turn starts an answer, then the upstream goes silent.
        {"steps": [{"type": "text", "text": "Thinking"}, {"type": "hang"}]},
    )
    _, paused = api.create(input="Weather in Paris?", tools=[WEATHER_TOOL])
    response_id = paused["id"]

    with api.open_stream(
        "POST", f"/responses/{response_id}/submit_tool_outputs", {**outputs(("call_w", "sunny")), "stream": True}
    ) as frames:
        head: list[Frame] = []
        for frame in frames:
            head.append(frame)
            if frame.event == "response.output_text.delta":
                break

        status, refused = api.submit(response_id, outputs(("call_w", "sunny")))
        assert status == 400
        assert refused["error"]["message"] == 'Runs in status "in_progress" do not accept tool outputs.'
        assert refused["error"]["type"] == "invalid_request_error"

        status, cancelled = api.cancel(response_id)

        rest = list(frames)

    assert status == 200, cancelled
    assert (cancelled["id"], cancelled["status"], cancelled["required_action"]) == (response_id, "cancelled", None)
    call, message = cancelled["output"]
    assert call == paused["output"][0]
    # What the model had said is kept, in an item closed `incomplete` (SPEC §7 cancel).
    assert (message["type"], message["status"]) == ("message", "incomplete")
    assert message["content"][0]["text"] == "Thinking"

    live = Transcript(head + rest).events
    assert types(live) == [
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.failed",
    ]
    assert numbers(live) == list(range(8, 16))
    assert live[-2]["item"] == message
    # The standard has no cancelled event: `response.failed` carrying the cancelled response.
    assert live[-1]["response"] == cancelled
    assert api.get(response_id) == cancelled

    status, reply = api.submit(response_id, outputs(("call_w", "sunny")))

    assert status == 400
    assert reply["error"]["message"] == 'Runs in status "cancelled" do not accept tool outputs.'


def test_cancelling_a_paused_run_is_idempotent_and_a_later_submission_finds_it_cancelled(
    api: Api, fake: FakeLLM
) -> None:
    fake.script(tool_call_turn(("call_w", "get_weather", PARIS)))
    first = api.create_streamed(input="Weather in Paris?", tools=[WEATHER_TOOL]).events
    paused = first[-1]["response"]
    response_id = paused["id"]

    status, cancelled = api.cancel(response_id)

    assert status == 200, cancelled
    assert (cancelled["id"], cancelled["status"], cancelled["required_action"]) == (response_id, "cancelled", None)
    assert (cancelled["error"], cancelled["incomplete_details"]) == (None, None)
    assert cancelled["output"] == paused["output"]
    assert cancelled["usage"] == paused["usage"]
    assert api.get(response_id) == cancelled
    # SPEC §2: idempotent on a run already stopped, which is returned as it is.
    assert api.cancel(response_id) == (200, cancelled)

    status, reply = api.submit(response_id, outputs(("call_w", "sunny")))

    assert status == 400
    assert reply == {
        "error": {
            "message": 'Runs in status "cancelled" do not accept tool outputs.',
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
    assert len(fake.requests()) == 1
    # The log goes on after the pause with the cancellation, as a live stream would have ended.
    log = api.replay(response_id)
    assert log[:-1] == first
    assert (log[-1]["type"], log[-1]["sequence_number"]) == ("response.failed", len(first))
    assert log[-1]["response"] == cancelled


def test_a_paused_run_that_expired_refuses_outputs_as_expired(short_pause_services: Services) -> None:
    api = Api(short_pause_services.base_url)
    fake = FakeLLM(short_pause_services.fake_url)
    fake.reset()
    fake.script(tool_call_turn(("call_w", "get_weather", PARIS)))
    _, paused = api.create(input="Weather in Paris?", tools=[WEATHER_TOOL])

    deadline = time.monotonic() + 10
    while (expired := api.get(paused["id"]))["status"] == "completed":
        assert time.monotonic() < deadline, "the paused run did not expire"
        time.sleep(0.1)
    status, reply = api.submit(paused["id"], outputs(("call_w", "too late")))

    # SPEC §3: `expired` is `incomplete` on the wire; the message names the run state.
    assert (expired["status"], expired["incomplete_details"], expired["required_action"]) == (
        "incomplete",
        {"reason": "tool_outputs_expired"},
        None,
    )
    assert status == 400
    assert reply["error"]["message"] == 'Runs in status "expired" do not accept tool outputs.'
    assert reply["error"]["type"] == "invalid_request_error"
    assert api.replay(paused["id"])[-1]["type"] == "response.incomplete"
    assert len(fake.requests()) == 1


GUARDED_BUILTIN: dict[str, Any] = {"type": "mcp", "server_label": "builtin", "require_approval": "always"}


def approval_requests(response: dict[str, Any]) -> list[dict[str, Any]]:
    action = pending(response)
    assert action["tool_calls"] == []
    return action["approval_requests"]


def test_tool_approvals_approve_a_paused_server_call_streamed_and_deny_the_next_one(api: Api, fake: FakeLLM) -> None:
    fake.script(
        tool_call_turn(("call_1", "calculator", '{"expression": "6 * 7"}')),
        tool_call_turn(("call_2", "calculator", '{"expression": "42 + 1"}')),
        text_turn("6 * 7 = 42."),
    )

    first = api.create_streamed(input="6 * 7, then plus one?", tools=[GUARDED_BUILTIN]).events

    # SPEC §6: the server call waits for approval like a client call; nothing ran yet.
    assert types(first) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.output_item.done",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    assert [tool["name"] for tool in first[5]["item"]["tools"]] == BUILTIN_TOOL_NAMES
    paused = first[-1]["response"]
    response_id = paused["id"]
    request_item = first[7]["item"]
    assert APPROVAL_REQUEST_ID.match(request_item["id"]), request_item["id"]
    assert (request_item["type"], request_item["server_label"], request_item["name"], request_item["arguments"]) == (
        "mcp_approval_request",
        "builtin",
        "calculator",
        '{"expression": "6 * 7"}',
    )
    assert paused["output"] == [first[5]["item"], request_item]
    assert approval_requests(paused) == [
        {k: request_item[k] for k in ("id", "server_label", "name", "arguments")}
    ]
    status, refused = api.submit(response_id, outputs())
    assert status == 400
    assert refused["error"]["message"] == (
        f"Expected tool approvals for approval_request_ids ['{request_item['id']}'], got []"
    )

    resumed = api.submit_streamed(
        response_id, {"tool_approvals": [{"approval_request_id": request_item["id"], "approve": True}]}
    ).events

    assert numbers(resumed) == list(range(len(first), len(first) + len(resumed)))
    deltas = types(resumed).count("response.mcp_call_arguments.delta")
    assert types(resumed) == [
        "response.in_progress",
        "response.output_item.added",
        *["response.mcp_call_arguments.delta"] * deltas,
        "response.mcp_call_arguments.done",
        "response.mcp_call.in_progress",
        "response.mcp_call.completed",
        "response.output_item.done",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    call = resumed[-4]["item"]
    assert MCP_CALL_ID.match(call["id"]), call["id"]
    assert (call["type"], call["name"], call["arguments"], call["output"], call["error"], call["status"]) == (
        "mcp_call",
        "calculator",
        '{"expression": "6 * 7"}',
        "42",
        None,
        "completed",
    )
    assert call["approval_request_id"] == request_item["id"]
    second_request_item = resumed[-2]["item"]
    assert (second_request_item["type"], second_request_item["arguments"]) == (
        "mcp_approval_request",
        '{"expression": "42 + 1"}',
    )
    again = resumed[-1]["response"]
    assert [item["type"] for item in again["output"]] == [
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_call",
        "mcp_approval_request",
    ]
    assert [r["id"] for r in approval_requests(again)] == [second_request_item["id"]]

    status, done = api.submit(
        response_id,
        {
            "tool_approvals": [
                {"approval_request_id": second_request_item["id"], "approve": False, "reason": "Enough arithmetic."}
            ]
        },
    )

    assert status == 200, done
    assert (done["status"], done["required_action"]) == ("completed", None)
    assert [item["type"] for item in done["output"]] == [
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_call",
        "mcp_approval_request",
        "mcp_call",
        "message",
    ]
    denied = done["output"][4]
    assert (denied["name"], denied["arguments"], denied["output"], denied["status"]) == (
        "calculator",
        '{"expression": "42 + 1"}',
        None,
        "failed",
    )
    assert denied["approval_request_id"] == second_request_item["id"]
    assert denied["error"] == {
        "type": "mcp_tool_execution_error",
        "content": "The user denied this call: Enough arithmetic.",
    }
    assert done["output"][5]["content"][0]["text"] == "6 * 7 = 42."
    # The model saw the approved call's result and the denial (SPEC §6: a denied call is reported).
    first_request, second_request, third_request = fake.requests()
    assert [m["content"] for m in second_request["messages"] if m["role"] == "tool"] == ["42"]
    assert [m["content"] for m in third_request["messages"] if m["role"] == "tool"] == [
        "42",
        "Error: The user denied this call: Enough arithmetic.",
    ]
    assert first_request["messages"] == [{"role": "user", "content": "6 * 7, then plus one?"}]


# --------------------------------------------------------------------------- known deviations


def test_an_approved_call_names_its_approval_request_from_its_first_event(api: Api, fake: FakeLLM) -> None:
    fake.script(tool_call_turn(("call_1", "calculator", '{"expression": "6 * 7"}')), text_turn("42"))
    paused = api.create_streamed(input="6 * 7?", tools=[GUARDED_BUILTIN]).events[-1]["response"]
    [request_item] = approval_requests(paused)

    resumed = api.submit_streamed(
        paused["id"], {"tool_approvals": [{"approval_request_id": request_item["id"], "approve": True}]}
    ).events

    added, done = (
        e["item"] for e in resumed if e["type"].startswith("response.output_item.") and e["output_index"] == 2
    )
    assert done["approval_request_id"] == request_item["id"]
    assert added["approval_request_id"] == request_item["id"]


def test_a_resumed_run_reports_no_usage_while_it_runs(api: Api, fake: FakeLLM) -> None:
    fake.script(tool_call_turn(("call_w", "get_weather", PARIS)), text_turn("Sunny."))
    first = api.create_streamed(input="Weather in Paris?", tools=[WEATHER_TOOL]).events
    assert first[0]["response"]["usage"] is None

    resumed = api.submit_streamed(first[0]["response"]["id"], outputs(("call_w", "sunny"))).events

    assert resumed[0]["type"] == "response.in_progress"
    assert resumed[0]["response"]["usage"] is None


def test_a_paused_run_once_cancelled_has_no_completed_at(api: Api, fake: FakeLLM) -> None:
    fake.script(tool_call_turn(("call_w", "get_weather", PARIS)))
    _, paused = api.create(input="Weather in Paris?", tools=[WEATHER_TOOL])
    assert isinstance(paused["completed_at"], int)

    _, cancelled = api.cancel(paused["id"])

    assert cancelled["status"] == "cancelled"
    assert cancelled["completed_at"] is None



def test_after_two_pauses_the_model_sees_each_turn_s_call_followed_by_its_output(api: Api, fake: FakeLLM) -> None:
    fake.script(
        tool_call_turn(("call_1", "get_weather", PARIS)),
        tool_call_turn(("call_2", "get_weather", ROME)),
        text_turn("Paris sunny, Rome rainy."),
        tool_call_turn(("call_1", "get_weather", PARIS)),
        tool_call_turn(("call_2", "get_weather", ROME)),
        text_turn("Paris sunny, Rome rainy."),
    )
    question = {"role": "user", "content": "Paris, then Rome?"}
    expected = [question, *weather_turns(("call_1", PARIS, "sunny"), ("call_2", ROME, "rainy"))]

    # The same history, built with two previous_response_id continuations (SPEC §9) ...
    _, first = api.create(input="Paris, then Rome?", tools=[WEATHER_TOOL])
    _, second = api.create(
        previous_response_id=first["id"],
        input=[{"type": "function_call_output", "call_id": "call_1", "output": "sunny"}],
        tools=[WEATHER_TOOL],
    )
    api.create(
        previous_response_id=second["id"],
        input=[{"type": "function_call_output", "call_id": "call_2", "output": "rainy"}],
        tools=[WEATHER_TOOL],
    )
    assert fake.requests()[2]["messages"] == expected

    # ... and with two submissions to one run (SPEC §8).
    _, paused = api.create(input="Paris, then Rome?", tools=[WEATHER_TOOL])
    api.submit(paused["id"], outputs(("call_1", "sunny")))
    status, done = api.submit(paused["id"], outputs(("call_2", "rainy")))
    assert status == 200, done

    assert fake.requests()[5]["messages"] == expected
