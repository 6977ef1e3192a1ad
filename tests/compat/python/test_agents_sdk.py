"""The OpenAI Agents SDK (`openai-agents`) driving switchyard through `OpenAIResponsesModel`.

A hosted MCP tool is run by switchyard inside one response (the SDK only reads the `mcp_call`
item); a local `@function_tool` is run by the SDK, which then sends a second request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import openai
import pytest
from agents import (
    Agent,
    HostedMCPTool,
    OpenAIResponsesModel,
    RunItemStreamEvent,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.items import MCPListToolsItem, MessageOutputItem, ToolCallItem, ToolCallOutputItem
from openai.types.responses import ResponseFunctionToolCall
from openai.types.responses.response_output_item import McpCall, McpListTools

from harness import (
    BUILTIN_SERVER,
    BUILTIN_TOOL_NAMES,
    HTTP_TIMEOUT_S,
    MODEL,
    FakeLLM,
    Services,
    request,
    text_turn,
    tool_call_turn,
)

INSTRUCTIONS = "Answer with the help of your tools."
T = TypeVar("T")


@pytest.fixture(scope="module", autouse=True)
def no_tracing() -> Iterator[None]:
    # The SDK would otherwise export traces to api.openai.com.
    set_tracing_disabled(True)
    yield
    set_tracing_disabled(False)


@asynccontextmanager
async def responses_model(base_url: str) -> AsyncIterator[OpenAIResponsesModel]:
    async with openai.AsyncOpenAI(
        base_url=f"{base_url}/v1",
        api_key="test",
        max_retries=0,
        timeout=HTTP_TIMEOUT_S,
        _strict_response_validation=True,
    ) as client:
        yield OpenAIResponsesModel(model=MODEL, openai_client=client)


def run(base_url: str, scenario: Callable[[OpenAIResponsesModel], Awaitable[T]]) -> T:
    """Runs `scenario` with a model on a fresh client, on a fresh event loop."""

    async def main() -> T:
        async with responses_model(base_url) as model:
            return await scenario(model)

    return asyncio.run(main())


def hosted_builtin_agent(model: OpenAIResponsesModel) -> Agent[Any]:
    return Agent(
        name="calculator",
        instructions=INSTRUCTIONS,
        model=model,
        tools=[HostedMCPTool(tool_config={"type": "mcp", "server_label": "builtin", "require_approval": "never"})],
    )


def script_calculation(fake: FakeLLM) -> None:
    fake.script(tool_call_turn(("call_1", "calculator", '{"expression": "6 * 7"}')), text_turn("6 * 7 = ", "42."))


def assert_switchyard_ran_the_calculator(fake: FakeLLM) -> None:
    first, second = fake.requests()
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert first["messages"][0]["content"] == INSTRUCTIONS
    assert sorted(t["function"]["name"] for t in first["tools"]) == sorted(BUILTIN_TOOL_NAMES)
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    [call] = second["messages"][2]["tool_calls"]
    assert call["function"] == {"name": "calculator", "arguments": '{"expression": "6 * 7"}'}
    assert second["messages"][3] == {"role": "tool", "tool_call_id": call["id"], "content": "42"}


def test_runner_run_with_a_hosted_mcp_tool_returns_the_answer_given_after_switchyard_ran_the_call(
    client: openai.OpenAI, base_url: str, fake: FakeLLM
) -> None:
    script_calculation(fake)

    result = run(base_url, lambda model: Runner.run(hosted_builtin_agent(model), "What is 6 * 7?"))

    assert result.final_output == "6 * 7 = 42."
    # One request: the tool loop ran inside switchyard, the SDK executed nothing.
    [model_response] = result.raw_responses
    listing, call, message = result.new_items
    assert isinstance(listing, MCPListToolsItem)
    assert isinstance(listing.raw_item, McpListTools)
    assert [tool.name for tool in listing.raw_item.tools] == BUILTIN_TOOL_NAMES
    assert isinstance(call, ToolCallItem)
    assert isinstance(call.raw_item, McpCall)
    assert (call.raw_item.name, call.raw_item.output, call.raw_item.status) == ("calculator", "42", "completed")
    assert isinstance(message, MessageOutputItem)
    assert (model_response.usage.input_tokens, model_response.usage.output_tokens) == (10 + 5, 5 + 2)

    # What the SDK sent: the hosted tool as declared, the input, the instructions.
    assert model_response.response_id is not None
    stored = client.responses.retrieve(model_response.response_id)
    assert [tool.to_dict() for tool in stored.tools] == [BUILTIN_SERVER]
    assert stored.instructions == INSTRUCTIONS
    assert stored.previous_response_id is None
    [user_input] = client.responses.input_items.list(stored.id)
    assert (user_input.type, user_input.role) == ("message", "user")  # type: ignore[union-attr]
    assert_switchyard_ran_the_calculator(fake)


def test_runner_run_streamed_with_a_hosted_mcp_tool_streams_the_call_and_the_answer(
    base_url: str, fake: FakeLLM
) -> None:
    script_calculation(fake)

    async def scenario(model: OpenAIResponsesModel) -> tuple[list[str], list[str], list[str], Any]:
        streamed = Runner.run_streamed(hosted_builtin_agent(model), "What is 6 * 7?")
        raw_types: list[str] = []
        item_names: list[str] = []
        deltas: list[str] = []
        async for event in streamed.stream_events():
            if event.type == "raw_response_event":
                raw_types.append(event.data.type)
                if event.data.type == "response.output_text.delta":
                    deltas.append(event.data.delta)
            elif isinstance(event, RunItemStreamEvent):
                item_names.append(event.name)
        return raw_types, item_names, deltas, streamed

    raw_types, item_names, deltas, streamed = run(base_url, scenario)

    assert raw_types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.output_item.done",
        "response.output_item.added",
        *["response.mcp_call_arguments.delta"] * raw_types.count("response.mcp_call_arguments.delta"),
        "response.mcp_call_arguments.done",
        "response.mcp_call.in_progress",
        "response.mcp_call.completed",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert raw_types.count("response.mcp_call_arguments.delta") >= 1
    assert item_names == ["mcp_list_tools", "tool_called", "message_output_created"]
    assert deltas == ["6 * 7 = ", "42."]
    assert streamed.is_complete
    assert streamed.final_output == "6 * 7 = 42."
    assert len(streamed.raw_responses) == 1
    assert_switchyard_ran_the_calculator(fake)


def weather_agent(model: OpenAIResponsesModel, cities: list[str]) -> Agent[Any]:
    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        cities.append(city)
        return f"Sunny in {city}"

    return Agent(name="weather", instructions=INSTRUCTIONS, model=model, tools=[get_weather])


def script_weather(fake: FakeLLM) -> None:
    fake.script(tool_call_turn(("call_w", "get_weather", '{"city": "Paris"}')), text_turn("It is sunny in Paris."))


def assert_the_model_saw_the_local_tool_result(fake: FakeLLM) -> None:
    first, second = fake.requests()
    [tool] = first["tools"]
    assert tool["function"]["name"] == "get_weather"
    assert tool["function"]["parameters"]["required"] == ["city"]
    assert second["messages"] == [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_w",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_w", "content": "Sunny in Paris"},
    ]


def assert_the_sdk_ran_the_function_tool(result: Any, cities: list[str]) -> tuple[str, str]:
    """Checks the items of a run with one local call; returns the ids of its two responses."""
    assert result.final_output == "It is sunny in Paris."
    assert cities == ["Paris"]
    call, output, message = result.new_items
    assert isinstance(call, ToolCallItem)
    assert isinstance(call.raw_item, ResponseFunctionToolCall)
    assert (call.raw_item.call_id, call.raw_item.name) == ("call_w", "get_weather")
    assert isinstance(output, ToolCallOutputItem)
    assert output.output == "Sunny in Paris"
    assert isinstance(message, MessageOutputItem)
    first, second = (r.response_id for r in result.raw_responses)
    assert first is not None and second is not None
    return first, second


def test_a_local_function_tool_runs_in_the_sdk_which_then_resends_the_whole_conversation(
    client: openai.OpenAI, base_url: str, fake: FakeLLM
) -> None:
    script_weather(fake)
    cities: list[str] = []

    result = run(base_url, lambda model: Runner.run(weather_agent(model, cities), "What is the weather in Paris?"))

    first_id, second_id = assert_the_sdk_ran_the_function_tool(result, cities)
    first = client.responses.retrieve(first_id)
    [call] = first.output
    assert (call.type, call.call_id) == ("function_call", "call_w")  # type: ignore[union-attr]
    # The SDK never reads `required_action`: the first run is left waiting for outputs (SPEC §3).
    assert first.status == "completed"
    assert first.required_action["submit_tool_outputs"]["tool_calls"] == [  # type: ignore[attr-defined]
        {"id": "call_w", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    ]
    second = client.responses.retrieve(second_id)
    # By default the SDK does not chain (agents/run_internal/run_loop.py tracks a server-side
    # conversation only with previous_response_id, auto_previous_response_id or conversation_id):
    # the second request carries the whole conversation, the earlier call item included.
    assert second.previous_response_id is None
    inputs = list(client.responses.input_items.list(second_id, order="asc"))
    assert [item.type for item in inputs] == ["message", "function_call", "function_call_output"]
    assert inputs[1].to_dict() == first.output[0].to_dict()
    assert (inputs[2].call_id, inputs[2].output) == ("call_w", "Sunny in Paris")  # type: ignore[union-attr]
    assert second.output_text == "It is sunny in Paris."
    assert_the_model_saw_the_local_tool_result(fake)


def test_with_auto_previous_response_id_the_sdk_continues_the_chain_with_only_the_tool_output(
    client: openai.OpenAI, base_url: str, fake: FakeLLM
) -> None:
    script_weather(fake)
    cities: list[str] = []

    result = run(
        base_url,
        lambda model: Runner.run(
            weather_agent(model, cities), "What is the weather in Paris?", auto_previous_response_id=True
        ),
    )

    first_id, second_id = assert_the_sdk_ran_the_function_tool(result, cities)
    second = client.responses.retrieve(second_id)
    assert second.previous_response_id == first_id
    [only_input] = client.responses.input_items.list(second_id)
    assert only_input.type == "function_call_output"
    assert (only_input.call_id, only_input.output) == ("call_w", "Sunny in Paris")  # type: ignore[union-attr]
    # SPEC §9: the continued run is completed and waits for nothing any more.
    first = client.responses.retrieve(first_id)
    assert first.status == "completed"
    assert first.required_action is None  # type: ignore[attr-defined]
    assert_the_model_saw_the_local_tool_result(fake)


@pytest.mark.xfail(
    strict=True,
    raises=openai.APIResponseValidationError,
    reason="SPEC-vs-SDK conflict: the run the SDK left waiting expires with incomplete_details.reason "
    "'tool_outputs_expired' (SPEC §3), which is not in the SDK's Literal "
    "(openai/types/responses/response.py IncompleteDetails.reason), so strict validation rejects the response",
)
def test_a_run_the_sdk_left_waiting_expires_into_a_response_that_parses_under_strict_validation(
    short_pause_services: Services,
) -> None:
    fake = FakeLLM(short_pause_services.fake_url)
    fake.reset()
    script_weather(fake)
    cities: list[str] = []

    result = run(
        short_pause_services.base_url,
        lambda model: Runner.run(weather_agent(model, cities), "What is the weather in Paris?"),
    )

    first_id, _ = assert_the_sdk_ran_the_function_tool(result, cities)
    assert_the_model_saw_the_local_tool_result(fake)
    url = f"{short_pause_services.base_url}/v1/responses/{first_id}"
    deadline = time.monotonic() + 10
    while (body := request("GET", url).json())["status"] == "completed":
        assert time.monotonic() < deadline, "the waiting run did not expire"
        time.sleep(0.1)
    # A response the client saw `completed` is now `incomplete` (SPEC §3: expired).
    assert (body["status"], body["incomplete_details"]) == ("incomplete", {"reason": "tool_outputs_expired"})
    with openai.OpenAI(
        base_url=f"{short_pause_services.base_url}/v1", api_key="test", max_retries=0, _strict_response_validation=True
    ) as strict_client:
        expired = strict_client.responses.retrieve(first_id)  # raises APIResponseValidationError
    assert expired.status == "incomplete"
