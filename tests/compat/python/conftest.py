from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import openai
import pytest

from harness import HTTP_TIMEOUT_S, FakeLLM, Services, tail

_log_files: list[Path] = []


@contextmanager
def running_services(
    tmp_path_factory: pytest.TempPathFactory, fake_args: list[str] | None = None, **settings: str
) -> Iterator[Services]:
    svc = Services(tmp_path_factory.mktemp("switchyard"), settings, fake_args)
    _log_files.extend(svc.logs)
    try:
        svc.start()
        yield svc
    finally:
        svc.stop()


@pytest.fixture(scope="session")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    """fake-llm and switchyard, started once per session on a fresh SQLite database."""
    with running_services(tmp_path_factory) as svc:
        yield svc


# A paused run expires this long after the model's turn ended (SPEC §3, `expired`).
SHORT_PAUSE_MS = 1000


@pytest.fixture(scope="session")
def short_pause_services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    """A second pair whose switchyard lets paused runs expire after SHORT_PAUSE_MS."""
    with running_services(
        tmp_path_factory,
        SWITCHYARD__RUNS__REQUIRES_ACTION_TTL_MS=str(SHORT_PAUSE_MS),
        SWITCHYARD__RUNS__SWEEP_INTERVAL_MS="100",
    ) as svc:
        yield svc


@pytest.fixture(scope="session")
def one_slot_services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    """A pair whose switchyard runs one background run at a time: the next one stays queued."""
    with running_services(tmp_path_factory, SWITCHYARD__RUNS__MAX_BACKGROUND="1") as svc:
        yield svc


@pytest.fixture(autouse=True)
def fake(services: Services) -> FakeLLM:
    """The scripted upstream, with an empty turn queue and request log for every test."""
    llm = FakeLLM(services.fake_url)
    llm.reset()
    return llm


@pytest.fixture(scope="session")
def base_url(services: Services) -> str:
    return services.base_url


@pytest.fixture(scope="session")
def client(services: Services) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{services.base_url}/v1",
        api_key=services.api_key,
        max_retries=0,
        timeout=HTTP_TIMEOUT_S,
        _strict_response_validation=True,
    ) as c:
        yield c


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int) -> None:
    if exitstatus == 0 or not _log_files:
        return
    for path in _log_files:
        terminalreporter.section(f"{path.name} (last 200 lines; full log at {path})")
        terminalreporter.write_line(tail(path))
