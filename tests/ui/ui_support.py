"""Helpers for the run inspector's browser tests (test_inspector.py) and screenshots (screenshots.py).

The services themselves (fake-llm and switchyard on a fresh SQLite database, with an API key of
tenant `compat`) come from the client-compatibility harness, tests/compat/python/harness.py,
which is put on `sys.path` here rather than copied.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

UI_DIR = Path(__file__).resolve().parent
COMPAT_PYTHON = UI_DIR.parent / "compat" / "python"
if str(COMPAT_PYTHON) not in sys.path:
    sys.path.append(str(COMPAT_PYTHON))

from harness import (  # noqa: E402
    MODEL,
    REPO_ROOT,
    Services,
    request,
    text_turn,
    tool_call_turn,
)
from playwright.sync_api import (  # noqa: E402
    Browser,
    BrowserContext,
    ConsoleMessage,
    Dialog,
    Error,
    Locator,
    Page,
    Playwright,
    expect,
)

__all__ = [
    "MODEL",
    "REPO_ROOT",
    "Services",
    "request",
    "text_turn",
    "tool_call_turn",
]

# Playwright's auto-waiting assertions and actions wait this long (milliseconds).
TIMEOUT_MS = 10_000
# A run the tests watch going on from queued to its end gets this long.
RUN_TIMEOUT_MS = 20_000

# The list's columns (the UI contract), in order.
COLUMNS = ["Response", "Status", "Model", "Started", "Duration", "Tokens", "Tools called", "Waiting"]

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
# The compiled-in tool server, each call waiting for a person's approval.
GUARDED_BUILTIN: dict[str, Any] = {"type": "mcp", "server_label": "builtin", "require_approval": "always"}
# The same server, its calls run without asking.
OPEN_BUILTIN: dict[str, Any] = {"type": "mcp", "server_label": "builtin", "require_approval": "never"}


# --------------------------------------------------------------------------- the browser


def chromium_path() -> str:
    return os.environ.get("CHROMIUM") or "/usr/bin/chromium"


def launch_browser(playwright: Playwright) -> Browser:
    """Headless Chromium from the system (Playwright's own download is not used).

    Playwright passes `--no-sandbox` itself unless asked for the sandbox, which is what running
    as root needs; UI_CHROMIUM_ARGS adds further flags (space separated) if a machine needs them.
    """
    extra = os.environ.get("UI_CHROMIUM_ARGS", "").split()
    return playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=extra)


def new_context(browser: Browser, base_url: str, **options: Any) -> BrowserContext:
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 800}, **options)
    context.set_default_timeout(TIMEOUT_MS)
    context.set_default_navigation_timeout(TIMEOUT_MS)
    return context


def url_path(path: str) -> re.Pattern[str]:
    """A URL whose path is exactly `path` (any query or none)."""
    return re.compile(rf"^https?://[^/]+{re.escape(path)}(\?.*)?$")


def sign_in(page: Page, api_key: str) -> None:
    """Signs in through the sign-in form and lands on the run list."""
    page.goto("/ui")
    expect(page).to_have_url(url_path("/ui/sign-in"))
    page.get_by_label("API key", exact=True).fill(api_key)
    page.get_by_role("button", name="Sign in", exact=True).click()
    expect(page).to_have_url(url_path("/ui"))


class Watch:
    """What the pages of a context did that no page of the inspector should do."""

    def __init__(self) -> None:
        self.dialogs: list[str] = []
        self.page_errors: list[str] = []
        # Console errors that say the CSP blocked something: markup got through unescaped.
        self.csp_violations: list[str] = []
        self.console_errors: list[str] = []

    def attach(self, page: Page) -> None:
        def on_dialog(dialog: Dialog) -> None:
            self.dialogs.append(f"{dialog.type}: {dialog.message}")
            dialog.dismiss()

        def on_page_error(error: Error) -> None:
            self.page_errors.append(f"{page.url}: {error}")

        def on_console(message: ConsoleMessage) -> None:
            if message.type != "error":
                return
            text = f"{page.url}: {message.text}"
            self.console_errors.append(text)
            if re.search(r"Content.Security.Policy|Refused to (execute|load|apply)", message.text, re.I):
                self.csp_violations.append(text)

        page.on("dialog", on_dialog)
        page.on("pageerror", on_page_error)
        page.on("console", on_console)

    def check(self) -> None:
        assert self.dialogs == [], f"a page opened a dialog (injected script ran): {self.dialogs}"
        assert self.page_errors == [], f"uncaught errors in a page: {self.page_errors}"
        assert self.csp_violations == [], f"the CSP blocked something a page tried to run: {self.csp_violations}"


# --------------------------------------------------------------------------- the pages


def runs_table(page: Page) -> Locator:
    return page.get_by_role("table").filter(has=page.get_by_role("columnheader", name="Response", exact=True))


def row_of(page: Page, response_id: str) -> Locator:
    """The list's row of a response (its Response cell links to it)."""
    return runs_table(page).get_by_role("row").filter(has=page.get_by_role("link", name=response_id, exact=True))


def cell(row: Locator, column: str) -> Locator:
    return row.get_by_role("cell").nth(COLUMNS.index(column))


def status_of(page: Page) -> Locator:
    return page.get_by_test_id("status")


def timeline(page: Page) -> Locator:
    return page.get_by_test_id("timeline")


def run_path(response_id: str) -> str:
    return f"/ui/responses/{response_id}"


# --------------------------------------------------------------------------- the API


def api_create(services: Services, api_key: str | None = None, **body: Any) -> dict[str, Any]:
    """POST /v1/responses (with `api_key`, or the services' own key); the JSON reply."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    raw = request("POST", f"{services.base_url}/v1/responses", {"model": MODEL, **body}, headers)
    assert raw.status == 200, (raw.status, raw.body)
    return raw.json()


def api_get(services: Services, response_id: str) -> dict[str, Any]:
    raw = request("GET", f"{services.base_url}/v1/responses/{response_id}")
    assert raw.status == 200, (raw.status, raw.body)
    return raw.json()


def api_submit(services: Services, response_id: str, body: dict[str, Any]) -> dict[str, Any]:
    raw = request("POST", f"{services.base_url}/v1/responses/{response_id}/submit_tool_outputs", body)
    assert raw.status == 200, (raw.status, raw.body)
    return raw.json()


def wait_for(
    services: Services, response_id: str, done: Callable[[dict[str, Any]], bool], timeout_s: float = 20.0
) -> dict[str, Any]:
    """Polls GET /v1/responses/{id} until `done(response)`; the response."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = api_get(services, response_id)
        if done(response):
            return response
        if time.monotonic() > deadline:
            raise AssertionError(f"{response_id} did not get there in {timeout_s} s: {response}")
        time.sleep(0.1)


def settled(response: dict[str, Any]) -> bool:
    """Stopped for good, or paused for the client (`required_action` set)."""
    return response["status"] not in ("queued", "in_progress") or response.get("required_action") is not None


# --------------------------------------------------------------------------- screenshots


SHOTS = ["list-light.png", "list-dark.png", "run-light.png", "run-dark.png"]


def representative_runs(services: Services) -> dict[str, str]:
    """A few runs as an inspector shows them day to day; their ids by kind.

    failed: one whose upstream answered 500; completed: a text answer; answered: a call of the
    client's get_weather, answered, then the model's answer; paused: a call of the builtin
    calculator (run without asking), then one of get_weather waiting for the client's output.
    """
    base = services.base_url
    llm = f"{services.fake_url}/control"

    def script(*turns: dict[str, Any]) -> None:
        raw = request("POST", f"{llm}/turns", list(turns))
        assert raw.status in (200, 201, 204), (raw.status, raw.body)

    assert request("POST", f"{llm}/reset").status in (200, 204)
    ids: dict[str, str] = {}

    script({"steps": [{"type": "status", "status": 500, "body": {"error": {"message": "upstream overloaded"}}}]})
    failed = api_create(services, input="Summarise the incident report.", background=True, metadata={"team": "ops"})
    ids["failed"] = wait_for(services, failed["id"], lambda r: r["status"] == "failed")["id"]

    script(text_turn("Switchyard ", "keeps ", "each ", "run ", "in ", "its ", "own ", "lane.", completion_tokens=8))
    ids["completed"] = api_create(services, input="Describe switchyard in one line.", metadata={"team": "docs"})["id"]

    script(
        tool_call_turn(("call_sky", "get_weather", '{"city": "Paris"}')),
        text_turn("Sunny in Paris, ", "24 °C.", completion_tokens=6),
    )
    answered = api_create(
        services, input="What is the weather in Paris?", tools=[WEATHER_TOOL], metadata={"team": "docs"}
    )
    assert answered["required_action"] is not None, answered
    api_submit(services, answered["id"], {"tool_outputs": [{"tool_call_id": "call_sky", "output": "Sunny, 24 °C"}]})
    ids["answered"] = wait_for(services, answered["id"], lambda r: r["status"] == "completed")["id"]

    # The page the screenshots show: a server tool call run without asking, then a pause.
    script(
        tool_call_turn(("call_calc", "calculator", '{"expression": "6 * 7"}')),
        tool_call_turn(("call_rome", "get_weather", '{"city": "Rome"}')),
    )
    paused = api_create(
        services,
        input="What is 6 * 7, and what is the weather in Rome?",
        tools=[OPEN_BUILTIN, WEATHER_TOOL],
        metadata={"team": "docs", "ticket": "SY-42"},
    )
    assert paused["required_action"] is not None, paused
    ids["paused"] = paused["id"]
    return ids


def take_screenshots(browser: Browser, services: Services, out_dir: Path, run_id: str) -> list[Path]:
    """The run list and the page of `run_id`, in light and dark color schemes, as PNGs in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for scheme in ("light", "dark"):
        context = new_context(browser, services.base_url, color_scheme=scheme)
        try:
            page = context.new_page()
            sign_in(page, services.api_key)
            expect(row_of(page, run_id)).to_be_visible()
            path = out_dir / f"list-{scheme}.png"
            page.screenshot(path=str(path), full_page=True, animations="disabled")
            written.append(path)

            page.goto(run_path(run_id))
            expect(status_of(page)).to_be_visible()
            path = out_dir / f"run-{scheme}.png"
            page.screenshot(path=str(path), full_page=True, animations="disabled")
            written.append(path)
        finally:
            context.close()
    return written
