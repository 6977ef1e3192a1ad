"""The run inspector (`/ui`) driven by a browser: headless Chromium through Playwright.

Against fake-llm and switchyard in key mode (tenant `compat`; a second tenant, `other`, for the
isolation test). Runs are made through the API, as a client makes them; the pages are watched
and answered as a person does. Every page of every test fails it if a dialog opens or a script
error escapes (conftest.py).
"""

from __future__ import annotations

import json
import re
import struct
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, BrowserContext, Locator, Page, Response, expect

from harness import FakeLLM, Services, text_turn, tool_call_turn
from ui_support import (
    COLUMNS,
    GUARDED_BUILTIN,
    RUN_TIMEOUT_MS,
    SHOTS,
    WEATHER_TOOL,
    Watch,
    api_create,
    api_get,
    cell,
    representative_runs,
    row_of,
    run_path,
    runs_table,
    sign_in,
    status_of,
    take_screenshots,
    timeline,
    url_path,
)

STILL_GOING = re.compile(r"^\s*(queued|in_progress)\s*$")
# 30 tokens in, 12 out: the total, or both.
ALONE = r"(?<![0-9A-Za-z]){}(?![0-9A-Za-z])"
TOKENS_42 = re.compile(ALONE.format(42) + "|" + ALONE.format(30) + ".*" + ALONE.format(12))
REFUSED_AGAIN = re.compile(r'Runs in status "[a-z_]+" do not accept tool outputs\.')


def exactly(text: str) -> re.Pattern[str]:
    """The whole (trimmed) text of an element."""
    return re.compile(rf"^\s*{re.escape(text)}\s*$")


def mark_page(page: Page) -> None:
    """Marks the document: the mark survives script updates, not a reload or navigation."""
    page.evaluate("() => { window.__inspectorTestMark = 'same document'; }")


def assert_same_document(page: Page) -> None:
    assert page.evaluate("() => window.__inspectorTestMark") == "same document", "the page was reloaded"


def body_rows(page: Page) -> Locator:
    """The list's rows of runs (not its header row)."""
    return runs_table(page).get_by_role("row").filter(has=page.get_by_role("cell"))


# --------------------------------------------------------------------------- signing in


def test_signing_in_refuses_a_wrong_key_then_takes_the_right_one_in_a_strict_http_only_cookie(
    context: BrowserContext, services: Services
) -> None:
    page = context.new_page()

    page.goto("/ui")

    expect(page).to_have_url(url_path("/ui/sign-in"))
    key_field = page.get_by_label("API key", exact=True)
    expect(key_field).to_have_attribute("type", "password")
    expect(page.get_by_role("alert")).to_have_count(0)

    key_field.fill("sk-this-is-not-a-key-of-this-service")
    page.get_by_role("button", name="Sign in", exact=True).click()

    expect(page.get_by_role("alert")).to_contain_text(re.compile(r"not valid|invalid|not accepted|incorrect", re.I))
    expect(page).to_have_url(url_path("/ui/sign-in"))
    expect(page.get_by_label("API key", exact=True)).to_be_visible()
    # No session came of it.
    page.goto("/ui")
    expect(page).to_have_url(url_path("/ui/sign-in"))

    before = {(c["name"], c["value"]) for c in context.cookies()}
    page.get_by_label("API key", exact=True).fill(services.api_key)
    page.get_by_role("button", name="Sign in", exact=True).click()

    expect(page).to_have_url(url_path("/ui"))
    expect(runs_table(page)).to_be_visible()
    expect(page.get_by_role("button", name="Sign out", exact=True)).to_be_visible()
    session = [c for c in context.cookies() if (c["name"], c["value"]) not in before]
    assert session, f"signing in set no cookie: {context.cookies()}"
    for cookie in session:
        assert cookie["httpOnly"] is True, f"the session cookie is readable by scripts: {cookie}"
        assert cookie["sameSite"] == "Strict", f"the session cookie is not SameSite=Strict: {cookie}"
    # A script of the page cannot read it.
    document_cookies = page.evaluate("() => document.cookie")
    assert all(c["value"] not in document_cookies for c in session if c["value"]), document_cookies

    page.get_by_role("button", name="Sign out", exact=True).click()
    page.goto("/ui")
    expect(page).to_have_url(url_path("/ui/sign-in"))


