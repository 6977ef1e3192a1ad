"""Fixtures of the run inspector's browser tests: the services (from the client-compatibility
harness, tests/compat/python/harness.py), a headless system Chromium driven by Playwright, and
browser contexts signed in with an API key.

Every page of every test is watched: a JavaScript dialog (`alert(1)` from injected markup) or an
uncaught page error fails the test. On a failure, a screenshot and the HTML of each open page
are kept in UI_ARTIFACTS (default tests/ui/artifacts/).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Error, Page, Playwright, expect
from playwright.sync_api import sync_playwright

import ui_support  # puts tests/compat/python on sys.path
from harness import FakeLLM, Services, tail
from ui_support import TIMEOUT_MS, UI_DIR, Watch, launch_browser, new_context, sign_in

expect.set_options(timeout=TIMEOUT_MS)

_log_files: list[Path] = []


@pytest.fixture(scope="session")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    """fake-llm and switchyard (key mode: tenant `compat`), started once on a fresh database, with
    the reference MCP server `@modelcontextprotocol/server-everything` (installed by
    tests/mcp/setup.sh, which run.sh calls) over stdio, every call of it waiting for approval."""
    cache = Path(os.environ.get("SWITCHYARD_MCP_CACHE") or Path.home() / ".cache" / "switchyard-mcp")
    everything = cache / "npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
    settings = {
        "SWITCHYARD__MCP_SERVERS__EVERYTHING__COMMAND": "node",
        "SWITCHYARD__MCP_SERVERS__EVERYTHING__ARGS": json.dumps([str(everything), "stdio"]),
        "SWITCHYARD__MCP_SERVERS__EVERYTHING__REQUIRE_APPROVAL": "always",
    }
    svc = Services(tmp_path_factory.mktemp("switchyard"), settings)
    _log_files.extend(svc.logs)
    try:
        svc.start()
        yield svc
    finally:
        svc.stop()


@pytest.fixture(autouse=True)
def fake(services: Services) -> FakeLLM:
    """The scripted upstream, with an empty turn queue and request log for every test."""
    llm = FakeLLM(services.fake_url)
    llm.reset()
    return llm


@pytest.fixture(scope="session")
def other_key(services: Services) -> str:
    """An API key of a second tenant, `other`, on the same service."""
    return services.create_key("other", "other")


@pytest.fixture(scope="session")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def browser(playwright: Playwright) -> Iterator[Browser]:
    browser = launch_browser(playwright)
    try:
        yield browser
    finally:
        browser.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def _keep_artifacts(request: pytest.FixtureRequest, context: BrowserContext) -> None:
    report = getattr(request.node, "report_call", None)
    if report is None or not report.failed:
        return
    folder = Path(os.environ.get("UI_ARTIFACTS") or UI_DIR / "artifacts") / request.node.name
    folder.mkdir(parents=True, exist_ok=True)
    for number, page in enumerate(context.pages):
        try:
            page.screenshot(path=str(folder / f"page-{number}.png"), full_page=True)
            (folder / f"page-{number}.html").write_text(f"<!-- {page.url} -->\n{page.content()}")
        except Error:
            pass


@pytest.fixture
def watch() -> Watch:
    return Watch()


@pytest.fixture
def make_context(
    browser: Browser, services: Services, watch: Watch, request: pytest.FixtureRequest
) -> Iterator[Callable[..., BrowserContext]]:
    """Makes browser contexts (each a browser profile of its own) for the services; every page
    opened in them is watched, and each is closed at the end of the test."""
    made: list[BrowserContext] = []

    def make(**options: object) -> BrowserContext:
        context = new_context(browser, services.base_url, **options)
        context.on("page", watch.attach)
        made.append(context)
        return context

    yield make
    for context in made:
        _keep_artifacts(request, context)
        context.close()
    watch.check()


@pytest.fixture
def context(make_context: Callable[..., BrowserContext]) -> BrowserContext:
    """A fresh browser context, not signed in."""
    return make_context()


@pytest.fixture
def signed_in(context: BrowserContext, services: Services) -> BrowserContext:
    """A browser context signed in with the key of tenant `compat`."""
    sign_in(context.new_page(), services.api_key)
    return context


@pytest.fixture
def page(signed_in: BrowserContext) -> Page:
    """The signed-in context's first page (on the run list)."""
    return signed_in.pages[0]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int) -> None:
    if exitstatus == 0 or not _log_files:
        return
    for path in _log_files:
        terminalreporter.section(f"{path.name} (last 200 lines; full log at {path})")
        terminalreporter.write_line(tail(path))


__all__ = ["ui_support"]
