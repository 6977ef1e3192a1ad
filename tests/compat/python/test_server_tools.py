"""Server tools (SPEC §5, §6, §7 D) through the `openai` Python SDK with strict validation.

switchyard runs the `builtin` tool server's calls itself and reports each one as an `mcp_call`
item; the first use of the server in a chain is preceded by an `mcp_list_tools` item.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import openai
import pytest
from openai.types.responses import ResponseStreamEvent

from harness import (
    BUILTIN_SERVER,
    BUILTIN_TOOL_NAMES,
    MCP_CALL_ID,
    MCP_LIST_TOOLS_ID,
    MESSAGE_ID,
    MODEL,
    FakeLLM,
    text_turn,
    tool_call_turn,
)

CALCULATOR_ARGUMENTS = '{"expression": "6 * 7"}'
CURRENT_TIME_ARGUMENTS = '{"timezone": "Europe/Paris"}'

# SPEC §5: the keys of the two item types, always present (null when not applicable).
MCP_CALL_KEYS = frozenset("id type status server_label name arguments output error approval_request_id".split())
# SPEC §5: `error` is left out when there is none (the Vercel AI SDK rejects `null` there).
MCP_LIST_TOOLS_KEYS = frozenset("id type status server_label tools".split())

LIST_TOOLS_EVENTS = [
    "response.output_item.added",
    "response.mcp_list_tools.in_progress",
    "response.mcp_list_tools.completed",
    "response.output_item.done",
]


def mcp_call_events(deltas: int, outcome: str = "completed") -> list[str]:
    """SPEC §7 D: the events of one server call whose arguments arrive in `deltas` deltas."""
    return [
        "response.output_item.added",
        *["response.mcp_call_arguments.delta"] * deltas,
        "response.mcp_call_arguments.done",
        "response.mcp_call.in_progress",
        f"response.mcp_call.{outcome}",
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


def split_by_item(events: list[ResponseStreamEvent]) -> list[list[ResponseStreamEvent]]:
    """The events between `response.in_progress` and the terminal event, one list per item.

    Asserts SPEC §7: items never interleave (every event naming an output index lies between
    that item's `output_item.added` and `output_item.done`, and names its id), and output
    indexes are append-only.
    """
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    items: list[list[ResponseStreamEvent]] = []
    open_item: Any = None
    for event in events[2:-1]:
        output_index = getattr(event, "output_index", None)
        assert output_index is not None, f"{event.type} carries no output_index"
        if event.type == "response.output_item.added":
            assert open_item is None, f"item {output_index} opened while item {open_item.id} is open"
            assert output_index == len(items), "output indexes are not append-only"
            open_item = event.item
            items.append([event])
            continue
        assert open_item is not None, f"{event.type} outside any item"
        assert output_index == len(items) - 1, f"{event.type} for item {output_index} inside item {len(items) - 1}"
        if event.type == "response.output_item.done":
            assert event.item.id == open_item.id
            open_item = None
        else:
            assert event.item_id == open_item.id, event.type
        items[-1].append(event)
    assert open_item is None, f"item {open_item.id} never done"
    return items


def assert_completed_mcp_call_events(events: list[ResponseStreamEvent], arguments: str, output_index: int) -> Any:
    """Checks one completed `mcp_call`'s events (SPEC §7 D) and returns its done item."""
    added, *deltas, arguments_done, in_progress, completed, done = events
    assert [e.type for e in events] == mcp_call_events(len(deltas))
    assert deltas, "no response.mcp_call_arguments.delta"
    item_id = added.item.id
    assert MCP_CALL_ID.match(item_id), item_id
    assert (added.item.type, added.item.status, added.item.server_label) == ("mcp_call", "in_progress", "builtin")
    assert (added.item.output, added.item.error) == (None, None)
    assert "".join(d.delta for d in deltas) == arguments_done.arguments == arguments
    for event in (*deltas, arguments_done, in_progress, completed):
        assert (event.item_id, event.output_index) == (item_id, output_index), event.type
    item = done.item
    assert (item.id, item.type, item.name, item.server_label) == (item_id, "mcp_call", added.item.name, "builtin")
    assert (item.arguments, item.status, item.error, item.approval_request_id) == (arguments, "completed", None, None)
    return item


def assert_current_time_in_paris(output: str | None) -> None:
    """SPEC §12: the current time as RFC 3339, in the zone asked for."""
    assert output is not None
    moment = datetime.fromisoformat(output)
    assert moment.utcoffset() == moment.astimezone(ZoneInfo("Europe/Paris")).utcoffset(), output
    assert abs(datetime.now(UTC) - moment) < timedelta(minutes=1), output


def assert_tool_results_sent_back(chat_request: dict[str, Any], results: dict[str, str]) -> None:
    """The model's next turn sees one assistant message with the calls, then each call's result."""
    user, assistant, *tool_messages = chat_request["messages"]
    assert (user["role"], assistant["role"]) == ("user", "assistant")
    calls = {call["id"]: call["function"] for call in assistant["tool_calls"]}
    assert sorted(f["name"] for f in calls.values()) == sorted(results)
    assert [m["role"] for m in tool_messages] == ["tool"] * len(results)
    assert {calls[m["tool_call_id"]]["name"]: m["content"] for m in tool_messages} == results


def test_two_server_calls_of_one_turn_stream_one_item_at_a_time_before_the_answer(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    fake.script(
        tool_call_turn(
            ("call_1", "calculator", CALCULATOR_ARGUMENTS), ("call_2", "current_time", CURRENT_TIME_ARGUMENTS)
        ),
        text_turn("6 * 7 is ", "42.", prompt_tokens=30, completion_tokens=4),
    )

    with client.responses.create(
        model=MODEL, input="What is 6 * 7, and the time in Paris?", tools=[BUILTIN_SERVER], stream=True
    ) as stream:
        events = list(stream)

    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.completed"
    list_tools, first_call, second_call, message = split_by_item(events)

    assert [e.type for e in list_tools] == LIST_TOOLS_EVENTS
    listing = list_tools[-1].item
    assert MCP_LIST_TOOLS_ID.match(listing.id), listing.id
    assert list_tools[0].item.id == listing.id
    assert (listing.type, listing.server_label, listing.error) == ("mcp_list_tools", "builtin", None)
    assert [tool.name for tool in listing.tools] == BUILTIN_TOOL_NAMES

    # The two calls run concurrently: whichever finished first was shown first.
    calls: dict[str, Any] = {}
    for output_index, call_events in ((1, first_call), (2, second_call)):
        name = call_events[0].item.name
        arguments = {"calculator": CALCULATOR_ARGUMENTS, "current_time": CURRENT_TIME_ARGUMENTS}[name]
        calls[name] = assert_completed_mcp_call_events(call_events, arguments, output_index)
    assert sorted(calls) == ["calculator", "current_time"]
    assert calls["calculator"].id != calls["current_time"].id
    assert calls["calculator"].output == "42"
    assert_current_time_in_paris(calls["current_time"].output)

    assert [e.type for e in message] == message_events(2)
    assert message[0].item.type == "message"
    assert MESSAGE_ID.match(message[0].item.id), message[0].item.id
    assert [e.delta for e in message if e.type == "response.output_text.delta"] == ["6 * 7 is ", "42."]

    final = events[-1].response
    assert final.status == "completed"
    assert final.required_action is None  # type: ignore[attr-defined]
    assert [item.type for item in final.output] == ["mcp_list_tools", "mcp_call", "mcp_call", "message"]
    assert [item.to_dict() for item in final.output] == [
        item_events[-1].item.to_dict() for item_events in (list_tools, first_call, second_call, message)
    ]
    assert final.output_text == "6 * 7 is 42."
    assert final.usage is not None
    # SPEC §4: usage is summed over both model turns.
    assert (final.usage.input_tokens, final.usage.output_tokens) == (10 + 30, 5 + 4)

    first_request, second_request = fake.requests()
    assert sorted(tool["function"]["name"] for tool in first_request["tools"]) == sorted(BUILTIN_TOOL_NAMES)
    assert_tool_results_sent_back(second_request, {"calculator": "42", "current_time": calls["current_time"].output})


def test_the_stream_helper_parses_a_server_tool_run_into_the_final_response(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    fake.script(
        tool_call_turn(
            ("call_1", "calculator", CALCULATOR_ARGUMENTS), ("call_2", "current_time", CURRENT_TIME_ARGUMENTS)
        ),
        text_turn("It is ", "42."),
    )

    with client.responses.stream(model=MODEL, input="6 * 7? And the time?", tools=[BUILTIN_SERVER]) as stream:
        types = [event.type for event in stream]
        final = stream.get_final_response()

    assert types.count("response.mcp_call.completed") == 2
    assert types[-1] == "response.completed"
    assert final.status == "completed"
    assert [item.type for item in final.output] == ["mcp_list_tools", "mcp_call", "mcp_call", "message"]
    calls = {item.name: item for item in final.output if item.type == "mcp_call"}
    assert calls["calculator"].output == "42"
    assert calls["calculator"].arguments == CALCULATOR_ARGUMENTS
    assert_current_time_in_paris(calls["current_time"].output)
    assert final.output_text == "It is 42."
    retrieved = client.responses.retrieve(final.id)
    # The helper's parsed message parts carry an extra `parsed`; the tool items are as stored.
    assert [item.to_dict() for item in retrieved.output[:3]] == [item.to_dict() for item in final.output[:3]]
    assert retrieved.output_text == final.output_text


def test_a_non_streaming_create_with_a_server_call_returns_every_item_validated(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    fake.script(tool_call_turn(("call_1", "calculator", CALCULATOR_ARGUMENTS)), text_turn("42", prompt_tokens=20))

    raw = client.responses.with_raw_response.create(model=MODEL, input="What is 6 * 7?", tools=[BUILTIN_SERVER])
    response = raw.parse()

    assert response.status == "completed"
    assert response.output_text == "42"
    listing, call, message = response.output
    assert listing.type == "mcp_list_tools"
    assert MCP_LIST_TOOLS_ID.match(listing.id), listing.id
    assert (listing.server_label, listing.error) == ("builtin", None)
    assert [tool.name for tool in listing.tools] == BUILTIN_TOOL_NAMES
    calculator = listing.tools[1]
    assert isinstance(calculator.description, str) and calculator.description
    # SPEC §12: the parameter schemas forbid unknown arguments.
    schema = calculator.input_schema
    assert isinstance(schema, dict)
    assert (schema["type"], schema["required"], schema["additionalProperties"]) == ("object", ["expression"], False)
    assert list(schema["properties"]) == ["expression"]
    assert schema["properties"]["expression"]["type"] == "string"
    assert call.type == "mcp_call"
    assert MCP_CALL_ID.match(call.id), call.id
    assert (call.server_label, call.name, call.arguments) == ("builtin", "calculator", CALCULATOR_ARGUMENTS)
    assert (call.output, call.error, call.status, call.approval_request_id) == ("42", None, "completed", None)
    assert message.type == "message"
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (10 + 20, 5 + 2)
    assert response.tools[0].to_dict() == BUILTIN_SERVER  # type: ignore[union-attr]

    raw_listing, raw_call, _ = raw.http_response.json()["output"]
    assert sorted(MCP_LIST_TOOLS_KEYS - raw_listing.keys()) == []
    assert "error" not in raw_listing
    assert all("annotations" not in tool for tool in raw_listing["tools"])
    assert sorted(MCP_CALL_KEYS - raw_call.keys()) == []
    assert (raw_call["error"], raw_call["approval_request_id"]) == (None, None)

    [_, second_request] = fake.requests()
    assert_tool_results_sent_back(second_request, {"calculator": "42"})


def test_a_failing_server_call_reports_a_structured_error_and_the_model_goes_on(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    fake.script(tool_call_turn(("call_1", "calculator", '{"expression": "1/0"}')), text_turn("Division by zero."))

    with client.responses.create(model=MODEL, input="1/0?", tools=[BUILTIN_SERVER], stream=True) as stream:
        events = list(stream)

    _, call_events, _ = split_by_item(events)
    added, *deltas, _, _, failed, done = call_events
    assert [e.type for e in call_events] == mcp_call_events(len(deltas), outcome="failed")
    assert (failed.item_id, failed.output_index) == (added.item.id, 1)
    item = done.item
    assert item.type == "mcp_call"
    assert (item.name, item.arguments, item.output, item.status) == (
        "calculator",
        '{"expression": "1/0"}',
        None,
        "failed",
    )
    # openai.types.responses.McpToolCallError is a union discriminated by `type`.
    assert item.error is not None
    assert item.error.type == "mcp_tool_execution_error"
    assert isinstance(item.error.content, str)
    assert "zero" in item.error.content.lower(), item.error.content

    final = events[-1].response
    assert final.status == "completed"
    assert final.error is None
    assert final.output_text == "Division by zero."
    assert final.output[1].to_dict() == item.to_dict()
    retrieved = client.responses.retrieve(final.id)
    assert retrieved.output[1].to_dict() == item.to_dict()

    # SPEC §6: a tool failure is a result the model sees, not an HTTP error.
    [_, second_request] = fake.requests()
    tool_message = second_request["messages"][-1]
    assert tool_message["role"] == "tool"
    assert item.error.content in tool_message["content"]


def test_a_continuation_does_not_list_the_server_tools_again(client: openai.OpenAI, fake: FakeLLM) -> None:
    fake.script(
        tool_call_turn(("call_1", "calculator", CALCULATOR_ARGUMENTS)),
        text_turn("42"),
        tool_call_turn(("call_2", "calculator", '{"expression": "42 + 1"}')),
        text_turn("43"),
    )

    first = client.responses.create(model=MODEL, input="6 * 7?", tools=[BUILTIN_SERVER])
    second = client.responses.create(
        model=MODEL, input="Plus one?", tools=[BUILTIN_SERVER], previous_response_id=first.id
    )

    assert [item.type for item in first.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert [item.type for item in second.output] == ["mcp_call", "message"]
    assert second.output[0].output == "43"  # type: ignore[union-attr]
    assert second.output_text == "43"
    # SPEC §9: the model is shown the whole chain, first run's tool call and result included.
    last_request = fake.requests()[-1]
    assert [m["role"] for m in last_request["messages"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
    ]
    assert [m["content"] for m in last_request["messages"] if m["role"] == "tool"] == ["42", "43"]


def test_allowed_tools_limits_what_the_model_is_shown_and_listed(client: openai.OpenAI, fake: FakeLLM) -> None:
    fake.script(tool_call_turn(("call_1", "calculator", CALCULATOR_ARGUMENTS)), text_turn("42"))

    response = client.responses.create(
        model=MODEL, input="6 * 7?", tools=[{**BUILTIN_SERVER, "allowed_tools": ["calculator"]}]
    )

    listing = response.output[0]
    assert listing.type == "mcp_list_tools"
    assert [tool.name for tool in listing.tools] == ["calculator"]
    assert response.output[1].output == "42"  # type: ignore[union-attr]
    first_request = fake.requests()[0]
    assert [tool["function"]["name"] for tool in first_request["tools"]] == ["calculator"]


def test_each_tool_turn_of_a_run_reaches_the_model_as_its_own_assistant_message(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    fake.script(
        tool_call_turn(("call_1", "calculator", CALCULATOR_ARGUMENTS)),
        tool_call_turn(("call_2", "calculator", '{"expression": "42 + 1"}')),
        text_turn("43"),
    )

    response = client.responses.create(model=MODEL, input="6 * 7, plus one?", tools=[BUILTIN_SERVER])

    assert [item.type for item in response.output] == ["mcp_list_tools", "mcp_call", "mcp_call", "message"]
    third_request = fake.requests()[2]
    assert [m["content"] for m in third_request["messages"] if m["role"] == "tool"] == ["42", "43"]
    # The second call was made after the model had seen the first result.
    assert [(m["role"], len(m.get("tool_calls") or [])) for m in third_request["messages"]] == [
        ("user", 0),
        ("assistant", 1),
        ("tool", 0),
        ("assistant", 1),
        ("tool", 0),
    ]


@pytest.mark.xfail(
    strict=True,
    raises=openai.APIResponseValidationError,
    reason="SPEC-vs-SDK conflict: SPEC §6 ends the run with incomplete_details.reason 'max_turns', which is not "
    "in the SDK's Literal (openai/types/responses/response.py IncompleteDetails.reason), so strict validation "
    "rejects the response",
)
def test_a_run_stopped_after_the_maximum_number_of_model_turns_parses_under_strict_validation(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    # switchyard's default maximum is 10 model turns (config/default.toml, tools.max_turns).
    fake.script(*[tool_call_turn((f"call_{turn}", "calculator", '{"expression": "1 + 1"}')) for turn in range(10)])

    raw = client.responses.with_raw_response.create(model=MODEL, input="Loop for ever.", tools=[BUILTIN_SERVER])

    body = raw.http_response.json()
    assert (body["status"], body["incomplete_details"]) == ("incomplete", {"reason": "max_turns"})
    assert [item["type"] for item in body["output"]] == ["mcp_list_tools", *["mcp_call"] * 10]
    assert len(fake.requests()) == 10
    response = raw.parse()  # raises APIResponseValidationError
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_turns"  # type: ignore[comparison-overlap]
