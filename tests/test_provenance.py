"""Every file of the project was written for it: none carries another project's notice or says it came from one.

Code copied, adapted, ported or translated from another repository does not belong here, whatever
its licence. Such code usually says where it came from, in its header or beside the fragment: a
copyright line, a licence's text, or "adapted from <repository>". This test reads every tracked
text file (`git ls-files`; the tree itself when this is not a git checkout) and fails on each line
that says so, naming the file and the line.

Two kinds of line fail:
- a notice: a copyright line ("Copyright" or "(c)" or the copyright sign with a year), the opening
  words of a common licence's text, or an SPDX identifier. The project's own licence file at the
  root, if it ever gets one, is the one place a notice belongs.
- a provenance claim: "adapted / copied / ported / translated / vendored / lifted / borrowed from",
  or a weaker verb ("taken from", "based on", "derived from", "verbatim") on a line that also points
  outside the project (an address, an owner/name repository, "upstream", "repository").
  "Derived from" and "taken from" are ordinary words here otherwise (a version derived from the
  crashed one, a picture taken from a real run), so they alone do not fail.

This file names what it looks for, and is the one file not read.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OWN_LICENCE_FILES = {"LICENSE", "LICENSE.md", "LICENSE.txt", "COPYING"}
"""The project's own licence, at the root only: its notice is the project's."""
THIS_FILE = Path(__file__).resolve()
SKIPPED_FOLDERS = {".git", "__pycache__", ".venv", ".pytest_cache", ".mypy_cache", ".hypothesis", "build", "dist",
                   "results", "daifu_workspace"}
"""Build outputs and caches, for a tree that is not a git checkout (git lists none of them)."""

_YEAR = r"(19|20)\d\d"
NOTICE = re.compile(
    "|".join([
        rf"\bcopyright\b[^\n]{{0,30}}?(\(c\)|\u00a9|{_YEAR})",  # the word, then the sign or a year
        rf"(\(c\)|\u00a9)\s*{_YEAR}",  # the sign and a year, without the word
        r"\bSPDX-License-Identifier\b",
        r"\bpermission is hereby granted, free of charge\b",  # MIT
        r"\bredistribution and use in source and binary forms\b",  # BSD
        r"\blicensed under the apache license\b",
        r"\bunder the terms of the gnu (lesser |affero )?general public license\b",
    ]),
    re.IGNORECASE,
)
CLAIM = re.compile(r"\b(adapted|copied|ported|translated|vendored|lifted|borrowed)\s+((verbatim|directly|nearly|"
                   r"mostly|largely|partly|closely|code|it|this|here)\s+){0,2}from\b", re.IGNORECASE)
WEAK_CLAIM = re.compile(r"\b(taken|based|derived)\s+(\w+\s+){0,2}?(from|on)\b|\bverbatim\b", re.IGNORECASE)
ELSEWHERE = re.compile(
    r"https?://|\bgithub\b|\bgitlab\b|\bbitbucket\b|\bupstream\b|\brepositor(y|ies)\b"
    r"|(?<![\w./-])[A-Za-z][\w.-]*/[A-Za-z][\w-]*(?![\w./-])",  # owner/name: two parts, not a path to a file
    re.IGNORECASE,
)


def tracked_files(root: Path) -> list[Path]:
    """The files git tracks under `root`; every file of the tree but caches and outputs when it is no checkout."""
    git = shutil.which("git")
    if git is not None and (root / ".git").exists():
        done = subprocess.run([git, "ls-files", "-z"], cwd=root, capture_output=True, check=True, timeout=60)
        return [root / name for name in done.stdout.decode().split("\0") if name]
    return [path for path in sorted(root.rglob("*"))
            if path.is_file() and not SKIPPED_FOLDERS.intersection(path.relative_to(root).parts)]


def text_of(path: Path) -> str | None:
    """The file's text; None for a binary file (an image) or one that is gone from the work tree."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def offending(line: str) -> str | None:
    """Why `line` says it came from another project, or None."""
    if NOTICE.search(line):
        return "a copyright or licence notice"
    if CLAIM.search(line):
        return "says it was adapted or copied from elsewhere"
    if WEAK_CLAIM.search(line) and ELSEWHERE.search(line):
        return "says it was taken from another project"
    return None


def findings(root: Path) -> list[str]:
    """`path:line: why: text` for each offending line of the tree at `root`."""
    found = []
    for path in tracked_files(root):
        relative = path.relative_to(root)
        if str(relative) in OWN_LICENCE_FILES or path.resolve() == THIS_FILE:
            continue
        text = text_of(path)
        for number, line in enumerate((text or "").splitlines(), start=1):
            why = offending(line)
            if why:
                found.append(f"{relative}:{number}: {why}: {line.strip()[:160]}")
    return found


def test_no_file_carries_another_projects_notice_or_says_it_was_copied_from_one() -> None:
    assert findings(ROOT) == []


CAUGHT = [
    "Copyright (c) 2017 the Example contributors",
    "# Copyright 2022 Some Person. All rights reserved.",
    "(C) 2019 Someone",
    "\u00a9 2021 Other Org",
    "# SPDX-License-Identifier: BSD-3-Clause",
    "Permission is hereby granted, free of charge, to any person obtaining a copy",
    "Redistribution and use in source and binary forms, with or without",
    '"""Adapted from someorg/examples mnist/main.py."""',
    "# copied verbatim from the tutorial",
    "Ported from the original Lua implementation.",
    "This module is translated from the Java library.",
    "Based on https://example.org/some/code.py",
    "The training loop is taken from upstream's train.py",
    "the model file, nearly verbatim, from someone/somerepo",
]
LET_THROUGH = [
    "a version derived from the crashed one",
    "The README's picture of the approval page, taken from a real run.",
    "Every expectation was taken from running the program on the prototype itself",
    "CI runs the test one verbatim",
    "edits based on the shapes of daifu/core/surgery.py",
    "the copyright holder of this project",
    "license = { text = \"MIT\" }",
    "the checkpoint copied to folder/last.pt",
]


@pytest.mark.parametrize("line", CAUGHT)
def test_a_notice_or_a_claim_of_origin_is_caught(line: str) -> None:
    assert offending(line) is not None


@pytest.mark.parametrize("line", LET_THROUGH)
def test_ordinary_words_pass(line: str) -> None:
    assert offending(line) is None


def test_a_tree_that_is_not_a_checkout_is_walked_and_its_outputs_skipped(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "model.py").write_text('"""A model."""\n\n# ' + CAUGHT[7] + "\n")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "out.md").write_text(CAUGHT[0] + "\n")
    (tmp_path / "picture.png").write_bytes(b"\x89PNG\0\0" + CAUGHT[0].encode())
    (tmp_path / "LICENSE").write_text(CAUGHT[0] + "\n")
    assert [f.split(": ")[0] for f in findings(tmp_path)] == ["pkg/model.py:3"]
