"""Screenshots of the run inspector for the documentation: docs/ui/{list,run}-{light,dark}.png.

Starts fake-llm and switchyard on a fresh database (the compat harness), makes a few
representative runs (failed, completed, answered after a pause, paused), and takes the run list
and the paused run's page in light and dark color schemes with headless system Chromium.

    tests/ui/run.sh --screenshots                 (sets up the venv and Chromium first)
    tests/ui/.venv/bin/python tests/ui/screenshots.py [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

import ui_support  # noqa: F401 - puts tests/compat/python on sys.path
from harness import REPO_ROOT, Services
from ui_support import TIMEOUT_MS, launch_browser, representative_runs, take_screenshots


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "ui", help="folder of the PNGs")
    args = parser.parse_args()
    expect.set_options(timeout=TIMEOUT_MS)

    with tempfile.TemporaryDirectory(prefix="switchyard-ui-shots-") as workdir:
        services = Services(Path(workdir))
        try:
            services.start()
            runs = representative_runs(services)
            with sync_playwright() as playwright:
                browser = launch_browser(playwright)
                try:
                    written = take_screenshots(browser, services, args.out, runs["paused"])
                finally:
                    browser.close()
        except BaseException:
            for log in services.logs:
                print(f"--- {log.name} ---", file=sys.stderr)
                print(log.read_text(errors="replace")[-8000:] if log.exists() else "(none)", file=sys.stderr)
            raise
        finally:
            services.stop()
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
