"""Client-declared function tools (SPEC §3, §7 B, §9) through the `openai` Python SDK."""

from __future__ import annotations

from typing import Any

import openai

from harness import FUNCTION_CALL_ID, MODEL, FakeLLM, text_turn, tool_call_turn

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
WEATHER_ARGUMENTS = '{"city": "Paris"}'


def test_a_client_function_call_streams_live_and_the_client_continues_the_chain_with_its_output(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    fake.script(tool_call_turn(("call_w", "get_weather", WEATHER_ARGUMENTS)), text_turn("Sunny, 24 °C."))

    with client.responses.stream(model=MODEL, input="Weather in Paris?", tools=[WEATHER_TOOL]) as stream:
        events = list(stream)
        final = stream.get_final_response()

    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added, first_delta, second_delta, arguments_done, item_done = events[2:7]
    item_id = added.item.id
    assert FUNCTION_CALL_ID.match(item_id), item_id
    assert (added.item.type, added.item.call_id, added.item.name) == ("function_call", "call_w", "get_weather")
    assert (added.item.arguments, added.item.status) == ("", "in_progress")
    # The helper adds the accumulated arguments to each delta (openai/lib/streaming/responses).
    assert [(d.delta, d.snapshot) for d in (first_delta, second_delta)] == [
        ('{"city":', '{"city":'),
        (' "Paris"}', WEATHER_ARGUMENTS),
    ]
    for event in (first_delta, second_delta, arguments_done):
        assert (event.item_id, event.output_index) == (item_id, 0)
    assert (arguments_done.name, arguments_done.arguments) == ("get_weather", WEATHER_ARGUMENTS)
    assert (item_done.item.id, item_done.item.arguments, item_done.item.status) == (
        item_id,
        WEATHER_ARGUMENTS,
        "completed",
    )

    # The turn is complete; the call waits in `output` for the client.
    assert final.status == "completed"
    [call] = final.output
    assert call.type == "function_call"
    assert (call.id, call.call_id, call.arguments) == (item_id, "call_w", WEATHER_ARGUMENTS)
    assert call.parsed_arguments == {"city": "Paris"}  # a strict tool: parsed by the helper
    assert final.output_text == ""
    assert len(fake.requests()) == 1

    answer = client.responses.create(
        model=MODEL,
        previous_response_id=final.id,
        input=[{"type": "function_call_output", "call_id": "call_w", "output": "sunny, 24C"}],
        tools=[WEATHER_TOOL],
    )

    assert answer.output_text == "Sunny, 24 °C."
    assert answer.previous_response_id == final.id
    [_, second_request] = fake.requests()
    assert second_request["messages"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_w",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": WEATHER_ARGUMENTS},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_w", "content": "sunny, 24C"},
    ]


def test_a_client_function_call_leaves_the_response_waiting_with_required_action_naming_the_call(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    fake.script(tool_call_turn(("call_w", "get_weather", WEATHER_ARGUMENTS)))

    response = client.responses.create(model=MODEL, input="Weather in Paris?", tools=[WEATHER_TOOL])

    assert response.status == "completed"
    required_action = response.required_action  # type: ignore[attr-defined]
    assert required_action is not None
    assert isinstance(required_action["expires_at"], int)
    assert required_action == {
        "type": "submit_tool_outputs",
        "expires_at": required_action["expires_at"],
        "submit_tool_outputs": {
            "tool_calls": [
                {
                    "id": "call_w",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": WEATHER_ARGUMENTS},
                }
            ]
        },
    }
    assert client.responses.retrieve(response.id).required_action == required_action  # type: ignore[attr-defined]
