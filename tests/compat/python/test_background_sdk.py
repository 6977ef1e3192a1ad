"""Background runs through the `openai` Python SDK with strict validation: create, poll, stream,
reattach by response id, cancel while queued.

`responses.stream(response_id=..., starting_after=N)` asks the server for the whole log
(`GET /v1/responses/{id}?stream=true` without `starting_after`) and drops the events up to N
itself, so that its accumulator sees `response.created` first
(openai/lib/_response_resources.py, openai/lib/streaming/responses/_responses.py); the server
keeps the stream open and follows the run live until it stops.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import groupby

import openai
import pytest
from openai.types.responses import Response

from harness import HTTP_TIMEOUT_S, MODEL, RESPONSE_ID, FakeLLM, Services, conversation, text_turn
from test_streaming import text_answer_event_types

STOPPED = ("completed", "failed", "cancelled", "incomplete")


def background_text_answer_event_types(deltas: int) -> list[str]:
    """A background text answer: `response.queued` after `response.created`, then the usual events."""
    created, *rest = text_answer_event_types(deltas)
    return [created, "response.queued", *rest]


def poll(client: openai.OpenAI, response_id: str, until: tuple[str, ...] = STOPPED) -> list[Response]:
    """Retrieves the response every 50 ms until its status is one of `until`; returns every snapshot."""
    seen = [client.responses.retrieve(response_id)]
    deadline = time.monotonic() + HTTP_TIMEOUT_S
    while seen[-1].status not in until:
        assert time.monotonic() < deadline, f"{response_id} stayed {seen[-1].status}"
        time.sleep(0.05)
        seen.append(client.responses.retrieve(response_id))
    return seen


def test_a_background_create_returns_queued_at_once_and_polling_retrieve_reaches_the_answer(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    fake.script(text_turn("Done ", "in the ", "background.", prompt_tokens=6, completion_tokens=3, delay_ms=100))

    queued = client.responses.create(model=MODEL, input="Work on this", background=True)

    assert RESPONSE_ID.match(queued.id), queued.id
    assert (queued.status, queued.background) == ("queued", True)
    assert (queued.output, queued.usage, queued.error, queued.completed_at) == ([], None, None, None)

    snapshots = poll(client, queued.id)

    statuses = [s.status for s in snapshots]
    # Each status holds for a while, in this order; `queued` may already be over at the first poll.
    distinct = [status for status, _ in groupby(statuses)]
    assert distinct in (["queued", "in_progress", "completed"], ["in_progress", "completed"]), statuses
    final = snapshots[-1]
    assert (final.id, final.status, final.background) == (queued.id, "completed", True)
    assert final.output_text == "Done in the background."
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (6, 3)
    assert final.completed_at is not None and final.completed_at >= final.created_at
    assert conversation(fake.requests()[0]) == [("user", "Work on this")]


def test_a_background_create_with_store_false_is_a_bad_request_naming_store(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=MODEL, input="Hello", background=True, store=False)

    error = raised.value
    assert (error.status_code, error.type, error.param) == (400, "invalid_request_error", "store")
    assert fake.requests() == []


def test_a_raw_background_stream_starts_created_queued_then_in_progress(client: openai.OpenAI, fake: FakeLLM) -> None:
    fake.script(text_turn("Que", "ued."))

    with client.responses.create(model=MODEL, input="Hello", stream=True, background=True) as stream:
        events = list(stream)

    assert [e.type for e in events] == background_text_answer_event_types(2)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    created, queued, in_progress, *_, completed = events
    response_id = created.response.id
    assert (created.response.status, created.response.background) == ("queued", True)
    assert (queued.response.id, queued.response.status) == (response_id, "queued")
    assert (in_progress.response.id, in_progress.response.status) == (response_id, "in_progress")
    assert (completed.response.status, completed.response.output_text) == ("completed", "Queued.")
    assert client.responses.retrieve(response_id).to_dict() == completed.response.to_dict()


def test_the_stream_helper_reattaches_to_a_running_background_response_after_a_sequence_number(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    chunks = ["One, ", "two, ", "three, ", "four."]
    fake.script(text_turn(*chunks, delay_ms=250))
    queued = client.responses.create(model=MODEL, input="Count to four", background=True)

    # A first reader follows the run from its start and goes away after the first text delta.
    with client.responses.retrieve(queued.id, stream=True) as first:
        head = []
        for event in first:
            head.append(event)
            if event.type == "response.output_text.delta":
                break
    last = head[-1].sequence_number
    assert client.responses.retrieve(queued.id).status == "in_progress"

    with client.responses.stream(response_id=queued.id, starting_after=last) as stream:
        rest = list(stream)
        final = stream.get_final_response()

    expected = background_text_answer_event_types(len(chunks))
    assert [e.type for e in head] == expected[: len(head)]
    assert [e.type for e in rest] == expected[len(head) :]
    assert [e.sequence_number for e in rest] == list(range(last + 1, len(expected)))
    # The helper accumulated the events it did not show: each snapshot has the text from the start.
    deltas = [e for e in rest if e.type == "response.output_text.delta"]
    assert [e.delta for e in deltas] == chunks[1:]
    assert [e.snapshot for e in deltas] == ["One, two, ", "One, two, three, ", "One, two, three, four."]
    assert (final.id, final.status, final.background) == (queued.id, "completed", True)
    assert final.output_text == "One, two, three, four."
    with client.responses.retrieve(queued.id, stream=True) as replay:
        assert [(e.type, e.sequence_number) for e in replay] == [(e.type, e.sequence_number) for e in head + rest]
    assert len(fake.requests()) == 1


@pytest.fixture
def one_slot_client(one_slot_services: Services) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{one_slot_services.base_url}/v1",
        api_key=one_slot_services.api_key,
        max_retries=0,
        timeout=HTTP_TIMEOUT_S,
        _strict_response_validation=True,
    ) as c:
        yield c


def test_responses_cancel_cancels_a_queued_run_which_never_reaches_the_model(
    one_slot_services: Services, one_slot_client: openai.OpenAI
) -> None:
    client = one_slot_client
    fake = FakeLLM(one_slot_services.fake_url)
    fake.reset()
    fake.script({"steps": [{"type": "hang"}]}, text_turn("Third."))

    # The only background slot is taken by a run whose model never answers ...
    busy = client.responses.create(model=MODEL, input="first", background=True)
    poll(client, busy.id, until=("in_progress",))
    # ... so the next one waits in the queue.
    waiting = client.responses.create(model=MODEL, input="second", background=True)
    time.sleep(0.75)  # three claim intervals (config/default.toml: runs.claim_interval_ms = 250)
    assert client.responses.retrieve(waiting.id).status == "queued"

    cancelled = client.responses.cancel(waiting.id)

    assert (cancelled.id, cancelled.status, cancelled.background) == (waiting.id, "cancelled", True)
    assert (cancelled.output, cancelled.error, cancelled.usage) == ([], None, None)
    assert client.responses.retrieve(waiting.id).to_dict() == cancelled.to_dict()
    assert client.responses.cancel(waiting.id).to_dict() == cancelled.to_dict()
    # The standard has no cancelled event: the log ends with `response.failed` carrying the response.
    with client.responses.retrieve(waiting.id, stream=True) as log:
        events = list(log)
    assert [(e.type, e.sequence_number) for e in events] == [
        ("response.created", 0),
        ("response.queued", 1),
        ("response.failed", 2),
    ]
    assert events[-1].response.to_dict() == cancelled.to_dict()

    # Freeing the slot runs the next queued run, not the cancelled one.
    assert client.responses.cancel(busy.id).status == "cancelled"
    third = client.responses.create(model=MODEL, input="third", background=True)
    assert poll(client, third.id)[-1].output_text == "Third."
    assert client.responses.retrieve(waiting.id).status == "cancelled"
    assert [conversation(r) for r in fake.requests()] == [[("user", "first")], [("user", "third")]]
