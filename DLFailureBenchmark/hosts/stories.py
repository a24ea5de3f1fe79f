"""Stories: generated English-like text for the realistic language-model programs, written as a corpus's files.

Each sentence is set in one of a few places; the place decides which people, things and deeds
appear, and a sentence's verb decides what may follow it. So the next word depends on the words
before it, near and far, and a model has something to learn. The text is drawn from a seed: the
same seed writes the same files, and nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

PLACES = {
    "harbour": (["the sailor", "the fisher", "the captain", "an old pilot"],
                ["the nets", "a rope", "the anchor", "the small boat", "the lantern"],
                ["mended", "pulled", "tied", "painted", "lowered"]),
    "kitchen": (["the cook", "the baker", "my aunt", "the young apprentice"],
                ["the bread", "a pot", "the soup", "the knives", "the flour"],
                ["stirred", "baked", "washed", "sliced", "tasted"]),
    "garden": (["the gardener", "a child", "the neighbour", "the old woman"],
               ["the roses", "a spade", "the hedge", "the apples", "the seeds"],
               ["watered", "planted", "trimmed", "picked", "dug"]),
    "school": (["the teacher", "a pupil", "the head", "the new student"],
               ["the lesson", "a book", "the map", "the chalk", "the exam"],
               ["read", "marked", "copied", "explained", "forgot"]),
    "market": (["the trader", "a farmer", "the buyer", "the butcher"],
               ["the cheese", "a basket", "the eggs", "the scales", "the coins"],
               ["sold", "weighed", "counted", "carried", "wrapped"]),
}
TIMES = ["in the morning", "at noon", "before dusk", "after the rain", "on sunday", "all day"]
MOODS = ["slowly", "quickly", "carefully", "again", "at last"]


def sentence(rng: np.random.Generator) -> str:
    """One sentence: who did what to which thing, where and when, sometimes with a second clause."""
    place = list(PLACES)[rng.integers(len(PLACES))]
    people, things, deeds = PLACES[place]
    who, what, deed = people[rng.integers(4)], things[rng.integers(5)], deeds[rng.integers(5)]
    words = [who, deed, what]
    if rng.random() < 0.5:
        words.append(MOODS[rng.integers(len(MOODS))])
    words.append(f"in the {place}" if rng.random() < 0.6 else TIMES[rng.integers(len(TIMES))])
    if rng.random() < 0.35:  # a second clause about the same thing, from the same place
        words += ["and then", people[rng.integers(4)], deeds[rng.integers(5)], "it"]
    return " ".join(words) + " ."


def text(sentences: int, seed: int) -> list[str]:
    """`sentences` sentences, one per line."""
    rng = np.random.default_rng(seed)
    return [sentence(rng) for _ in range(sentences)]


def write_corpus(folder: Path, train: int = 1500, valid: int = 200, test: int = 200, seed: int = 0) -> Path:
    """`train.txt`, `valid.txt` and `test.txt` of that many sentences each, in `folder` (made); returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    for offset, (name, count) in enumerate((("train", train), ("valid", valid), ("test", test))):
        lines = text(count, seed * 10 + offset)
        (folder / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder
