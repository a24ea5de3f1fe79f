"""Tokens a console `ask` adds to the one request per crash: the question, and each earlier round.

Counted with the real `o200k_base` and `cl100k_base` encodings, loaded offline as
`bench_prompt_tokens.py` does (`pip install tiktoken bpe-openai`), on the 60-line training crash
of `tests/llmcrashes.py`:

- a plain request (what automatic mode sends);
- with a question;
- with a question and 1, 2, 4 and 6 earlier rounds like those the console records (a question, the
  answer with its diagnosis, the verdicts of three trials, the choice); the prompt shows the latest 3;
- with a question and rounds whose every text is at its size limit: the bound of what `ask` can cost.

Measured (o200k_base): the question adds 67 tokens, each typical round about 245, so a follow-up
with 3 rounds shown costs about 2,410 tokens in for this 60-line function (target: 2,500); every text at
its limit adds at most 2,937.

    python benchmarks/bench_ask_tokens.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_prompt_tokens import chat_tokens, encodings  # noqa: E402
from repairbot.protocol import MAX_EXCHANGES, MAX_QUESTION, Attempt, Exchange  # noqa: E402
from repairbot.prompts import messages  # noqa: E402
from repairbot.rules import analyse  # noqa: E402
from tests.llmcases import cases  # noqa: E402

QUESTION = "why are the images 4-D here when the loader was meant to flatten them?"


def typical(number: int) -> Exchange:
    """A round as the console records it after one `ask` (texts as in `tests/test_console_ask.py`)."""
    return Exchange(
        question=f"question {number}: why does the first layer refuse this batch of images?",
        answer="The images reach the model as (8, 1, 8, 8) but its first Linear layer takes 64 features per row; "
        "flatten them first. (Diagnosis: [tensor_mismatch] The images are 4-D, (8, 1, 8, 8), but the first "
        "Linear layer needs 64 features per row.)",
        tried=[
            Attempt(decision="surgery: Flatten each image into a row of 64 features before the first Linear layer.",
                    outcome="trial: iteration finished in 41 ms, loss 0.6931, state kept"),
            Attempt(decision="action: Flatten `images` in place for this batch.",
                    outcome="trial: iteration finished in 38 ms, loss 0.6931, state kept"),
            Attempt(decision="skip: Leave this batch out. (Skipping line 51 leaves `logits` stale or undefined, "
                    "and lines 52, 60 read it.)", outcome="trial: raised NameError: name 'logits' is not defined"),
            Attempt(decision="(none of the suggestions)", outcome="the person chose none of them"),
        ],
    )


def largest(number: int) -> Exchange:
    """A round whose every text is at the protocol's limit (the prompt shows a bounded part of it)."""
    word = f"w{number} "
    return Exchange(
        question=word * (MAX_QUESTION // len(word)),
        answer=word * (8000 // len(word)),
        tried=[Attempt(decision=word * 500, outcome=word * 500) for _ in range(MAX_EXCHANGES)],
    )


def main() -> int:
    found = encodings()
    case = cases()["train"]
    hint = analyse(case.report)[0]
    rows = [("plain request", None, [])]
    rows.append(("with a question", QUESTION, []))
    rows += [(f"question + {n} round{'s' * (n > 1)}", QUESTION, [typical(i) for i in range(n)]) for n in (1, 2, 4, 6)]
    rows.append(("largest question + 20 largest rounds", "q " * (MAX_QUESTION // 2),
                 [largest(i) for i in range(MAX_EXCHANGES)]))
    print(f"{'request (train crash)':<40}" + "".join(f"{name:>14}" for name in found) + f"{'added':>8}")
    base = {name: chat_tokens(encoding, messages(case.report, hint)) for name, encoding in found.items()}
    for label, question, rounds in rows:
        chat = messages(case.report, hint, question, rounds)
        counts = {name: chat_tokens(encoding, chat) for name, encoding in found.items()}
        added = counts["o200k_base"] - base["o200k_base"]
        print(f"{label:<40}" + "".join(f"{counts[n]:>14}" for n in found) + f"{added:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
