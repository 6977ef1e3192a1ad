"""The OpenAI Agents SDK (`openai-agents`) driving switchyard through `OpenAIResponsesModel`.

A hosted MCP tool is run by switchyard inside one response (the SDK only reads the `mcp_call`
item); a local `@function_tool` is run by the SDK, which then sends a second request. A hosted
tool that requires approval pauses the response with an `mcp_approval_request` item; the SDK
asks `HostedMCPTool.on_approval_request` and answers with an `mcp_approval_response` input item in
its next request (agents/run_internal/tool_planning.py, execute_mcp_approval_requests).
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
from agents.items import (
    MCPApprovalRequestItem,
    MCPApprovalResponseItem,
    MCPListToolsItem,
    MessageOutputItem,
    ToolCallItem,
    ToolCallOutputItem,
)
from agents.tool import MCPToolApprovalFunctionResult, MCPToolApprovalRequest
from openai.types.responses import Response, ResponseCompletedEvent, ResponseFunctionToolCall
from openai.types.responses.response_output_item import McpApprovalRequest, McpCall, McpListTools

from harness import (
    api_key_for,
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
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
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
        api_key=api_key_for(base_url),
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
    # The SDK never reads `required_action`; its replay of the conversation answers the call, which
    # completes the first run as a continuation would (SPEC §9).
    assert first.status == "completed"
    assert first.required_action is None  # type: ignore[attr-defined]
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


def test_a_streamed_chained_run_shows_the_pause_and_the_continuation_completes_the_first_response(
    client: openai.OpenAI, base_url: str, fake: FakeLLM
) -> None:
    script_weather(fake)
    cities: list[str] = []

    async def scenario(model: OpenAIResponsesModel) -> tuple[list[Response], Any]:
        streamed = Runner.run_streamed(
            weather_agent(model, cities), "What is the weather in Paris?", auto_previous_response_id=True
        )
        completed: list[Response] = []
        async for event in streamed.stream_events():
            if event.type == "raw_response_event" and isinstance(event.data, ResponseCompletedEvent):
                completed.append(event.data.response)
        return completed, streamed

    (paused, answered), streamed = run(base_url, scenario)

    first_id, second_id = assert_the_sdk_ran_the_function_tool(streamed, cities)
    assert (paused.id, answered.id) == (first_id, second_id)
    # The first response paused (SPEC §3): the SDK saw `completed` and ran the call itself ...
    assert paused.status == "completed"
    assert paused.required_action["submit_tool_outputs"]["tool_calls"] == [  # type: ignore[attr-defined]
        {"id": "call_w", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    ]
    assert answered.required_action is None  # type: ignore[attr-defined]
    assert answered.previous_response_id == first_id
    # ... and its continuation answered the pause, which no longer waits (SPEC §9).
    first = client.responses.retrieve(first_id)
    assert (first.status, first.required_action) == ("completed", None)  # type: ignore[attr-defined]
    assert [item.to_dict() for item in first.output] == [item.to_dict() for item in paused.output]
    with pytest.raises(openai.BadRequestError) as refused:
        client.post(
            f"/responses/{first_id}/submit_tool_outputs",
            body={"tool_outputs": [{"tool_call_id": "call_w", "output": "again"}]},
            cast_to=Response,
        )
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["message"] == 'Runs in status "completed" do not accept tool outputs.'
    assert_the_model_saw_the_local_tool_result(fake)


GUARDED_BUILTIN: dict[str, Any] = {"type": "mcp", "server_label": "builtin", "require_approval": "always"}


def guarded_agent(
    model: OpenAIResponsesModel, answer: MCPToolApprovalFunctionResult, asked: list[McpApprovalRequest]
) -> Agent[Any]:
    def on_approval_request(request: MCPToolApprovalRequest) -> MCPToolApprovalFunctionResult:
        asked.append(request.data)
        return answer

    return Agent(
        name="calculator",
        instructions=INSTRUCTIONS,
        model=model,
        tools=[
            HostedMCPTool(
                tool_config=GUARDED_BUILTIN,  # type: ignore[arg-type]
                on_approval_request=on_approval_request,
            )
        ],
    )


def assert_an_approval_round_trip(
    client: openai.OpenAI, result: Any, asked: list[McpApprovalRequest], answer: dict[str, Any]
) -> McpCall:
    """Checks the items of a run whose one hosted call waited for approval; returns the call."""
    listing, request_item, response_item, call_item, message = result.new_items
    assert isinstance(listing, MCPListToolsItem)
    assert isinstance(request_item, MCPApprovalRequestItem)
    [request] = asked
    assert request_item.raw_item == request
    assert request.id.startswith("mcpr_")
    assert (request.server_label, request.name, request.arguments) == (
        "builtin",
        "calculator",
        '{"expression": "6 * 7"}',
    )
    assert isinstance(response_item, MCPApprovalResponseItem)
    assert response_item.raw_item == {"type": "mcp_approval_response", "approval_request_id": request.id, **answer}
    assert isinstance(call_item, ToolCallItem)
    call = call_item.raw_item
    assert isinstance(call, McpCall)
    assert (call.name, call.arguments, call.approval_request_id) == (
        "calculator",
        '{"expression": "6 * 7"}',
        request.id,
    )
    assert isinstance(message, MessageOutputItem)

    # Two responses: the paused one, and its continuation carrying only the approval response.
    first_id, second_id = (r.response_id for r in result.raw_responses)
    assert first_id is not None and second_id is not None
    first = client.responses.retrieve(first_id)
    assert [item.type for item in first.output] == ["mcp_list_tools", "mcp_approval_request"]
    assert (first.status, first.required_action) == ("completed", None)  # type: ignore[attr-defined]
    second = client.responses.retrieve(second_id)
    assert second.previous_response_id == first_id
    [only_input] = client.responses.input_items.list(second_id)
    assert only_input.type == "mcp_approval_response"
    assert (only_input.approval_request_id, only_input.approve, only_input.reason) == (  # type: ignore[union-attr]
        request.id,
        answer["approve"],
        answer.get("reason"),
    )
    assert [item.type for item in second.output] == ["mcp_call", "message"]
    assert second.output[0].to_dict() == call.to_dict()
    return call


def test_an_approval_callback_approves_a_hosted_call_which_switchyard_runs_in_the_continuation(
    client: openai.OpenAI, base_url: str, fake: FakeLLM
) -> None:
    fake.script(tool_call_turn(("call_1", "calculator", '{"expression": "6 * 7"}')), text_turn("6 * 7 = 42."))
    asked: list[McpApprovalRequest] = []

    result = run(
        base_url,
        lambda model: Runner.run(
            guarded_agent(model, {"approve": True}, asked), "What is 6 * 7?", auto_previous_response_id=True
        ),
    )

    assert result.final_output == "6 * 7 = 42."
    call = assert_an_approval_round_trip(client, result, asked, {"approve": True})
    assert (call.status, call.output, call.error) == ("completed", "42", None)
    first_request, second_request = fake.requests()
    assert [m["role"] for m in first_request["messages"]] == ["system", "user"]
    *_, assistant, tool = second_request["messages"]
    [model_call] = assistant["tool_calls"]
    assert model_call["function"] == {"name": "calculator", "arguments": '{"expression": "6 * 7"}'}
    assert tool == {"role": "tool", "tool_call_id": model_call["id"], "content": "42"}


def test_an_approval_callback_denies_a_hosted_call_and_the_model_is_told_the_reason(
    client: openai.OpenAI, base_url: str, fake: FakeLLM
) -> None:
    fake.script(tool_call_turn(("call_1", "calculator", '{"expression": "6 * 7"}')), text_turn("I may not compute."))
    asked: list[McpApprovalRequest] = []

    async def scenario(model: OpenAIResponsesModel) -> tuple[list[str], Any]:
        streamed = Runner.run_streamed(
            guarded_agent(model, {"approve": False, "reason": "Not today."}, asked),
            "What is 6 * 7?",
            auto_previous_response_id=True,
        )
        names = [event.name async for event in streamed.stream_events() if isinstance(event, RunItemStreamEvent)]
        return names, streamed

    names, streamed = run(base_url, scenario)

    assert streamed.final_output == "I may not compute."
    assert names == [
        "mcp_list_tools",
        "mcp_approval_requested",
        "mcp_approval_response",
        "tool_called",
        "message_output_created",
    ]
    call = assert_an_approval_round_trip(client, streamed, asked, {"approve": False, "reason": "Not today."})
    assert (call.status, call.output) == ("failed", None)
    assert call.error is not None
    assert (call.error.type, call.error.content) == (  # type: ignore[union-attr]
        "mcp_tool_execution_error",
        "The user denied this call: Not today.",
    )
    [_, second_request] = fake.requests()
    assert second_request["messages"][-1]["content"] == "Error: The user denied this call: Not today."


def test_an_approval_callback_without_chaining_gets_the_call_run(base_url: str, fake: FakeLLM) -> None:
    # Without chaining (the SDK's default), the SDK answers an approval by resending the whole
    # conversation with the mcp_approval_request item and its mcp_approval_response (SPEC §9).
    fake.script(tool_call_turn(("call_1", "calculator", '{"expression": "6 * 7"}')), text_turn("6 * 7 = 42."))
    asked: list[McpApprovalRequest] = []

    result = run(
        base_url, lambda model: Runner.run(guarded_agent(model, {"approve": True}, asked), "What is 6 * 7?")
    )

    assert result.final_output == "6 * 7 = 42."
    assert len(asked) == 1
    [_, second_request] = fake.requests()
    call_id = second_request["messages"][-2]["tool_calls"][0]["id"]
    assert second_request["messages"][-1] == {"role": "tool", "tool_call_id": call_id, "content": "42"}


@pytest.mark.xfail(
    strict=True,
    raises=openai.APIResponseValidationError,
    reason="SPEC-vs-SDK conflict: a run left waiting expires with incomplete_details.reason "
    "'tool_outputs_expired' (SPEC §3), which is not in the SDK's Literal "
    "(openai/types/responses/response.py IncompleteDetails.reason), so strict validation rejects the response",
)
def test_a_run_left_waiting_expires_into_a_response_that_parses_under_strict_validation(
    short_pause_services: Services,
) -> None:
    fake = FakeLLM(short_pause_services.fake_url)
    fake.reset()
    script_weather(fake)
    with openai.OpenAI(base_url=f"{short_pause_services.base_url}/v1", api_key=short_pause_services.api_key, max_retries=0) as client:
        paused = client.responses.create(model=MODEL, input="What is the weather in Paris?", tools=[WEATHER_TOOL])
    # Nobody answers the call.
    first_id = paused.id
    url = f"{short_pause_services.base_url}/v1/responses/{first_id}"
    deadline = time.monotonic() + 10
    while (body := request("GET", url).json())["status"] == "completed":
        assert time.monotonic() < deadline, "the waiting run did not expire"
        time.sleep(0.1)
    # A response the client saw `completed` is now `incomplete` (SPEC §3: expired).
    assert (body["status"], body["incomplete_details"]) == ("incomplete", {"reason": "tool_outputs_expired"})
    with openai.OpenAI(
        base_url=f"{short_pause_services.base_url}/v1",
        api_key=short_pause_services.api_key,
        max_retries=0,
        _strict_response_validation=True,
    ) as strict_client:
        expired = strict_client.responses.retrieve(first_id)  # raises APIResponseValidationError
    assert expired.status == "incomplete"