def test_the_list_has_the_columns_of_the_contract(page: Page) -> None:
    headers = runs_table(page).get_by_role("columnheader")
    expect(headers).to_have_text([exactly(name) for name in COLUMNS])


# --------------------------------------------------------------------------- watching runs


def test_a_streamed_run_appears_in_the_open_list_and_completes_without_a_reload(
    page: Page, services: Services, fake: FakeLLM
) -> None:
    expect(runs_table(page)).to_be_visible()
    mark_page(page)
    words = ["Slow ", "and ", "steady ", "wins ", "the ", "race, ", "every ", "single ", "time."]
    fake.script(text_turn(*words, prompt_tokens=30, completion_tokens=12, delay_ms=300))

    created = api_create(services, input="Tell me slowly.", stream=False, background=True)
    response_id = created["id"]
    assert created["status"] in ("queued", "in_progress"), created

    row = row_of(page, response_id)
    expect(row).to_be_visible()
    expect(cell(row, "Status")).to_have_text(STILL_GOING)
    expect(cell(row, "Status")).to_have_text(exactly("completed"), timeout=RUN_TIMEOUT_MS)
    expect(cell(row, "Model")).to_contain_text("gpt-4o-mini")
    expect(cell(row, "Tokens")).to_have_text(TOKENS_42)
    expect(cell(row, "Started")).not_to_be_empty()
    expect(cell(row, "Duration")).not_to_be_empty()
    expect(cell(row, "Waiting")).not_to_contain_text("Waiting for you")
    # Newest first: the run made last heads the list.
    expect(body_rows(page).first).to_contain_text(response_id)
    assert_same_document(page)

    row.get_by_role("link", name=response_id, exact=True).click()

    expect(page).to_have_url(url_path(run_path(response_id)))
    expect(page.get_by_role("heading", level=1)).to_contain_text(response_id)
    expect(status_of(page)).to_have_text(exactly("completed"))
    expect(timeline(page)).to_contain_text("".join(words))
    expect(page.locator("body")).to_contain_text(TOKENS_42)


def test_a_running_runs_page_follows_it_live_until_it_completes(
    page: Page, services: Services, fake: FakeLLM
) -> None:
    words = ["One ", "word ", "at ", "a ", "time, ", "until ", "the ", "end."]
    fake.script(text_turn(*words, delay_ms=400))
    response_id = api_create(services, input="Take your time.", background=True)["id"]

    page.goto(run_path(response_id))
    mark_page(page)

    expect(status_of(page)).to_have_text(STILL_GOING)
    expect(status_of(page)).to_have_text(exactly("completed"), timeout=RUN_TIMEOUT_MS)
    expect(timeline(page)).to_contain_text("".join(words))
    assert_same_document(page)


# --------------------------------------------------------------------------- answering pauses

PARIS = '{"city": "Paris"}'


