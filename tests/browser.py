"""Headless Chromium for tests that look at a page as a browser renders it (the MLflow UI, a report, a gallery)."""

from __future__ import annotations

import shutil
import subprocess

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NEEDS_CHROMIUM = "needs a headless browser: apt-get install chromium"


def browser_dom(url: str, width: int = 1600, budget_ms: int = 30000, timeout: float = 180) -> str:
    """The page at ``url`` as headless Chromium renders it in a window ``width`` x 1000 pixels (its scripts run,
    their requests answered, within ``budget_ms`` of virtual time), serialised."""
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            f"--window-size={width},1000",
            f"--virtual-time-budget={budget_ms}",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done.stdout
