"""Models without native function calling (SPEC §15), through the openai SDK (strict parsing)
and the Agents SDK: switchyard's provider has a text `tool_protocol`, and fake-llm plays a model
that writes its calls in that syntax behind a server that refuses `tools` (`--tool-text`).
The clients use it exactly as a native model: the same requests, items and events.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from agents import Runner, set_tracing_disabled

from conftest import running_services
from harness import HTTP_TIMEOUT_S, MODEL, FakeLLM, Services, text_turn, tool_call_turn
from test_agents_sdk import (
    hosted_builtin_agent,
    run,
    script_calculation,
    script_weather,
    weather_agent,
)

PROTOCOLS = ["hermes", "vcp", "json"]
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
MARKERS = ["<tool_call", "</tool_call", "<<<[", "]>>>", "「始」", '"tool_calls"', '"response"']


@pytest.fixture(scope="module", autouse=True)
def no_tracing() -> Iterator[None]:
    # The SDK would otherwise export traces to api.openai.com.
    set_tracing_disabled(True)
    yield
    set_tracing_disabled(False)


@pytest.fixture(scope="module", params=PROTOCOLS)
def text_services(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    protocol = request.param
    with running_services(
        tmp_path_factory, fake_args=["--tool-text", protocol], SWITCHYARD__LLM__TOOL_PROTOCOL=protocol
    ) as svc:
        yield svc


@pytest.fixture
def text_fake(text_services: Services) -> FakeLLM:
    llm = FakeLLM(text_services.fake_url)
    llm.reset()
    return llm


@pytest.fixture
def text_client(text_services: Services) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{text_services.base_url}/v1",
        api_key=text_services.api_key,
        max_retries=0,
        timeout=HTTP_TIMEOUT_S,
        _strict_response_validation=True,
    ) as client:
        yield client


def assert_no_tools_went_upstream(fake: FakeLLM) -> None:
    for sent in fake.requests():
        assert "tools" not in sent
        assert all(m["role"] != "tool" for m in sent["messages"])


def test_a_streamed_function_call_and_its_continuation_parse_strictly(
    text_client: openai.OpenAI, text_fake: FakeLLM
) -> None:
    text_fake.script(
        tool_call_turn(("call_w", "get_weather", '{"city": "Paris"}')), text_turn("It is ", "sunny in Paris.")
    )
    events = list(
        text_client.responses.create(model=MODEL, input="Weather in Paris?", tools=[WEATHER_TOOL], stream=True)  # type: ignore[list-item]
    )
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert not any(marker in delta for delta in deltas for marker in MARKERS)
    completed = events[-1]
    assert completed.type == "response.completed"
    [call] = completed.response.output
    assert call.type == "function_call"
    assert (call.name, call.arguments) == ("get_weather", '{"city":"Paris"}')
    answer = text_client.responses.create(
        model=MODEL,
        previous_response_id=completed.response.id,
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 °C"}],
    )
    assert answer.output_text == "It is sunny in Paris."
    assert_no_tools_went_upstream(text_fake)


def test_the_agents_sdk_runs_a_local_function_tool(text_services: Services, text_fake: FakeLLM) -> None:
    script_weather(text_fake)
    cities: list[str] = []
    result = run(
        text_services.base_url,
        lambda model: Runner.run(weather_agent(model, cities), "What is the weather in Paris?"),
    )
    # The call's id is switchyard's own: a model writing calls in text gives none.
    assert result.final_output == "It is sunny in Paris."
    assert cities == ["Paris"]
    kinds = [item.type for item in result.new_items]
    assert kinds == ["tool_call_item", "tool_call_output_item", "message_output_item"]
    assert_no_tools_went_upstream(text_fake)


def test_the_agents_sdk_gets_a_hosted_mcp_call_run_by_switchyard(text_services: Services, text_fake: FakeLLM) -> None:
    script_calculation(text_fake)
    result = run(text_services.base_url, lambda model: Runner.run(hosted_builtin_agent(model), "What is 6 * 7?"))
    assert result.final_output == "6 * 7 = 42."
    calls = [item.raw_item for item in result.new_items if item.type == "tool_call_item"]
    assert [(c.name, c.output) for c in calls] == [("calculator", "42")]  # type: ignore[union-attr]
    assert_no_tools_went_upstream(text_fake)