def test_a_paused_run_is_answered_in_the_form_and_a_stale_tab_gets_the_apis_refusal(
    signed_in: BrowserContext, page: Page, services: Services, fake: FakeLLM
) -> None:
    fake.script(tool_call_turn(("call_1", "get_weather", PARIS)), text_turn("Sunny in Paris ", "today."))
    paused = api_create(services, input="Weather in Paris?", tools=[WEATHER_TOOL])
    response_id = paused["id"]
    assert paused["required_action"] is not None, paused

    page.goto("/ui")
    row = row_of(page, response_id)
    expect(cell(row, "Status")).to_have_text(exactly("requires_action"))
    expect(cell(row, "Waiting")).to_contain_text("Waiting for you")
    expect(cell(row, "Tools called")).to_have_text(re.compile(r"get_weather|\b1\b"))

    # A second tab opens the pause too, and stays on it.
    stale = signed_in.new_page()
    stale.goto(run_path(response_id))
    expect(status_of(stale)).to_have_text(exactly("requires_action"))
    expect(stale.get_by_label("get_weather", exact=True)).to_be_visible()

    row.get_by_role("link", name=response_id, exact=True).click()
    expect(page).to_have_url(url_path(run_path(response_id)))
    expect(status_of(page)).to_have_text(exactly("requires_action"))
    expect(timeline(page)).to_contain_text("get_weather")
    expect(timeline(page)).to_contain_text(PARIS)

    page.get_by_label("get_weather", exact=True).fill("22 °C and sunny")
    page.get_by_role("button", name="Submit outputs", exact=True).click()

    expect(page).to_have_url(url_path(run_path(response_id)))
    expect(status_of(page)).to_have_text(exactly("completed"), timeout=RUN_TIMEOUT_MS)
    expect(timeline(page)).to_contain_text("Sunny in Paris today.")
    expect(timeline(page)).to_contain_text("22 °C and sunny")
    expect(page.get_by_role("button", name="Submit outputs", exact=True)).to_have_count(0)
    # The output reached the model as the answer to its call.
    second = fake.requests()[1]["messages"]
    assert [(m["tool_call_id"], m["content"]) for m in second if m["role"] == "tool"] == [
        ("call_1", "22 °C and sunny")
    ]

    # The stale tab answers the same pause again: the API refuses, the page says why.
    expect(status_of(stale)).to_have_text(exactly("requires_action"))
    stale.get_by_label("get_weather", exact=True).fill("a second answer")
    stale.get_by_role("button", name="Submit outputs", exact=True).click()

    expect(stale.get_by_role("alert")).to_contain_text(REFUSED_AGAIN)
    done = api_get(services, response_id)
    assert (done["status"], done["required_action"]) == ("completed", None)
    assert len(fake.requests()) == 2, "the second answer reached the model"


