"""Streaming use of the Responses API: raw SDK iteration, the stream helper, SSE framing, failures."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from harness import MESSAGE_ID, MODEL, RESPONSE_ID, RESPONSE_KEYS, FakeLLM, sse, text_turn


def text_answer_event_types(deltas: int) -> list[str]:
    """SPEC §7 A: the event types of a text answer streamed as `deltas` deltas."""
    return [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * deltas,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]


def test_raw_stream_iteration_yields_the_spec_event_sequence(client: openai.OpenAI, fake: FakeLLM) -> None:
    chunks = ["Hel", "lo", " there"]
    fake.script(text_turn(*chunks, prompt_tokens=11, completion_tokens=3))

    with client.responses.create(model=MODEL, input="Hello", stream=True) as stream:
        events = list(stream)

    assert [e.type for e in events] == text_answer_event_types(len(chunks))
    assert [e.sequence_number for e in events] == list(range(len(events)))

    created, in_progress, item_added, part_added, *deltas, text_done, part_done, item_done, completed = events
    response_id = created.response.id
    assert RESPONSE_ID.match(response_id), response_id
    assert created.response.status == "in_progress"
    assert created.response.output == []
    assert created.response.usage is None
    assert in_progress.response.id == response_id
    assert in_progress.response.status == "in_progress"

    assert item_added.output_index == 0
    assert item_added.item.type == "message"
    assert item_added.item.role == "assistant"
    assert item_added.item.status == "in_progress"
    assert item_added.item.content == []
    item_id = item_added.item.id
    assert MESSAGE_ID.match(item_id), item_id

    assert (part_added.item_id, part_added.output_index, part_added.content_index) == (item_id, 0, 0)
    assert (part_added.part.type, part_added.part.text) == ("output_text", "")

    for delta, chunk in zip(deltas, chunks, strict=True):
        assert (delta.item_id, delta.output_index, delta.content_index) == (item_id, 0, 0)
        assert delta.delta == chunk
        assert delta.logprobs == []

    assert (text_done.item_id, text_done.output_index, text_done.content_index) == (item_id, 0, 0)
    assert text_done.text == "Hello there"

    assert (part_done.item_id, part_done.output_index, part_done.content_index) == (item_id, 0, 0)
    assert (part_done.part.type, part_done.part.text) == ("output_text", "Hello there")
    assert part_done.part.annotations == []

    assert item_done.output_index == 0
    assert item_done.item.id == item_id
    assert item_done.item.status == "completed"
    assert [(p.type, p.text) for p in item_done.item.content] == [("output_text", "Hello there")]

    final = completed.response
    assert final.id == response_id
    assert final.status == "completed"
    assert final.output_text == "Hello there"
    assert [item.to_dict() for item in final.output] == [item_done.item.to_dict()]
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.total_tokens) == (11, 3, 14)

    assert client.responses.retrieve(response_id).to_dict() == final.to_dict()


def test_the_stream_helper_accumulates_text_deltas_into_the_final_response(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    fake.script(text_turn("The ", "quick ", "fox.", prompt_tokens=7, completion_tokens=4, delay_ms=20))

    deltas: list[str] = []
    snapshots: list[str] = []
    done_texts: list[str] = []
    with client.responses.stream(model=MODEL, input="Tell me about the fox") as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
                snapshots.append(event.snapshot)
            elif event.type == "response.output_text.done":
                done_texts.append(event.text)
        final = stream.get_final_response()

    assert deltas == ["The ", "quick ", "fox."]
    assert snapshots == ["The ", "The quick ", "The quick fox."]
    assert done_texts == ["The quick fox."]
    assert "".join(deltas) == final.output_text == "The quick fox."
    assert final.status == "completed"
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (7, 4)
    assert client.responses.retrieve(final.id).output_text == "The quick fox."


def test_the_sse_framing_carries_event_names_ids_and_a_final_done(base_url: str, fake: FakeLLM) -> None:
    fake.script(text_turn("a", "b"))

    stream = sse("POST", f"{base_url}/v1/responses", {"model": MODEL, "input": "Hello", "stream": True})

    assert stream.status == 200, stream.body
    assert stream.headers["content-type"].startswith("text/event-stream")
    *events, done = stream.events
    assert done.data == "[DONE]"
    payloads = [e.json() for e in events]
    assert [p["type"] for p in payloads] == text_answer_event_types(2)
    for event, payload in zip(events, payloads, strict=True):
        assert event.event == payload["type"]
        assert event.id == str(payload["sequence_number"])
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    for payload in (payloads[0], payloads[1], payloads[-1]):
        missing = sorted(RESPONSE_KEYS - payload["response"].keys())
        assert missing == [], f"{payload['type']}.response lacks SPEC §4 keys: {missing}"
    assert payloads[0]["response"]["usage"] is None
    assert payloads[-1]["response"]["usage"]["total_tokens"] == 7


def test_a_finished_run_is_replayed_by_response_id_with_its_original_sequence_numbers(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    fake.script(text_turn("Re", "play"))
    with client.responses.create(model=MODEL, input="Hello", stream=True) as stream:
        original = list(stream)
    response_id = original[0].response.id
    numbered = [(e.type, e.sequence_number) for e in original]

    with client.responses.stream(response_id=response_id) as replay:
        assert [(e.type, e.sequence_number) for e in replay] == numbered
        assert replay.get_final_response().output_text == "Replay"

    # The helper replays from 0 and filters locally (openai/lib/_response_resources.py) ...
    with client.responses.stream(response_id=response_id, starting_after=3) as replay:
        assert [(e.type, e.sequence_number) for e in replay] == numbered[4:]

    # ... while a raw retrieve asks the server to skip the first events (SPEC §2).
    with client.responses.retrieve(response_id, stream=True, starting_after=3) as raw:
        assert [(e.type, e.sequence_number) for e in raw] == numbered[4:]


def test_a_replay_honours_the_last_event_id_header_like_starting_after(base_url: str, fake: FakeLLM) -> None:
    fake.script(text_turn("x", "y"))
    created = sse("POST", f"{base_url}/v1/responses", {"model": MODEL, "input": "Hello", "stream": True})
    original = created.payloads()
    response_id = original[0]["response"]["id"]

    replay = sse("GET", f"{base_url}/v1/responses/{response_id}?stream=true", headers={"Last-Event-ID": "5"})

    assert replay.status == 200, replay.body
    assert replay.events[-1].data == "[DONE]"
    assert replay.payloads() == original[6:]


def test_non_ascii_text_survives_streaming_unchanged(client: openai.OpenAI, fake: FakeLLM) -> None:
    chunks = ["Grüße, ", "東京 ", "🌍!", ' "quoted"\n', "\\ done"]
    fake.script(text_turn(*chunks))

    with client.responses.stream(model=MODEL, input="Say something non-ASCII") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()

    assert deltas == chunks
    assert final.output_text == "".join(chunks)
    assert client.responses.retrieve(final.id).output_text == "".join(chunks)


def test_an_upstream_error_while_streaming_raises_api_error_from_the_stream_iterator(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    fake.script({"steps": [{"type": "status", "status": 500, "body": {"error": {"message": "boom"}}}]})

    seen: list[Any] = []
    with (
        pytest.raises(openai.APIError) as raised,
        client.responses.create(model=MODEL, input="Hello", stream=True) as stream,
    ):
        for event in stream:
            seen.append(event)

    # The HTTP status was 200, so this is the plain APIError the SDK raises for an
    # `error` SSE event (openai/_streaming.py), not an APIStatusError.
    error = raised.value
    assert type(error) is openai.APIError
    assert [e.type for e in seen] == ["response.created", "response.in_progress"]
    assert isinstance(error.body, dict)
    assert {"type", "code", "message", "param"} <= error.body.keys()
    assert error.message == error.body["message"]
    assert isinstance(error.message, str) and error.message
    assert error.code == error.body["code"]

    failed = client.responses.retrieve(seen[0].response.id)
    assert failed.status == "failed"
    assert failed.error is not None
    assert (failed.error.code, failed.error.message) == ("server_error", error.message)
    assert failed.output == []


def assert_error_then_failed(payloads: list[dict[str, Any]]) -> dict[str, Any]:
    """SPEC §7 E: the stream ends with `error` (fields flat and nested) then `response.failed`."""
    *_, error, failed = payloads
    assert error["type"] == "error"
    assert isinstance(error["message"], str) and error["message"]
    nested = error["error"]
    assert {k: nested[k] for k in ("code", "message", "param")} == {k: error[k] for k in ("code", "message", "param")}
    assert isinstance(nested["type"], str) and nested["type"]
    assert failed["type"] == "response.failed"
    assert failed["response"]["status"] == "failed"
    # The Response's `error.code` must stay in the standard enum (strict SDKs validate it);
    # the `error` event may carry a finer code of its own, so only the messages must agree.
    assert failed["response"]["error"] == {"code": "server_error", "message": error["message"]}
    return error


def cut_after(*chunks: str) -> dict[str, Any]:
    """A model turn that streams `chunks`, then drops the connection.

    fake-llm loses chunks still in its write buffer when it cuts, so each step is
    followed by a short delay: the chunks reach switchyard before the cut does.
    """
    steps: list[dict[str, Any]] = []
    for chunk in chunks:
        steps += [{"type": "text", "text": chunk}, {"type": "delay", "ms": 30}]
    return {"steps": [*steps, {"type": "cut"}]}


def test_an_upstream_error_while_streaming_sends_error_then_response_failed_then_done(
    base_url: str, fake: FakeLLM
) -> None:
    fake.script({"steps": [{"type": "status", "status": 500, "body": {"error": {"message": "boom"}}}]})

    stream = sse("POST", f"{base_url}/v1/responses", {"model": MODEL, "input": "Hello", "stream": True})

    assert stream.status == 200, stream.body
    assert stream.events[-1].data == "[DONE]"
    payloads = stream.payloads()
    assert [p["type"] for p in payloads] == [
        "response.created",
        "response.in_progress",
        "error",
        "response.failed",
    ]
    assert [p["sequence_number"] for p in payloads] == [0, 1, 2, 3]
    assert_error_then_failed(payloads)
    assert payloads[-1]["response"]["output"] == []


def test_a_connection_cut_mid_answer_closes_the_message_incomplete_before_failing(base_url: str, fake: FakeLLM) -> None:
    fake.script(cut_after("Hel", "lo"))

    stream = sse("POST", f"{base_url}/v1/responses", {"model": MODEL, "input": "Hello", "stream": True})

    assert stream.status == 200, stream.body
    assert stream.events[-1].data == "[DONE]"
    payloads = stream.payloads()
    types = [p["type"] for p in payloads]
    assert types[:6] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
    ]
    assert [p["delta"] for p in payloads[4:6]] == ["Hel", "lo"]
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    # The open text, part and message are closed, in that order, before `error` (SPEC §7 E).
    assert types[6:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "error",
        "response.failed",
    ]
    assert payloads[6]["text"] == payloads[7]["part"]["text"] == "Hello"
    item = payloads[-3]["item"]
    assert item["status"] == "incomplete"
    assert [(p["type"], p["text"]) for p in item["content"]] == [("output_text", "Hello")]
    assert item["id"] == payloads[2]["item"]["id"]
    assert_error_then_failed(payloads)
    assert [(o["id"], o["status"]) for o in payloads[-1]["response"]["output"]] == [(item["id"], "incomplete")]


def test_a_connection_cut_mid_answer_raises_api_error_after_the_incomplete_item(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    fake.script(cut_after("Hel"))

    seen: list[Any] = []
    with (
        pytest.raises(openai.APIError) as raised,
        client.responses.create(model=MODEL, input="Hello", stream=True) as stream,
    ):
        for event in stream:
            seen.append(event)

    assert type(raised.value) is openai.APIError
    assert seen[-1].type == "response.output_item.done"
    assert seen[-1].item.status == "incomplete"
    failed = client.responses.retrieve(seen[0].response.id)
    assert failed.status == "failed"
    assert [(item.id, item.status) for item in failed.output] == [(seen[-1].item.id, "incomplete")]
    assert failed.error is not None
    assert (failed.error.code, failed.error.message) == ("server_error", raised.value.message)
