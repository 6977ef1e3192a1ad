"""A dropped stream picked up again with plain HTTP, as an SSE client does on reconnect: the
`Last-Event-ID` header names the last event it got (SPEC §7).

The client side is the `urllib` one of test_plain_http_submit.py.
"""

from __future__ import annotations

import json
import time

import pytest

from harness import MODEL, FakeLLM, text_turn
from test_plain_http_submit import Api, message_events, numbers, types


@pytest.fixture
def api(base_url: str) -> Api:
    return Api(base_url)


def test_a_dropped_background_stream_resumes_with_last_event_id_without_gap_or_repeat(api: Api, fake: FakeLLM) -> None:
    chunks = ["Al", "pha, ", "be", "ta, ", "gamma."]
    fake.script(text_turn(*chunks, delay_ms=200))

    body = {"model": MODEL, "input": "Greek letters", "background": True, "stream": True}
    with api.open_stream("POST", "/responses", body) as frames:
        head = []
        for frame in frames:
            head.append(frame)
            if [f.event for f in head].count("response.output_text.delta") == 2:
                break
    # The connection is closed here, with the run in the middle of its answer.
    first = [json.loads(f.data) for f in head]
    response_id = first[0]["response"]["id"]
    assert api.get(response_id)["status"] == "in_progress"

    resumed = api.stream("GET", f"/responses/{response_id}?stream=true", headers={"Last-Event-ID": head[-1].id})

    rest = resumed.events  # checks `[DONE]` exactly once, at the end
    assert numbers(first) == list(range(len(first)))
    assert numbers(rest) == list(range(len(first), len(first) + len(rest)))
    assert types(first + rest) == [
        "response.created",
        "response.queued",
        "response.in_progress",
        *message_events(len(chunks)),
        "response.completed",
    ]
    deltas = [e["delta"] for e in first + rest if e["type"] == "response.output_text.delta"]
    assert deltas == chunks
    assert rest[-1]["response"]["output"][0]["content"][0]["text"] == "Alpha, beta, gamma."
    assert api.replay(response_id) == first + rest
    assert len(fake.requests()) == 1


# --------------------------------------------------------------------------- known deviations


def test_a_reattach_after_the_last_event_of_a_stopped_run_gets_done_at_once(api: Api, fake: FakeLLM) -> None:
    fake.script(text_turn("Al", "pha."))
    events = api.create_streamed(input="Greek letters").events
    response_id = events[0]["response"]["id"]
    last = str(events[-1]["sequence_number"])
    assert events[-1]["type"] == "response.completed"

    started = time.monotonic()
    with api.open_stream("GET", f"/responses/{response_id}?stream=true", headers={"Last-Event-ID": last}) as frames:
        rest = [frame.data for frame in frames]
    elapsed = time.monotonic() - started

    assert rest == ["[DONE]"]
    assert elapsed < 1.0, f"the stream took {elapsed:.1f} s to say that nothing follows"