def test_an_approved_builtin_calculator_call_runs_and_its_output_is_in_the_timeline(
    page: Page, services: Services, fake: FakeLLM
) -> None:
    fake.script(
        tool_call_turn(("call_c", "calculator", '{"expression": "6 * 7"}')),
        text_turn("That makes forty-two."),
    )
    paused = api_create(services, input="What is 6 * 7?", tools=[GUARDED_BUILTIN])
    response_id = paused["id"]
    assert paused["required_action"] is not None, paused

    page.goto(run_path(response_id))
    expect(status_of(page)).to_have_text(exactly("requires_action"))
    expect(page.get_by_role("button", name="Deny", exact=True)).to_be_visible()
    expect(page.locator("body")).to_contain_text("calculator")

    page.get_by_role("button", name="Approve", exact=True).click()

    expect(page).to_have_url(url_path(run_path(response_id)))
    expect(status_of(page)).to_have_text(exactly("completed"), timeout=RUN_TIMEOUT_MS)
    expect(timeline(page)).to_contain_text("That makes forty-two.")
    calculator_entries = timeline(page).get_by_role("listitem").filter(has_text="calculator")
    expect(calculator_entries.filter(has_text=re.compile(r"(?<!\d)42(?!\d)"))).not_to_have_count(0)
    expect(page.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
    call = next(item for item in api_get(services, response_id)["output"] if item["type"] == "mcp_call")
    assert (call["name"], call["output"], call["status"]) == ("calculator", "42", "completed")


def test_an_approved_call_of_a_real_mcp_server_runs_once_and_its_output_is_in_the_timeline(
    page: Page, services: Services, fake: FakeLLM
) -> None:
    # server-everything over stdio, configured with require_approval = "always".
    fake.script(
        tool_call_turn(("call_e", "echo", '{"message": "hello from the browser"}')),
        text_turn("It echoed."),
    )
    everything = {"type": "mcp", "server_label": "everything", "allowed_tools": ["echo"]}
    paused = api_create(services, input="Echo something.", tools=[everything])
    response_id = paused["id"]
    approvals = paused["required_action"]["submit_tool_outputs"]["approval_requests"]
    assert [(a["server_label"], a["name"]) for a in approvals] == [("everything", "echo")], paused

    page.goto(run_path(response_id))
    expect(status_of(page)).to_have_text(exactly("requires_action"))
    expect(page.locator("body")).to_contain_text("everything / echo")
    page.get_by_role("button", name="Approve", exact=True).click()

    expect(status_of(page)).to_have_text(exactly("completed"), timeout=RUN_TIMEOUT_MS)
    expect(timeline(page)).to_contain_text("Echo: hello from the browser")
    expect(timeline(page)).to_contain_text("It echoed.")
    calls = [item for item in api_get(services, response_id)["output"] if item["type"] == "mcp_call"]
    assert [(c["server_label"], c["name"], c["output"], c["status"]) for c in calls] == [
        ("everything", "echo", "Echo: hello from the browser", "completed")
    ]


def test_a_denied_builtin_calculator_call_does_not_run_and_the_run_goes_on(
    page: Page, services: Services, fake: FakeLLM
) -> None:
    fake.script(
        tool_call_turn(("call_c", "calculator", '{"expression": "6 * 7"}')),
        text_turn("I was not allowed to calculate."),
    )
    response_id = api_create(services, input="What is 6 * 7?", tools=[GUARDED_BUILTIN])["id"]

    page.goto(run_path(response_id))
    page.get_by_role("button", name="Deny", exact=True).click()

    expect(status_of(page)).to_have_text(exactly("completed"), timeout=RUN_TIMEOUT_MS)
    expect(timeline(page)).to_contain_text("I was not allowed to calculate.")
    call = next(item for item in api_get(services, response_id)["output"] if item["type"] == "mcp_call")
    assert (call["output"], call["status"]) == (None, "failed")


def test_a_running_run_is_cancelled_from_its_page(page: Page, services: Services, fake: FakeLLM) -> None:
    fake.script(text_turn(*["tick "] * 40, delay_ms=300))
    response_id = api_create(services, input="Count slowly.", background=True)["id"]

    page.goto(run_path(response_id))
    expect(status_of(page)).to_have_text(STILL_GOING)

    page.get_by_role("button", name="Cancel run", exact=True).click()

    expect(status_of(page)).to_have_text(exactly("cancelled"))
    expect(page.get_by_role("button", name="Cancel run", exact=True)).to_have_count(0)
    assert api_get(services, response_id)["status"] == "cancelled"
    page.goto("/ui")
    expect(cell(row_of(page, response_id), "Status")).to_have_text(exactly("cancelled"))


# --------------------------------------------------------------------------- the list's filters


def test_the_filters_narrow_the_list_by_metadata_waiting_and_status(
    page: Page, services: Services, fake: FakeLLM
) -> None:
    tag = uuid.uuid4().hex
    fake.script(
        text_turn("Done."), tool_call_turn(("call_o", "get_weather", '{"city": "Oslo"}')), text_turn("Untagged.")
    )
    done = api_create(services, input="Say done.", metadata={"batch": tag})["id"]
    waiting = api_create(services, input="Weather in Oslo?", tools=[WEATHER_TOOL], metadata={"batch": tag})["id"]
    other = api_create(services, input="Untagged.", background=True)["id"]

    def apply(status: str = "", waiting_only: bool = False) -> None:
        page.goto("/ui")
        page.get_by_label("Metadata", exact=True).fill(f"batch={tag}")
        if status:
            page.get_by_label("Status", exact=True).select_option(status)
        else:
            page.get_by_label("Status", exact=True).select_option(label="any")
        if waiting_only:
            page.get_by_label("Waiting for you", exact=True).check()
        page.get_by_role("button", name="Filter", exact=True).click()
        expect(page).to_have_url(re.compile(rf"[?&]metadata=batch(%3D|=){tag}(&|$)"))

    apply()
    expect(row_of(page, done)).to_be_visible()
    expect(row_of(page, waiting)).to_be_visible()
    expect(row_of(page, other)).to_have_count(0)
    expect(body_rows(page)).to_have_count(2)

    apply(waiting_only=True)
    expect(page).to_have_url(re.compile(r"[?&]waiting="))
    expect(row_of(page, waiting)).to_be_visible()
    expect(body_rows(page)).to_have_count(1)

    apply(status="completed")
    expect(page).to_have_url(re.compile(r"[?&]status=completed(&|$)"))
    expect(row_of(page, done)).to_be_visible()
    expect(body_rows(page)).to_have_count(1)

    page.goto(f"/ui?status=requires_action&metadata={urllib.parse.quote(f'batch={tag}')}")
    expect(row_of(page, waiting)).to_be_visible()
    expect(body_rows(page)).to_have_count(1)


# --------------------------------------------------------------------------- tenants


def test_another_tenants_run_is_unknown_here_and_missing_from_the_list(
    make_context: Any, page: Page, services: Services, fake: FakeLLM, other_key: str
) -> None:
    fake.script(text_turn("Ours."), text_turn("Theirs."))
    ours = api_create(services, input="Ours?")["id"]
    theirs = api_create(services, api_key=other_key, input="Theirs?")["id"]

    reply = page.goto(run_path(theirs))

    assert reply is not None and reply.status == 404
    expect(page.get_by_role("alert")).to_have_text(exactly(f"Response with id '{theirs}' not found."))
    expect(page.locator("body")).not_to_contain_text("Theirs.")

    unknown = f"resp_{uuid.uuid4().hex}"
    reply = page.goto(run_path(unknown))
    assert reply is not None and reply.status == 404
    expect(page.get_by_role("alert")).to_have_text(exactly(f"Response with id '{unknown}' not found."))

    page.goto("/ui")
    expect(row_of(page, ours)).to_be_visible()
    expect(row_of(page, theirs)).to_have_count(0)
    expect(page.locator("body")).not_to_contain_text(theirs)

    # And the other way round, for the other tenant's person.
    elsewhere = make_context().new_page()
    sign_in(elsewhere, other_key)
    expect(row_of(elsewhere, theirs)).to_be_visible()
    expect(row_of(elsewhere, ours)).to_have_count(0)
    assert elsewhere.goto(run_path(ours)).status == 404  # type: ignore[union-attr]
    expect(elsewhere.get_by_role("alert")).to_have_text(exactly(f"Response with id '{ours}' not found."))


# --------------------------------------------------------------------------- hostile content

PAYLOADS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '"><svg onload=alert(1)>',
    "javascript:alert(1)",
]
# Each place gets the payloads behind a word of its own, so that each is looked for where it belongs.
MODEL_TEXT = "model says " + " ~ ".join(PAYLOADS)
ARGUMENTS = json.dumps({"city": "arguments " + " ~ ".join(PAYLOADS)})
OUTPUT = "output " + " ~ ".join(PAYLOADS)
METADATA = {f"m{n}": f"meta {payload}" for n, payload in enumerate(PAYLOADS)}
METADATA["<img src=x onerror=alert(1)>"] = "key"
INPUT = "input " + " ~ ".join(PAYLOADS)
RAW_MARKUP = ["<script>alert", "<img src=x", "<svg onload", 'href="javascript:', "href='javascript:"]


