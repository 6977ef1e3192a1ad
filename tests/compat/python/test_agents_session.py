"""The OpenAI Agents SDK's `OpenAIConversationsSession` keeping a chat's history in a
conversation on switchyard (the Conversations API), stock settings: two user turns with a local
function tool in the first, then `get_items`, `pop_item`, `add_items` and `clear_session`.

The session reads the history before each run and sends it as the run's input, then adds the
run's new items (agents/run_internal/session_persistence.py): the conversation is all the
server keeps between turns."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest
from agents import Agent, OpenAIConversationsSession, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

from harness import HTTP_TIMEOUT_S, MODEL, FakeLLM, api_key_for, text_turn, tool_call_turn


@pytest.fixture(scope="module", autouse=True)
def no_tracing():
    # The SDK would otherwise export traces to api.openai.com.
    set_tracing_disabled(True)
    yield
    set_tracing_disabled(False)


def sdk_client(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{base_url}/v1",
        api_key=api_key_for(base_url),
        max_retries=0,
        timeout=HTTP_TIMEOUT_S,
        _strict_response_validation=True,
    )


def weather_agent(sdk: openai.AsyncOpenAI, cities: list[str]) -> Agent[Any]:
    """An agent with a local `get_weather` tool that notes each city it is asked for."""

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        cities.append(city)
        return f"Sunny in {city}"

    return Agent(
        name="weather",
        instructions="Answer with the help of your tools.",
        model=OpenAIResponsesModel(model=MODEL, openai_client=sdk),
        tools=[get_weather],
    )


def test_an_openai_conversations_session_carries_a_chat_with_a_tool_over_two_turns(
    client: openai.OpenAI, base_url: str, fake: FakeLLM
) -> None:
    fake.script(
        tool_call_turn(("call_w", "get_weather", '{"city": "Paris"}')),
        text_turn("It is sunny in Paris."),
        text_turn("Still sunny tomorrow."),
    )
    cities: list[str] = []

    async def main() -> dict[str, Any]:
        async with sdk_client(base_url) as sdk:
            agent = weather_agent(sdk, cities)
            session = OpenAIConversationsSession(openai_client=sdk)
            first = await Runner.run(agent, "What is the weather in Paris?", session=session)
            second = await Runner.run(agent, "And tomorrow?", session=session)
            seen: dict[str, Any] = {"first": first, "second": second, "id": session.session_id}
            seen["items"] = await session.get_items()
            seen["last_two"] = await session.get_items(limit=2)
            seen["popped"] = await session.pop_item()
            seen["after_pop"] = await session.get_items()
            await session.add_items([{"role": "user", "content": "A note for later."}])
            seen["with_note"] = await session.get_items()
            await session.clear_session()
            return seen

    seen = asyncio.run(main())
    assert seen["first"].final_output == "It is sunny in Paris."
    assert seen["second"].final_output == "Still sunny tomorrow."
    assert cities == ["Paris"]

    items = seen["items"]
    assert [(i.get("type", "message"), i.get("role")) for i in items] == [
        ("message", "user"),
        ("function_call", None),
        ("function_call_output", None),
        ("message", "assistant"),
        ("message", "user"),
        ("message", "assistant"),
    ]
    assert items[1]["call_id"] == "call_w" and items[2]["output"] == "Sunny in Paris"
    assert seen["last_two"] == items[-2:]

    # The second turn's model request carried the first turn, read back from the conversation.
    third = fake.requests()[2]["messages"]
    assert [m["role"] for m in third] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert third[3] == {"role": "tool", "tool_call_id": "call_w", "content": "Sunny in Paris"}
    assert third[4]["content"] == "It is sunny in Paris."
    assert third[5]["content"] == "And tomorrow?"

    assert seen["popped"] == items[-1]
    assert seen["after_pop"] == items[:-1]
    assert seen["with_note"][:-1] == items[:-1]
    assert seen["with_note"][-1]["content"] == [{"type": "input_text", "text": "A note for later."}]

    # clear_session deletes the conversation.
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(seen["id"])


def test_a_conversation_id_run_keeps_two_user_turns_and_a_local_tool_on_switchyard(
    client: openai.OpenAI, base_url: str, fake: FakeLLM
) -> None:
    """`Runner.run(…, conversation_id=…)`: the SDK sends only the new items with
    `conversation`, and switchyard keeps the history (the answered call in between too)."""
    fake.script(
        tool_call_turn(("call_c", "get_weather", '{"city": "Rome"}')),
        text_turn("Sunny in Rome."),
        text_turn("Warm tomorrow too."),
    )
    conversation = client.conversations.create()
    cities: list[str] = []

    async def main() -> tuple[Any, Any]:
        async with sdk_client(base_url) as sdk:
            agent = weather_agent(sdk, cities)
            first = await Runner.run(agent, "Weather in Rome?", conversation_id=conversation.id)
            second = await Runner.run(agent, "And tomorrow?", conversation_id=conversation.id)
            return first, second

    first, second = asyncio.run(main())
    assert first.final_output == "Sunny in Rome."
    assert second.final_output == "Warm tomorrow too."
    assert cities == ["Rome"]
    for result in (first, second):
        for raw in result.raw_responses:
            assert client.responses.retrieve(raw.response_id).conversation.id == conversation.id
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [(i.type, getattr(i, "role", None)) for i in items] == [
        ("message", "user"),
        ("function_call", None),
        ("function_call_output", None),
        ("message", "assistant"),
        ("message", "user"),
        ("message", "assistant"),
    ]
    # Each model request saw the whole conversation so far, from switchyard.
    requests = fake.requests()
    assert [m["role"] for m in requests[1]["messages"]] == ["system", "user", "assistant", "tool"]
    assert [m["role"] for m in requests[2]["messages"]] == [
        "system", "user", "assistant", "tool", "assistant", "user",
    ]
