"""Starts fake-llm and switchyard once per session for the LangChain tests (../python/harness.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from harness import Services, tail

_log_files: list[Path] = []


@pytest.fixture(scope="session")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    # fetch_url refuses loopback addresses unless the operator allows private ones; the tests
    # point it at their own counting HTTP server.
    svc = Services(tmp_path_factory.mktemp("switchyard"), {"SWITCHYARD__TOOLS__FETCH_URL__ALLOW_PRIVATE": "true"})
    _log_files.extend(svc.logs)
    try:
        svc.start()
        yield svc
    finally:
        svc.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int) -> None:
    if exitstatus == 0 or not _log_files:
        return
    for path in _log_files:
        terminalreporter.section(f"{path.name} (last 200 lines; full log at {path})")
        terminalreporter.write_line(tail(path))