def script_src(csp: str) -> str:
    directives = {}
    for directive in csp.split(";"):
        name, _, sources = directive.strip().partition(" ")
        if name:
            directives.setdefault(name.lower(), sources.strip())
    assert "script-src" in directives or "default-src" in directives, f"the CSP does not limit scripts: {csp}"
    return directives.get("script-src", directives.get("default-src", ""))


def assert_strict_csp(reply: Response | None) -> None:
    assert reply is not None
    csp = reply.headers.get("content-security-policy")
    assert csp, f"{reply.url} has no Content-Security-Policy header"
    scripts = script_src(csp)
    for loose in ("'unsafe-inline'", "'unsafe-eval'", "*", "data:", "http:", "https:"):
        assert loose not in scripts.split(), f"{reply.url}: script sources allow {loose}: {csp}"


def assert_nothing_injected(page: Page, reply: Response | None) -> None:
    """The page as served and as it stands: none of the payloads' markup became markup."""
    assert_strict_csp(reply)
    assert reply is not None
    html = reply.text()
    for markup in RAW_MARKUP:
        assert markup not in html, f"{reply.url} served {markup!r} unescaped"
    found = page.evaluate(
        """() => {
            const all = [...document.querySelectorAll('*')];
            return {
                inlineScripts: [...document.scripts].filter(s => !s.src).map(s => s.textContent),
                imgX: document.querySelectorAll('img[src="x"]').length,
                svgs: [...document.querySelectorAll('svg')].filter(s => s.outerHTML.includes('alert')).length,
                handlers: all.flatMap(el => [...el.attributes].filter(a => /^on/i.test(a.name))
                                                       .map(a => el.tagName + ' ' + a.name)),
                jsLinks: all.filter(el => /^\\s*javascript:/i.test(el.getAttribute('href') || '')
                                       || /^\\s*javascript:/i.test(el.getAttribute('src') || '')
                                       || /^\\s*javascript:/i.test(el.getAttribute('action') || ''))
                            .map(el => el.outerHTML),
                frames: document.querySelectorAll('iframe, object, embed').length,
            };
        }"""
    )
    assert found == {"inlineScripts": [], "imgX": 0, "svgs": 0, "handlers": [], "jsLinks": [], "frames": 0}, found


