"""Reading a model's reply (`repairbot.llm_parse`) and making its code a repair (`repairbot.llm_code`)."""

# ruff: noqa: E402
from __future__ import annotations

import json

import pytest

pytest.importorskip("pydantic")

from repairbot.llm_code import (
    CodeError,
    Function,
    apply_diff,
    apply_edit,
    clean,
    import_in_action,
    missing_modules,
    problems,
    whole_function,
)
from repairbot.llm_parse import ReplyError, confidence, read_object, read_proposal, read_proposals

SOURCE = """    @torch.no_grad()
    def score(self, batch: list, scale: float = 1.0) -> float:
        total = 0.0
        for x in batch:
            y = self.model(x)
            total += float(y.sum()) * scale
        return total
"""
FN = Function("score", "Scorer.score", "scorer.py", SOURCE, 20)
"""Lines 20 (decorator) to 26 (return) of scorer.py; line 24 is `y = self.model(x)`."""


def test_json_is_found_in_fences_prose_and_after_thinking() -> None:
    body = {"suggestions": [{"kind": "retry"}]}
    for text in (
        "```json\n" + json.dumps(body) + "\n```",
        "Here it is: " + json.dumps(body) + " Hope that {helps}.",
        "<think>maybe {kind: skip}?</think>" + json.dumps(body),
        "```\n" + json.dumps(body, indent=2) + "\n```\nThe fix is above.",
    ):
        assert read_object(text) == body, text


def test_python_literals_and_json_words_are_read_without_running_anything() -> None:
    assert read_object("{'suggestions': [], 'diagnosis': {'ok': true, 'why': None, 'n': -1,}}") == {
        "suggestions": [],
        "diagnosis": {"ok": True, "why": None, "n": -1},
    }
    with pytest.raises(ReplyError, match="no JSON object"):
        read_object("{'suggestions': __import__('os').getcwd()}")


def test_a_reply_without_an_answer_says_what_it_held() -> None:
    with pytest.raises(ReplyError, match="nothing but a <think> block"):
        read_object("<think>I keep thinking and the reply is cut")
    with pytest.raises(ReplyError, match="neither `suggestions` nor `diagnosis`"):
        read_object('{"answer": 42}')
    with pytest.raises(ReplyError, match="begins 'I cannot help with that.'"):
        read_object("I cannot help with that.")
    assert read_object('{"result": {"suggestions": []}}') == {"suggestions": []}
    assert read_object('[{"kind": "skip"}]') == {"suggestions": [{"kind": "skip"}]}


def test_each_suggestion_is_read_on_its_own() -> None:
    proposals, dropped = read_proposals(
        {
            "suggestions": [
                {"kind": "edit", "start_line": 24, "new_code": None},
                "retry",
                {"kind": "skip", "confidence": "high"},
                {"kind": "fix", "lines": "24-25", "new_code": "y = 1", "confidence": 85},
            ]
        }
    )
    assert [p.kind for p in proposals] == ["skip", "edit"]
    assert proposals[0].confidence == 0.8 and proposals[1].confidence == 0.85
    assert (proposals[1].start_line, proposals[1].end_line) == (24, 25)
    assert dropped == [
        "dropped suggestion 1 (edit) has no new_code (it is null)",
        "dropped suggestion 2 is not an object",
    ]


def test_the_kind_comes_from_the_content_when_the_label_does_not_fit() -> None:
    action = read_proposal(1, {"kind": "surgery", "code": "x = x.float()"})
    assert not isinstance(action, str) and action.kind == "action" and "labelled 'surgery'" in (action.note or "")
    whole = read_proposal(2, {"kind": "action", "code": "def f(x):\n    return x\n"})
    assert not isinstance(whole, str) and whole.kind == "function"
    assert (
        read_proposal(3, {"kind": "wave", "explanation": "hi"})
        == "suggestion 3 has kind 'wave' and no code: it is not a repair"
    )


@pytest.mark.parametrize(
    ("given", "read"), [(0.7, 0.7), (90, 0.9), ("90%", 0.9), ("0.3", 0.3), ("low", 0.2), (None, 0.5), (-2, 0.5)]
)
def test_confidence(given: object, read: float) -> None:
    assert confidence(given) == read


