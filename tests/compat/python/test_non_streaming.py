"""Non-streaming use of the Responses API through the `openai` Python SDK."""

from __future__ import annotations

import openai
import pytest

from harness import MESSAGE_ID, MODEL, RESPONSE_ID, RESPONSE_KEYS, FakeLLM, conversation, text_turn


def expected_usage(input_tokens: int, output_tokens: int) -> dict[str, object]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def test_a_non_streaming_create_returns_the_completed_scripted_answer(client: openai.OpenAI, fake: FakeLLM) -> None:
    fake.script(text_turn("Hi", " there", "!", prompt_tokens=5, completion_tokens=3))

    response = client.responses.create(model=MODEL, input="Hello")

    assert RESPONSE_ID.match(response.id), response.id
    assert response.object == "response"
    assert response.status == "completed"
    assert response.model == MODEL
    assert response.output_text == "Hi there!"
    assert response.error is None
    assert response.incomplete_details is None
    assert response.instructions is None
    assert response.previous_response_id is None
    assert response.tools == []
    assert response.tool_choice == "auto"
    assert response.parallel_tool_calls is True
    assert response.background is False
    assert response.store is True
    assert response.usage is not None
    assert response.usage.input_tokens == 5
    assert response.usage.output_tokens == 3
    assert response.usage.total_tokens == 8
    assert response.usage.input_tokens_details.cached_tokens == 0
    assert response.usage.output_tokens_details.reasoning_tokens == 0

    [message] = response.output
    assert message.type == "message"
    assert MESSAGE_ID.match(message.id), message.id
    assert message.role == "assistant"
    assert message.status == "completed"
    [part] = message.content
    assert part.type == "output_text"
    assert part.text == "Hi there!"
    assert part.annotations == []
    assert part.logprobs == []

    [upstream] = fake.requests()
    assert upstream["stream"] is True
    assert conversation(upstream) == [("user", "Hello")]


def test_the_raw_response_json_has_every_spec_key(client: openai.OpenAI, fake: FakeLLM) -> None:
    fake.script(text_turn("Hi", prompt_tokens=5, completion_tokens=2))

    raw = client.responses.with_raw_response.create(model=MODEL, input="Hello")

    assert raw.status_code == 200
    assert raw.headers["content-type"].startswith("application/json")
    body = raw.http_response.json()
    missing = sorted(RESPONSE_KEYS - body.keys())
    assert missing == [], f"Response object lacks SPEC §4 keys: {missing}"
    assert body["required_action"] is None
    assert body["usage"] == expected_usage(5, 2)
    assert isinstance(body["created_at"], int)
    assert isinstance(body["completed_at"], int)
    assert body["created_at"] <= body["completed_at"]
    assert raw.parse().output_text == "Hi"


def test_retrieve_returns_the_same_response_as_create(client: openai.OpenAI, fake: FakeLLM) -> None:
    fake.script(text_turn("Stored", " answer", prompt_tokens=4, completion_tokens=2))
    created = client.responses.create(model=MODEL, input="Remember this")

    retrieved = client.responses.retrieve(created.id)

    assert retrieved.to_dict() == created.to_dict()
    assert retrieved.output_text == "Stored answer"


def test_delete_removes_the_response_and_a_second_lookup_is_not_found(client: openai.OpenAI, fake: FakeLLM) -> None:
    fake.script(text_turn("Doomed"))
    response = client.responses.create(model=MODEL, input="Hello")

    deleted = client.responses.with_raw_response.delete(response.id)

    assert deleted.status_code == 200
    assert deleted.http_response.json() == {"id": response.id, "object": "response", "deleted": True}
    assert deleted.parse() is None

    with pytest.raises(openai.NotFoundError) as retrieve_error:
        client.responses.retrieve(response.id)
    assert retrieve_error.value.status_code == 404
    assert retrieve_error.value.type == "invalid_request_error"
    assert retrieve_error.value.body == {
        "message": f"Response with id '{response.id}' not found.",
        "type": "invalid_request_error",
        "param": None,
        "code": retrieve_error.value.body["code"],
    }

    with pytest.raises(openai.NotFoundError) as delete_error:
        client.responses.delete(response.id)
    assert delete_error.value.status_code == 404
    assert delete_error.value.body["message"] == f"Response with id '{response.id}' not found."