def test_hostile_content_is_shown_as_text_and_never_runs(
    page: Page, services: Services, fake: FakeLLM, watch: Watch
) -> None:
    # The model's text arrives in pieces that cut through the markup.
    chunks = [MODEL_TEXT[i : i + 7] for i in range(0, len(MODEL_TEXT), 7)]
    fake.script(tool_call_turn(("call_x", "get_weather", ARGUMENTS)), text_turn(*chunks))
    paused = api_create(services, input=INPUT, tools=[WEATHER_TOOL], metadata=METADATA)
    response_id = paused["id"]
    assert paused["required_action"] is not None, paused

    reply = page.goto("/ui")
    expect(row_of(page, response_id)).to_be_visible()
    assert_nothing_injected(page, reply)

    # Filters echo what they were given: hostile query strings too.
    for query in (
        {"model": PAYLOADS[0]},
        {"metadata": f"m1={PAYLOADS[2]}"},
        {"status": PAYLOADS[1]},
        {"created_after": PAYLOADS[2], "created_before": PAYLOADS[3]},
        {"metadata": f"m0=meta {PAYLOADS[0]}"},
    ):
        reply = page.goto("/ui?" + urllib.parse.urlencode(query))
        assert_nothing_injected(page, reply)
    # The last one matched the run's metadata exactly.
    expect(row_of(page, response_id)).to_be_visible()

    # The pause, with the hostile arguments in the timeline and the form.
    reply = page.goto(run_path(response_id))
    expect(status_of(page)).to_have_text(exactly("requires_action"))
    expect(timeline(page)).to_contain_text(ARGUMENTS)
    for value in METADATA.values():
        expect(page.locator("body")).to_contain_text(value)
    assert_nothing_injected(page, reply)

    # A person pastes hostile text as the call's output.
    page.get_by_label("get_weather", exact=True).fill(OUTPUT)
    page.get_by_role("button", name="Submit outputs", exact=True).click()

    expect(status_of(page)).to_have_text(exactly("completed"), timeout=RUN_TIMEOUT_MS)
    expect(timeline(page)).to_contain_text(MODEL_TEXT)
    expect(timeline(page)).to_contain_text(OUTPUT)
    expect(timeline(page)).to_contain_text(ARGUMENTS)
    reply = page.reload()
    expect(timeline(page)).to_contain_text(MODEL_TEXT)
    assert_nothing_injected(page, reply)

    reply = page.goto("/ui")
    expect(cell(row_of(page, response_id), "Status")).to_have_text(exactly("completed"))
    assert_nothing_injected(page, reply)
    assert watch.dialogs == [] and watch.page_errors == [] and watch.csp_violations == [], vars(watch)


def test_every_page_sends_a_strict_csp_and_has_no_inline_script(
    context: BrowserContext, services: Services, fake: FakeLLM
) -> None:
    fake.script(text_turn("Plain."))
    response_id = api_create(services, input="Plain?")["id"]
    page = context.new_page()

    assert_nothing_injected(page, page.goto("/ui/sign-in"))
    sign_in(page, services.api_key)
    assert_nothing_injected(page, page.reload())
    assert_nothing_injected(page, page.goto(run_path(response_id)))
    assert_nothing_injected(page, page.goto(run_path(f"resp_{uuid.uuid4().hex}")))


# --------------------------------------------------------------------------- screenshots


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def test_screenshots_of_the_list_and_a_run_in_light_and_dark(
    browser: Browser, services: Services, tmp_path: Path
) -> None:
    # What `tests/ui/run.sh --screenshots` writes to docs/ui/, here to a temporary folder.
    runs = representative_runs(services)

    written = take_screenshots(browser, services, tmp_path, runs["paused"])

    assert sorted(p.name for p in written) == sorted(SHOTS)
    for path in written:
        width, height = png_size(path)
        assert width == 1280 and height >= 400, (path, width, height)
