"""Tokens per crash on the LLM path: the one request's prompt, and the reply for a one-line fix.

Counted with OpenAI's own tokenizer, `tiktoken`, on the `o200k_base` (GPT-4o) and `cl100k_base`
(GPT-4) vocabularies. `tiktoken` downloads its vocabularies at run time, which this project
never does; the `bpe-openai` wheel ships both files, and they are handed to `tiktoken` through its
documented cache (`TIKTOKEN_CACHE_DIR`), where `tiktoken` checks each file's SHA-256 against the
one OpenAI publishes before using it. So the counts are those of the real encodings.

    pip install tiktoken bpe-openai
    python benchmarks/bench_prompt_tokens.py

Three example crashes (`tests/llmcrashes.py`): a 60-line training function with a shape bug, a
crash three calls deep, a save into a missing folder. Targets (issue 15): at most 2,500 tokens in
and 200 out for a one-line fix. The JSON Schema sent as `response_format` is counted apart: how
a server charges it differs (OpenAI adds it to the prompt; local servers use it to constrain
decoding and do not).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import sys
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from repairbot.backends.openai import reply_schema  # noqa: E402
from repairbot.prompts import messages  # noqa: E402
from repairbot.rules import analyse  # noqa: E402
from tests.llmcases import Case, cases  # noqa: E402
from tests.replystyles import answer, edit  # noqa: E402

ENCODINGS = ("o200k_base", "cl100k_base")
TARGET_IN, TARGET_OUT = 2500, 200
_URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"


def encodings() -> dict[str, Any]:
    """The real encodings, loaded offline from the files shipped in the `bpe-openai` wheel."""
    cache = tempfile.mkdtemp(prefix="daifu-tiktoken-")
    for name in ENCODINGS:
        packed = resources.files("bpe_openai.data").joinpath(f"{name}.tiktoken.gz").read_bytes()
        target = Path(cache) / hashlib.sha1(_URL.format(name).encode()).hexdigest()
        target.write_bytes(gzip.decompress(packed))
    os.environ["TIKTOKEN_CACHE_DIR"] = cache  # read by tiktoken, which verifies each file's hash
    import tiktoken

    return {name: tiktoken.get_encoding(name) for name in ENCODINGS}


def chat_tokens(encoding: Any, chat: list[dict[str, str]]) -> int:
    """Tokens of chat messages as OpenAI's chat format counts them: 3 per message, 3 to prime the reply."""
    return sum(3 + len(encoding.encode(m["role"])) + len(encoding.encode(m["content"])) for m in chat) + 3


def one_line_fix(case: Case) -> str:
    """A reply to the prompt with a one-line edit, as a model writes it (the diagnosis included)."""
    if case.name == "save":
        line = case.report.function.lineno
        item = edit(case, "        os.makedirs(folder, exist_ok=True)", line, line - 1)
        item |= {"explanation": "Create the checkpoint folder before saving into it.", "confidence": 0.85}
        diagnosis = {
            "category": "path",
            "culprit_function": case.report.function.qualname,
            "culprit_line": line,
            "explanation": "torch.save writes into a folder that does not exist; nothing creates it.",
        }
        return json.dumps({"diagnosis": diagnosis, "suggestions": [item]})
    if case.name == "deep":
        line = case.report.frames[-1].lineno
        item = edit(case, "    return features / features.norm(dim=1, keepdim=True)", line, line)
        item |= {"function": "normalise", "explanation": "Keep the reduced dimension so the division broadcasts."}
        diagnosis = {
            "category": "tensor_mismatch",
            "culprit_function": "normalise",
            "culprit_line": line,
            "explanation": "features.norm(dim=1) has shape (8,), which cannot divide (8, 32) row by row.",
        }
        return json.dumps({"diagnosis": diagnosis, "suggestions": [item]})
    return json.dumps(answer(case, edit(case, "            logits = model(images.flatten(1))")))


def whole_def_reply(case: Case) -> str:
    """The same fix sent the old way: the whole new function inside a JSON string."""
    code = case.report.function.source.replace("model(images)", "model(images.flatten(1))")
    item = {"kind": "surgery", "code": code, "explanation": "Flatten the images.", "confidence": 0.9}
    return json.dumps({"suggestions": [item]})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", choices=("train", "deep", "save"), help="print that crash's prompt")
    args = parser.parse_args()
    found = encodings()
    crashes = cases()
    schema = json.dumps(reply_schema())
    print(f"{'crash':<8}{'encoding':<13}{'prompt in':>10}{'schema':>8}{'reply out':>10}{'chars in':>10}")
    worst_in = worst_out = 0
    for name in ("train", "deep", "save"):
        case = crashes[name]
        chat = messages(case.report, analyse(case.report)[0])
        if args.show == name:
            print(chat[1]["content"])
        for encoding_name, encoding in found.items():
            tokens_in = chat_tokens(encoding, chat)
            tokens_out = len(encoding.encode(one_line_fix(case)))
            worst_in, worst_out = max(worst_in, tokens_in), max(worst_out, tokens_out)
            chars = sum(len(m["content"]) for m in chat)
            print(
                f"{name:<8}{encoding_name:<13}{tokens_in:>10}{len(encoding.encode(schema)):>8}{tokens_out:>10}"
                f"{chars:>10}"
            )
    old = len(found["o200k_base"].encode(whole_def_reply(crashes["train"])))
    print(f"\nThe train fix as a whole def in a JSON string (the old reply): {old} tokens (o200k_base).")
    verdict = "within" if worst_in <= TARGET_IN and worst_out <= TARGET_OUT else "OVER"
    print(f"Worst case: {worst_in} in, {worst_out} out; targets {TARGET_IN} in, {TARGET_OUT} out: {verdict}.")
    return 0 if verdict == "within" else 1


if __name__ == "__main__":
    sys.exit(main())
