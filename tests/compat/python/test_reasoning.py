"""Reasoning models (SPEC §13) as the `openai` SDK (strict response validation) and the Agents SDK
see them: a model that reasons before it answers (here in `<think>` text, as a model served
without a reasoning parser writes it) gives a `reasoning` item before the message, streamed with
the standard events, counted in the usage, and never as answer text."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled
from agents.items import MessageOutputItem, ReasoningItem
from openai.types.responses import (
    ResponseContentPartAddedEvent,
    ResponseReasoningItem,
    ResponseReasoningSummaryPartAddedEvent,
    ResponseReasoningSummaryTextDeltaEvent,
    ResponseReasoningTextDeltaEvent,
    ResponseReasoningTextDoneEvent,
)

from harness import HTTP_TIMEOUT_S, MODEL, FakeLLM, api_key_for, text_turn

THOUGHT = ["The user greets me. ", "I greet back."]


def reasoning_turn(*answer: str) -> dict[str, Any]:
    """A turn that reasons (two reasoning deltas), then answers `answer`, reporting 9 reasoning tokens."""
    turn = text_turn(*answer, completion_tokens=12)
    turn["steps"] = [{"type": "reasoning", "text": t} for t in THOUGHT] + turn["steps"]
    turn["steps"][-1]["reasoning_tokens"] = 9
    return turn


def test_a_streamed_reasoning_item_is_typed_by_the_sdk_and_comes_before_the_answer(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    fake.script(reasoning_turn("Hello", " there."))

    with client.responses.create(model=MODEL, input="Hi", stream=True) as stream:
        events = list(stream)

    types = [e.type for e in events]
    assert types[2:9] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ], types
    added, part_added, first, second, done, part_done, item_done = events[2:9]
    assert isinstance(part_added, ResponseContentPartAddedEvent)
    assert (part_added.part.type, part_added.part.text) == ("reasoning_text", "")
    assert part_done.part.text == "".join(THOUGHT)
    assert isinstance(added.item, ResponseReasoningItem)
    assert added.item.id.startswith("rs_")
    assert isinstance(first, ResponseReasoningTextDeltaEvent)
    assert [first.delta, second.delta] == THOUGHT
    assert (first.item_id, first.output_index, first.content_index) == (added.item.id, 0, 0)
    assert isinstance(done, ResponseReasoningTextDoneEvent)
    assert done.text == "".join(THOUGHT)

    response = events[-1].response
    reasoning, message = response.output
    assert isinstance(reasoning, ResponseReasoningItem)
    assert reasoning.content is not None and reasoning.content[0].text == "".join(THOUGHT)
    assert response.output_text == "Hello there."
    assert response.usage is not None and response.usage.output_tokens_details.reasoning_tokens == 9


def test_the_stream_helper_accumulates_a_reasoning_summary_when_one_is_asked_for(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    fake.script(reasoning_turn("Hello."))

    with client.responses.stream(model=MODEL, input="Hi", reasoning={"summary": "auto"}) as stream:
        events = list(stream)
        final = stream.get_final_response()

    types = [e.type for e in events]
    part_added = types.index("response.reasoning_summary_part.added")
    assert part_added < types.index("response.reasoning_summary_text.delta"), types
    assert isinstance(events[part_added], ResponseReasoningSummaryPartAddedEvent)
    deltas = [e for e in events if isinstance(e, ResponseReasoningSummaryTextDeltaEvent)]
    assert [d.delta for d in deltas] == THOUGHT
    reasoning = final.output[0]
    assert isinstance(reasoning, ResponseReasoningItem)
    assert [s.text for s in reasoning.summary] == ["".join(THOUGHT)]
    assert final.output_text == "Hello."


def test_the_agents_sdk_shows_the_reasoning_item_before_the_message(base_url: str, fake: FakeLLM) -> None:
    fake.script(reasoning_turn("Hello."))
    set_tracing_disabled(True)

    async def main() -> Any:
        async with openai.AsyncOpenAI(
            base_url=f"{base_url}/v1",
            api_key=api_key_for(base_url),
            max_retries=0,
            timeout=HTTP_TIMEOUT_S,
            _strict_response_validation=True,
        ) as sdk:
            agent = Agent(name="greeter", model=OpenAIResponsesModel(model=MODEL, openai_client=sdk))
            result = Runner.run_streamed(agent, "Hi")
            names = [event.name async for event in result.stream_events() if event.type == "run_item_stream_event"]
            return result, names

    result, names = asyncio.run(main())
    assert names == ["reasoning_item_created", "message_output_created"], names
    reasoning, message = result.new_items
    assert isinstance(reasoning, ReasoningItem)
    assert reasoning.raw_item.content is not None and reasoning.raw_item.content[0].text == "".join(THOUGHT)
    assert isinstance(message, MessageOutputItem)
    assert result.final_output == "Hello."
