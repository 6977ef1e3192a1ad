"""`Idempotency-Key` on create through the `openai` Python SDK with strict validation.

The SDK has retry machinery for idempotency keys but sends none by itself: `_base_client.py`
makes up a key (`stainless-python-retry-<uuid4>`) for every non-GET request and keeps it across
that request's retries, yet writes it into a header only if the client names one in
`_idempotency_header`, and `openai.OpenAI` leaves that at None. A caller who wants retries to be
safe passes the header in `extra_headers`; it is part of the request options, so each retry of
the SDK sends it again, with the same body.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from harness import HTTP_TIMEOUT_S, MODEL, FakeLLM, Services, api_key_for, conversation, text_turn


def test_a_create_repeated_with_one_idempotency_key_gets_one_response_and_another_body_is_refused(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    fake.script(text_turn("Only ", "once."), text_turn("Never sent."))
    key = {"Idempotency-Key": "k1"}

    first = client.responses.create(model=MODEL, input="Say it once", extra_headers=key)
    again = client.responses.create(model=MODEL, input="Say it once", extra_headers=key)

    assert (first.status, first.output_text) == ("completed", "Only once.")
    assert again.id == first.id
    assert again.to_dict() == first.to_dict()
    assert [conversation(r) for r in fake.requests()] == [[("user", "Say it once")]]

    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=MODEL, input="Say something else", extra_headers=key)

    error = raised.value
    assert (error.status_code, error.type, error.code) == (400, "invalid_request_error", "idempotency_key_reused")
    assert "k1" in error.message
    assert len(fake.requests()) == 1
    # A key is one run: another key with the first body is a new one.
    other = client.responses.create(model=MODEL, input="Say it once", extra_headers={"Idempotency-Key": "k2"})
    assert other.id != first.id
    assert len(fake.requests()) == 2


def test_a_streamed_create_repeated_with_one_idempotency_key_replays_the_same_run(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    fake.script(text_turn("Str", "eamed."), text_turn("Never sent."))
    key = {"Idempotency-Key": "k-streamed"}

    with client.responses.create(model=MODEL, input="Stream it", stream=True, extra_headers=key) as stream:
        first = list(stream)
    with client.responses.create(model=MODEL, input="Stream it", stream=True, extra_headers=key) as stream:
        again = list(stream)

    assert first[-1].response.output_text == "Streamed."
    assert [e.to_dict() for e in again] == [e.to_dict() for e in first]
    assert len(fake.requests()) == 1


class RecordingClient:
    """An SDK client whose HTTP client records the headers of every request it sends."""

    def __init__(self, base_url: str, **options: Any) -> None:
        self.sent: list[dict[str, str]] = []
        http_client = openai.DefaultHttpxClient(event_hooks={"request": [lambda r: self.sent.append(dict(r.headers))]})
        self.client = openai.OpenAI(
            base_url=f"{base_url}/v1",
            api_key=api_key_for(base_url),
            timeout=HTTP_TIMEOUT_S,
            _strict_response_validation=True,
            http_client=http_client,
            **options,
        )


@pytest.fixture
def recording(services: Services) -> Iterator[RecordingClient]:
    recorder = RecordingClient(services.base_url, max_retries=3)
    with recorder.client:
        yield recorder


def test_the_sdk_sends_no_idempotency_key_of_its_own_so_two_creates_are_two_runs(
    recording: RecordingClient, fake: FakeLLM
) -> None:
    fake.script(text_turn("One."), text_turn("Two."))

    first = recording.client.responses.create(model=MODEL, input="Same question")
    second = recording.client.responses.create(model=MODEL, input="Same question")

    assert first.id != second.id
    assert (first.output_text, second.output_text) == ("One.", "Two.")
    assert [sorted(h for h in headers if "idempotency" in h) for headers in recording.sent] == [[], []]
    assert len(fake.requests()) == 2


def test_sdk_retries_of_a_timed_out_create_with_an_idempotency_key_get_the_run_of_the_first_attempt(
    recording: RecordingClient, fake: FakeLLM
) -> None:
    # The answer comes after 1.5 s; each attempt gives up after 0.5 s and the SDK tries again.
    fake.script(text_turn("Worth ", "the wait.", delay_ms=750), text_turn("Never sent."))

    response = recording.client.with_options(timeout=0.5).responses.create(
        model=MODEL, input="Take your time", extra_headers={"Idempotency-Key": "k-retried"}
    )

    assert (response.status, response.output_text) == ("completed", "Worth the wait.")
    attempts = recording.sent
    assert len(attempts) >= 2, "the first attempt did not time out"
    assert [h["x-stainless-retry-count"] for h in attempts] == [str(n) for n in range(len(attempts))]
    assert [h["idempotency-key"] for h in attempts] == ["k-retried"] * len(attempts)
    assert [conversation(r) for r in fake.requests()] == [[("user", "Take your time")]]
