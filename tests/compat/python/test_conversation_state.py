"""What the model is shown: instructions, item-array input and `previous_response_id` chains."""

from __future__ import annotations

import uuid

import openai
import pytest

from harness import MODEL, FakeLLM, conversation, text_turn


def test_instructions_and_an_item_array_reach_the_model_in_order(client: openai.OpenAI, fake: FakeLLM) -> None:
    fake.script(text_turn("Salut."))

    response = client.responses.create(
        model=MODEL,
        instructions="You are a polite assistant.",
        input=[
            {"role": "developer", "content": "Answer in one word."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hi."}]},
            {"role": "assistant", "content": "Hi."},
            {"role": "user", "content": "Again, in French."},
        ],
    )

    assert response.instructions == "You are a polite assistant."
    assert response.output_text == "Salut."
    [upstream] = fake.requests()
    messages = conversation(upstream)
    assert messages[0] == ("system", "You are a polite assistant.")
    # Chat-completions servers know `developer` as a role, but many only `system`: both are fine.
    assert messages[1] in [("developer", "Answer in one word."), ("system", "Answer in one word.")]
    assert messages[2:] == [("user", "Say hi."), ("assistant", "Hi."), ("user", "Again, in French.")]


def test_input_items_keep_the_roles_and_texts_of_an_item_array(client: openai.OpenAI, fake: FakeLLM) -> None:
    fake.script(text_turn("Salut."))
    response = client.responses.create(
        model=MODEL,
        instructions="You are a polite assistant.",
        input=[
            {"role": "developer", "content": "Answer in one word."},
            {"role": "user", "content": "Say hi."},
            {"role": "assistant", "content": "Hi."},
            {"role": "user", "content": "Again, in French."},
        ],
    )

    items = client.responses.input_items.list(response.id, order="asc").data

    assert [(item.type, item.role) for item in items] == [
        ("message", "developer"),
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
    ]
    assert [[part.text for part in item.content] for item in items] == [
        ["Answer in one word."],
        ["Say hi."],
        ["Hi."],
        ["Again, in French."],
    ]


def test_previous_response_id_sends_the_earlier_turns_to_the_model(client: openai.OpenAI, fake: FakeLLM) -> None:
    fake.script(
        text_turn("Nice to meet you, Ada.", prompt_tokens=9, completion_tokens=6),
        text_turn("Your name is Ada.", prompt_tokens=20, completion_tokens=5),
    )

    first = client.responses.create(model=MODEL, instructions="Be brief.", input="My name is Ada.")
    second = client.responses.create(model=MODEL, previous_response_id=first.id, input="What is my name?")

    assert second.id != first.id
    assert second.previous_response_id == first.id
    assert second.instructions is None
    assert second.output_text == "Your name is Ada."
    assert second.usage is not None
    assert (second.usage.input_tokens, second.usage.output_tokens) == (20, 5)

    first_request, second_request = fake.requests()
    assert conversation(first_request) == [("system", "Be brief."), ("user", "My name is Ada.")]
    # SPEC §9: previous input + previous output + new input; instructions are not inherited.
    assert conversation(second_request) == [
        ("user", "My name is Ada."),
        ("assistant", "Nice to meet you, Ada."),
        ("user", "What is my name?"),
    ]


def test_a_chain_of_three_responses_carries_the_whole_history(client: openai.OpenAI, fake: FakeLLM) -> None:
    fake.script(text_turn("A1"), text_turn("A2"), text_turn("A3"))

    first = client.responses.create(model=MODEL, input="Q1")
    second = client.responses.create(model=MODEL, previous_response_id=first.id, input="Q2")
    with client.responses.stream(model=MODEL, previous_response_id=second.id, input="Q3") as stream:
        third = stream.get_final_response()

    assert third.previous_response_id == second.id
    assert third.output_text == "A3"
    assert conversation(fake.requests()[2]) == [
        ("user", "Q1"),
        ("assistant", "A1"),
        ("user", "Q2"),
        ("assistant", "A2"),
        ("user", "Q3"),
    ]


def test_an_unknown_previous_response_id_is_a_bad_request(client: openai.OpenAI, fake: FakeLLM) -> None:
    unknown = f"resp_{uuid.UUID('01900000-0000-7000-8000-000000000000').hex}"

    with pytest.raises(openai.BadRequestError) as error:
        client.responses.create(model=MODEL, previous_response_id=unknown, input="Hello")

    assert error.value.status_code == 400
    assert error.value.code == "previous_response_not_found"
    assert error.value.param == "previous_response_id"
    assert error.value.type == "invalid_request_error"
    assert error.value.body["message"] == f"Previous response with id '{unknown}' not found."
    assert fake.requests() == []