def test_input_items_are_listed_and_paginated_in_both_orders(client: openai.OpenAI, fake: FakeLLM) -> None:
    words = ["one", "two", "three", "four", "five"]
    fake.script(text_turn("ok"))
    response = client.responses.create(model=MODEL, input=[{"role": "user", "content": word} for word in words])

    first_page = client.responses.input_items.list(response.id, limit=2, order="asc")
    assert [item.content[0].text for item in first_page.data] == ["one", "two"]
    assert first_page.has_more is True

    everything = list(client.responses.input_items.list(response.id, limit=2, order="asc"))
    assert [item.type for item in everything] == ["message"] * 5
    assert [item.role for item in everything] == ["user"] * 5
    assert [[(part.type, part.text) for part in item.content] for item in everything] == [
        [("input_text", word)] for word in words
    ]
    ids = [item.id for item in everything]
    assert all(MESSAGE_ID.match(i) for i in ids), ids
    assert len(set(ids)) == 5

    newest_first = client.responses.input_items.list(response.id)
    assert [item.id for item in newest_first.data] == ids[::-1]
    assert newest_first.has_more is False

    after_second = client.responses.input_items.list(response.id, order="asc", after=ids[1])
    assert [item.id for item in after_second.data] == ids[2:]
    assert after_second.has_more is False

    def raw_page(**params: object) -> dict[str, object]:
        page = client.responses.input_items.with_raw_response.list(response.id, limit=2, order="asc", **params)
        body = page.http_response.json()
        assert body["object"] == "list"
        return {
            "ids": [item["id"] for item in body["data"]],
            "first_id": body["first_id"],
            "last_id": body["last_id"],
            "has_more": body["has_more"],
        }

    assert raw_page() == {"ids": ids[0:2], "first_id": ids[0], "last_id": ids[1], "has_more": True}
    assert raw_page(after=ids[1]) == {"ids": ids[2:4], "first_id": ids[2], "last_id": ids[3], "has_more": True}
    assert raw_page(after=ids[3]) == {"ids": ids[4:], "first_id": ids[4], "last_id": ids[4], "has_more": False}


@pytest.mark.parametrize("limit", [0, 101])
def test_an_input_items_limit_outside_1_to_100_is_a_bad_request(
    client: openai.OpenAI, fake: FakeLLM, limit: int
) -> None:
    fake.script(text_turn("ok"))
    response = client.responses.create(model=MODEL, input="Hello")

    with pytest.raises(openai.BadRequestError) as error:
        client.responses.input_items.list(response.id, limit=limit)

    assert error.value.type == "invalid_request_error"
    assert error.value.param == "limit"


def test_request_parameters_are_echoed_in_the_response(client: openai.OpenAI, fake: FakeLLM) -> None:
    fake.script(text_turn("ok"))

    response = client.responses.create(
        model=MODEL,
        input="Hello",
        metadata={"ticket": "T-1", "team": "compat"},
        temperature=0.25,
        top_p=0.5,
        max_output_tokens=64,
        parallel_tool_calls=False,
        user="user-42",
        safety_identifier="safety-42",
        prompt_cache_key="cache-42",
    )

    assert response.metadata == {"ticket": "T-1", "team": "compat"}
    assert (response.temperature, response.top_p) == (0.25, 0.5)
    assert response.max_output_tokens == 64
    assert response.parallel_tool_calls is False
    assert (response.user, response.safety_identifier, response.prompt_cache_key) == (
        "user-42",
        "safety-42",
        "cache-42",
    )
    [upstream] = fake.requests()
    assert (upstream["temperature"], upstream["top_p"]) == (0.25, 0.5)
    assert 64 in (upstream.get("max_tokens"), upstream.get("max_completion_tokens"))


def test_an_unknown_model_is_a_bad_request_naming_the_model(client: openai.OpenAI, fake: FakeLLM) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        client.responses.create(model="no-such-model-3000", input="Hello")

    assert error.value.status_code == 400
    assert error.value.type == "invalid_request_error"
    assert error.value.param == "model"
    assert "no-such-model-3000" in error.value.body["message"]
    assert fake.requests() == []


def test_an_unknown_model_is_a_bad_request_even_when_streaming(client: openai.OpenAI, fake: FakeLLM) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        client.responses.create(model="no-such-model-3000", input="Hello", stream=True)

    assert error.value.status_code == 400
    assert error.value.param == "model"
    assert "no-such-model-3000" in error.value.body["message"]
    assert fake.requests() == []


def test_an_upstream_failure_of_a_non_streaming_create_is_a_502(client: openai.OpenAI, fake: FakeLLM) -> None:
    fake.script({"steps": [{"type": "status", "status": 500, "body": {"error": {"message": "boom"}}}]})

    # SPEC §10: 502/504 when the upstream model fails before the stream starts.
    with pytest.raises(openai.InternalServerError) as error:
        client.responses.create(model=MODEL, input="Hello")

    assert error.value.status_code == 502
    assert error.value.type == "server_error"
    assert len(fake.requests()) == 1


def test_the_model_list_contains_the_routed_model(client: openai.OpenAI) -> None:
    models = client.models.list()

    assert MODEL in [model.id for model in models]
    assert all(model.object == "model" for model in models)
