"""The README's picture of the approval page, taken from a real run: `python -m tests.screenshot_remote`.

It starts the repair bot on 127.0.0.1, runs the training program of the remote-approval tests
(`tests/programs/remote_training.py`) until its crash waits for a decision, opens the repair's page in
headless Chromium (Debian's, through Playwright), saves `docs/remote.png`, then applies the suggestion
so that the job finishes, and checks that it did.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.remotefixtures import ROOT, browser_missing, fixed_result, job, login, service

OUT = ROOT / "docs" / "remote.png"


def main() -> int:
    missing = browser_missing()
    if missing:
        print(f"cannot take the screenshot: {missing}", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    from tests.remotefixtures import BROWSER_ARGS, CHROMIUM

    with tempfile.TemporaryDirectory() as workdir, service() as url, \
            job(url, Path(workdir), name="nightly-train") as running:
        repair = running.pending()
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
            context = chromium.new_context(viewport={"width": 1180, "height": 1500}, device_scale_factor=1)
            page = login(context, url, "alice", f"/ui/repairs/{repair}")
            page.evaluate("document.querySelectorAll('details').forEach(d => d.open = false)")
            page.screenshot(path=str(OUT), clip=_clip(page), full_page=True)
            page.click("#candidate-1 button.apply")
            page.wait_for_selector("#status.decided")
            chromium.close()
        status = running.finish()
    if status != 0 or running.result() != fixed_result():
        print(f"the job did not finish as the fixed run (status {status}):\n{running.stderr[-2000:]}", file=sys.stderr)
        return 1
    print(f"wrote {OUT.relative_to(ROOT)}; the job then finished with the fixed run's result")
    return 0


def _clip(page: object) -> dict[str, float]:
    """From the top of the page down to the end of the first suggestion's buttons."""
    box = page.locator("#decide").bounding_box()  # type: ignore[attr-defined]
    return {"x": 0, "y": 0, "width": 1180, "height": min(box["y"] + box["height"] + 16, 3000)}


if __name__ == "__main__":
    sys.exit(main())
