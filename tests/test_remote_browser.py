"""A person approves a batch job's repair in a real browser: Debian's Chromium, headless, driven by Playwright,
against the real repair bot on 127.0.0.1 and a real vaccinated PyTorch training process waiting on it.

Without Chromium at /usr/bin/chromium or Playwright's Python package, every test here is skipped, with the
reason (`.ci/run` installs both). The same protocol is tested over plain HTTP in `test_remote_api.py`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

from tests.remotefixtures import FAULTY_LINE, browser, fixed_result, job, login, post_pending, service, until

pytestmark = [pytest.mark.torch, pytest.mark.slow]


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    with browser() as launched:
        yield launched


@pytest.fixture(scope="module")
def url(chromium: Any) -> Iterator[str]:
    with service() as url:
        yield url


@pytest.fixture
def context(chromium: Any) -> Iterator[Any]:
    context = chromium.new_context()
    context.set_default_timeout(60_000)
    yield context
    context.close()


def repairs(workdir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (workdir / "daifu_workspace" / "repairs.jsonl").read_text().splitlines()]


def test_a_person_sees_the_crash_and_its_diff_clicks_apply_and_the_run_finishes_as_fixed(
    url: str, context: Any, tmp_path: Path
) -> None:
    with job(url, tmp_path, name="nightly-train") as running:
        repair = running.pending()
        page = login(context, url, "alice")
        row = page.locator("#waiting tr", has_text=str(running.process.pid))
        listed = row.inner_text()
        assert "nightly-train" in listed and f"RuntimeError at remote_training.py:{FAULTY_LINE} in train" in listed
        row.locator("a.open").click()
        page.wait_for_url(f"{url}/ui/repairs/{repair}")
        assert page.inner_text("#context tr.faulty").strip().startswith(str(FAULTY_LINE))
        assert ".values.numpy().mean()" in page.inner_text("#context tr.faulty")
        assert "Can't call numpy() on Tensor that requires grad" in page.inner_text("p.exception")
        page.click("details.vars summary")  # the live values, folded at first
        def value(name: str) -> str:
            row = page.locator("#locals tr").filter(has=page.locator(f"code:text-is('{name}')"))
            return str(row.locator("pre").inner_text())

        assert value("step") == "5" and value("model").startswith("Sequential (195 parameters)")
        assert "api_misuse" in page.inner_text("#diagnosis")
        suggestion = page.locator("#candidate-1")
        assert ".values.numpy().mean()" in suggestion.locator("pre.diff span.del").inner_text()
        assert ".values.detach().numpy().mean()" in suggestion.locator("pre.diff span.add").inner_text()
        colour = suggestion.locator("span.add").evaluate("e => getComputedStyle(e).backgroundColor")
        assert colour == "rgb(230, 255, 236)"  # green, as the stylesheet says
        verdict = suggestion.locator(".verdict")
        assert verdict.inner_text().startswith("trial: iteration finished in") and "state kept" in verdict.inner_text()
        assert "pass" in (verdict.get_attribute("class") or "")

        suggestion.locator("button.apply").click()
        page.wait_for_selector("#status.decided")
        assert "apply suggestion 1 (surgery)" in page.inner_text("#status") and "alice" in page.inner_text("#status")
        assert running.finish() == 0
    assert running.result() == fixed_result()
    assert "alice decided remotely after" in running.stderr
    assert [(r["decision"], r["decided_by_person"]) for r in repairs(tmp_path)] == [("Surgery", "alice")]
    page.goto(f"{url}/ui")
    history = page.locator("#history tr", has_text="nightly-train").inner_text()
    assert "decided: apply suggestion 1 (surgery)" in history and "alice" in history


@pytest.mark.e2e  # a training job of its own; the default run keeps the apply above
def test_reject_lets_the_original_exception_go_on(url: str, context: Any, tmp_path: Path) -> None:
    with job(url, tmp_path) as running:
        repair = running.pending()
        page = login(context, url, "bob", f"/ui/repairs/{repair}")
        page.click("#decide button.reject")
        page.wait_for_selector("#status.decided")
        assert running.finish() == 1
    assert running.stderr.rstrip().endswith(
        "RuntimeError: Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
    assert f'remote_training.py", line {FAULTY_LINE}, in train' in running.stderr  # the original traceback
    assert "bob decided remotely after" in running.stderr and "reject" in running.stderr
    assert "not repaired (bob on the approval page)" in running.stderr
    assert "reject: the exception goes on" in page.inner_text("#status")


@pytest.mark.e2e  # a training job of its own; the default run keeps the apply above
def test_a_bad_edit_is_refused_with_the_reason_and_nothing_is_applied(url: str, context: Any, tmp_path: Path) -> None:
    with job(url, tmp_path) as running:
        repair = running.pending()
        page = login(context, url, "carol", f"/ui/repairs/{repair}")
        box = page.locator("form.edit textarea")
        suggested = box.input_value()
        assert ".values.detach().numpy().mean()" in suggested  # the box starts from the best surgery
        box.fill(suggested.replace("logits.softmax(dim=1).max(dim=1).values.detach()", "detached(logits)"))
        page.click("form.edit button.edit")
        page.wait_for_selector("#refusal")
        refusal = page.inner_text("#refusal")
        assert "The process refused carol's decision (edit); nothing was applied" in refusal
        assert "the runtime refuses this surgery: the new source reads 'detached', which nothing defines" in refusal
        assert "detached(logits)" in page.locator("form.edit textarea").input_value()  # kept, to be corrected
        assert page.locator("#status.waiting").count() == 1 and running.process.poll() is None

        box = page.locator("form.edit textarea")  # a correct edit of her own: checked, tried, applied
        box.fill(suggested.replace("logits.softmax(dim=1).max(dim=1).values.detach()",
                                   "logits.detach().softmax(dim=1).max(dim=1).values"))
        page.click("form.edit button.edit")
        page.wait_for_selector("#status.decided")
        status = page.inner_text("#status")
        assert "apply an edited surgery" in status and "trial: iteration finished" in status
        assert running.finish() == 0
    assert running.result() == fixed_result()
    (applied,) = repairs(tmp_path)
    assert applied["decision"] == "Surgery" and "logits.detach().softmax" in applied["code"]
    assert "detached(logits)" not in json.dumps(repairs(tmp_path))
    assert "refused, nothing applied: the runtime refuses this surgery" in running.stderr


@pytest.mark.e2e  # a training job of its own; the default run keeps the apply above
def test_past_the_deadline_the_job_falls_back_and_the_page_says_so(url: str, context: Any, tmp_path: Path) -> None:
    with job(url, tmp_path, DAIFU_REMOTE_DEADLINE="6", DAIFU_REMOTE_FALLBACK="auto") as running:
        repair = running.pending()
        page = login(context, url, "dave", f"/ui/repairs/{repair}")
        assert "the process will apply a verified automatic repair" in page.inner_text("#status")
        assert running.finish() == 0
    assert running.result() == fixed_result()  # the verified automatic repair applied the passing surgery
    page.reload()
    assert "Withdrawn: no decision within 6 s; it falls back to auto" in page.inner_text("#status")
    assert page.locator("button.apply").count() == 0


@pytest.mark.e2e  # a training job of its own; the default run keeps the apply above, the API the race (test_remote_api)
def test_two_people_deciding_the_same_repair_only_the_first_counts(
    url: str, chromium: Any, tmp_path: Path
) -> None:
    first, second = chromium.new_context(), chromium.new_context()
    try:
        with job(url, tmp_path) as running:
            repair = running.pending()
            alice = login(first, url, "alice", f"/ui/repairs/{repair}")
            bob = login(second, url, "bob", f"/ui/repairs/{repair}")  # both pages offer the buttons
            with alice.expect_response(lambda r: r.url.endswith("/decide")) as applied:
                alice.click("#candidate-1 button.apply")
            with bob.expect_response(lambda r: r.url.endswith("/decide")) as rejected:
                bob.click("#decide button.reject")
            assert applied.value.status == 303 and rejected.value.status == 409
            assert "alice decided already: apply suggestion 1 (surgery)" in bob.inner_text("p.message")
            until(lambda: "changed since the page" in alice.inner_text("body") or alice.locator(
                "#status.decided").count() == 1, 20, "alice's page showing the decision")
            assert running.finish() == 0
        assert running.result() == fixed_result() and "bob" not in running.stderr
    finally:
        first.close()
        second.close()


FAILING = "def halves(xs):\n    n = int(len(xs) / 3)\n    return xs[n]\n"
PASSING = "n = len(xs) // 2"
GREEN = "rgb(31, 136, 61)"


def test_the_trials_verdict_decides_each_apply_buttons_look_and_order(url: str, context: Any) -> None:
    """A suggestion whose trial failed comes after the others, its button is not the green primary one and says
    the verdict beside it; the one that passed comes first with the primary button; the edit box starts from it."""
    from repairbot.protocol import PendingCandidate

    repair = post_pending(url, [
        PendingCandidate(kind="surgery", code=FAILING, explanation="a third", confidence=0.9,
                         verdict="trial: the call raised TypeError: list indices must be integers", passed=False),
        PendingCandidate(kind="retry", explanation="again", confidence=0.5),
        PendingCandidate(kind="action", code=PASSING, explanation="use //", confidence=0.4,
                         verdict="trial: the call finished in 3 ms, state kept", passed=True),
    ])
    page = login(context, url, "erin", f"/ui/repairs/{repair}")
    order = page.locator("#suggestions article.candidate").evaluate_all("cards => cards.map(c => c.id)")
    assert order == ["candidate-3", "candidate-2", "candidate-1"]  # passed, not tried, failed

    def background(selector: str) -> str:
        return str(page.locator(selector).evaluate("e => getComputedStyle(e).backgroundColor"))

    assert background("#candidate-3 form button") == GREEN
    assert background("#candidate-2 form button") != GREEN and background("#candidate-1 form button") != GREEN
    failed = page.locator("#candidate-1 form")
    assert "Apply suggestion 1" in failed.locator("button").inner_text()
    assert "its trial failed: the call raised TypeError" in failed.inner_text()  # said beside the button
    assert "not tried" in page.locator("#candidate-2 form").inner_text()
    first_apply = page.locator("#suggestions form button").first
    assert first_apply.inner_text() == "Apply suggestion 3"
    assert page.locator("form.edit textarea").input_value() == PASSING  # the passing one, not the failing surgery
    assert page.locator("form.edit input[value=action]").is_checked()


def test_with_no_passing_suggestion_the_edit_box_starts_empty_and_nothing_is_green(url: str, context: Any) -> None:
    from repairbot.protocol import PendingCandidate

    repair = post_pending(url, [
        PendingCandidate(kind="surgery", code=FAILING, explanation="a third", confidence=0.9,
                         verdict="trial: the call raised TypeError: list indices must be integers", passed=False),
    ])
    page = login(context, url, "erin", f"/ui/repairs/{repair}")
    assert page.locator("form.edit textarea").input_value() == ""
    assert page.locator("form.edit input[value=surgery]").is_checked()
    buttons = page.locator("#suggestions button, #decide button").evaluate_all(
        "bs => bs.map(b => getComputedStyle(b).backgroundColor)")
    assert buttons and GREEN not in buttons