def test_fences_and_listing_numbers_are_removed_from_code() -> None:
    assert clean("```python\n    y = 1\n```") == ("    y = 1", ["removed a markdown fence around the code"])
    code, notes = clean(">>  24              y = self.model(x.flatten(1))\n    25              z = 2", first=24)
    assert code == "            y = self.model(x.flatten(1))\n            z = 2" and "(24–25)" in notes[0]
    assert clean("2 * x", first=24) == ("2 * x", [])  # a number that is not the edit's line is code


def test_an_edit_takes_the_indentation_of_the_lines_it_replaces() -> None:
    new = apply_edit(FN, 24, 24, "y = self.model(x.flatten(1))\nif y is None:\n    continue")
    lines = new.splitlines()
    assert lines[4:7] == [
        "            y = self.model(x.flatten(1))",
        "            if y is None:",
        "                continue",
    ]
    assert apply_edit(FN, 24, 23, "print(x)").splitlines()[4] == "            print(x)"  # an insertion
    assert "self.model" not in apply_edit(FN, 24, 24, "")  # a deletion
    with pytest.raises(CodeError, match=r"line 40 of scorer.py are outside `Scorer.score` \(lines 20–26"):
        apply_edit(FN, 40, 40, "x")


def test_a_diff_is_applied_where_its_text_is() -> None:
    diff = (
        "--- a/scorer.py\n+++ b/scorer.py\n@@ -30,2 +30,2 @@\n         for x in batch:\n"
        "-            y = self.model(x)\n+            y = self.model(x).float()\n"
    )
    assert "self.model(x).float()" in apply_diff(FN, diff)  # the stated line is off; the text decides
    with pytest.raises(CodeError, match="hunk 1 of the reply's diff .stated at line 30. does not match"):
        apply_diff(FN, diff.replace("for x in batch", "for x in other"))


def test_a_whole_function_keeps_the_decorators_and_def_line_of_the_source() -> None:
    reply = (
        "def score(self, batch, scale=1.0):\n    total = 0.0\n    for x in batch:\n"
        "        y = self.model(x.flatten(1))\n        total += float(y.sum()) * scale\n    return total\n"
    )
    new, notes = whole_function(FN, reply)
    assert new.splitlines()[:2] == SOURCE.splitlines()[:2]
    assert new.splitlines()[4] == "            y = self.model(x.flatten(1))"
    assert notes == [
        "restored the decorator `@torch.no_grad()` at line 20, which the reply left out",
        "kept the `def` line of `score` (line 21) as it is: the reply rewrote it",
    ]
    with pytest.raises(CodeError, match=r"changes the parameters of `score` \(line 21\) from \(self, batch, scale\)"):
        whole_function(FN, reply.replace("batch, scale=1.0", "batch"))
    with pytest.raises(CodeError, match="defines `other`, not `score`"):
        whole_function(FN, "def other(self):\n    pass\n")


def test_problems_name_file_lines_and_stale_names() -> None:
    assert problems(FN, SOURCE) == ["it leaves `score` unchanged"]
    stale = apply_edit(FN, 24, 25, "total += float(self.model(x).sum())\ntotal += float(y.sum())")
    assert problems(FN, stale) == [
        "the new `score` no longer assigns `y`, which it still reads at line 25: "
        "the stale `y` from before the crash would be used"
    ]
    broken = apply_edit(FN, 24, 24, "y = self.model(x")
    assert problems(FN, broken)[0].startswith("the new `score` does not parse: '(' was never closed at line 24")


def test_modules_an_action_forgets_are_imported_under_private_names() -> None:
    code = "os.makedirs(path, exist_ok=True)\ntime.sleep(1)"
    assert missing_modules(code, {"path"}) == {"os": "os", "time": "time"}
    assert missing_modules(code, {"path", "os", "time"}) == {}  # the frame or the function has them
    assert missing_modules("F.relu(x)", {"x"}) == {"F": "torch.nn.functional"}
    assert import_in_action("os.makedirs(p)", {"os": "os"}) == (
        "import os as _daifu_os\n_daifu_os.makedirs(p)\ndel _daifu_os"
    )
