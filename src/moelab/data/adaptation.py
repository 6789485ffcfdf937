"""Build the adaptation set: an instruction-style rewrite of the bundled validation stories, the
text a sweep's points are fine-tuned on (``data.source: adaptation``).

    python -m moelab.data.adaptation            # rewrite moelab/data/sample/adaptation-*.txt.xz
    python -m moelab.data.adaptation --check    # rebuild in memory, compare with the shipped files

Only the bundled validation sample (``moelab/data/sample/tinystories-valid.txt.xz``, 500
stories, the first stories of TinyStories' validation split) is read: pretraining never trains
on it. The zero-shot tasks (``moelab.tasks.build``) are made from the same stories, for another
purpose. Each story becomes one document in the manner of TinyStories-Instruct:

    Words: lemon, park, escape
    Summary: <its first sentence> <its last sentence>        (half of the stories)
    Random sentence: <one of its middle sentences>           (half of the stories)
    Story: <the story as it is>

so a model pretrained on plain stories has a new format to adapt to. The words are three
distinct words of 4+ letters of the story (not in ``COMMON_WORDS``). Story i (0-based, file
order) is held out (``valid``) when i % 5 == 4: 100 documents to validate on, 400 to train
on (``train``). Every random choice comes from ``random.Random(SEED + i)`` for story i, so
the same input gives byte-identical text on every machine and Python version >= 3.10. The
files ship xz-compressed; ``--check`` compares their decompressed text byte for byte.
"""

from __future__ import annotations

import argparse
import lzma
import random
import re
import sys
from importlib import resources
from pathlib import Path

from moelab.data.stories import read_valid_stories, sentences
from moelab.data.story_text import EOT_TEXT
from moelab.data.text_sources import ADAPTATION_FILES
from moelab.errors import MoelabError
from moelab.fileio import atomic_write_bytes

SEED = 40
HELD_OUT_EVERY = 5
"""Story i is held out when i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1."""
KEYWORDS = 3
COMMON_WORDS = frozenset(
    "that this with they them then there their were what when will would could should have "
    "from said just like very some into over your about been because after again went came "
    "once upon time little named lived loved wanted every other more than also only where "
    "down back away made felt know saw".split())
_WORD = re.compile(r"\b[a-z]{4,}\b")


def instruction_document(story: str, rng: random.Random) -> str:
    """``story`` with its Words / Summary / Random sentence header (module docstring)."""
    words = list(dict.fromkeys(w for w in _WORD.findall(story) if w not in COMMON_WORDS))
    lines = [f"Words: {', '.join(rng.sample(words, min(KEYWORDS, len(words))))}"]
    parts = sentences(story)
    if len(parts) >= 2 and rng.random() < 0.5:
        lines.append(f"Summary: {parts[0]} {parts[-1]}")
    if len(parts) >= 3 and rng.random() < 0.5:
        lines.append(f"Random sentence: {rng.choice(parts[1:-1])}")
    lines.append(f"Story: {story}")
    return "\n".join(lines)


def build_texts(stories: list[str] | None = None) -> dict[str, str]:
    """Split name ('train', 'valid') -> its text in the TinyStories layout."""
    stories = read_valid_stories() if stories is None else stories
    documents: dict[str, list[str]] = {"train": [], "valid": []}
    for index, story in enumerate(stories):
        split = "valid" if index % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else "train"
        documents[split].append(instruction_document(story, random.Random(SEED + index)))
    return {split: "".join(f"{doc}\n{EOT_TEXT}\n" for doc in docs)
            for split, docs in documents.items()}


def shipped_folder() -> Path:
    return Path(str(resources.files("moelab.data").joinpath("sample")))


def read_shipped(folder: Path, split: str) -> str | None:
    """The decompressed text of a shipped split file (None when missing or unreadable)."""
    try:
        return lzma.decompress((folder / ADAPTATION_FILES[split]).read_bytes()).decode("utf-8")
    except (OSError, lzma.LZMAError, UnicodeDecodeError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="folder to write (default: the package's data/sample)")
    parser.add_argument("--check", action="store_true",
                        help="compare a fresh build with the files in --out (exit 1 if any "
                             "differs) instead of writing")
    args = parser.parse_args(argv)
    out = args.out or shipped_folder()
    try:
        texts = build_texts()
    except MoelabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        stale = [ADAPTATION_FILES[split] for split, text in texts.items()
                 if read_shipped(out, split) != text]
        for name in stale:
            print(f"{out / name} differs from a fresh build", file=sys.stderr)
        return 1 if stale else 0
    for split, text in texts.items():
        atomic_write_bytes(out / ADAPTATION_FILES[split], lzma.compress(text.encode("utf-8")))
        print(f"{ADAPTATION_FILES[split]}: {text.count(EOT_TEXT)} documents, "
              f"{len(text.encode('utf-8')):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
