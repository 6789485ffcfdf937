"""Rebuild the bundled sample from an offline TinyStories copy (train.txt + valid.txt).

    python -m moelab.data.make_sample FOLDER

Train: stories whose index i (0-based, file order) has i % 5 in {0, 1}: 40 % of the copy,
spread over all of it (the copy is a concatenation of several provenances). Valid: the first
500 stories of valid.txt. Both are written in the TinyStories layout and xz-compressed.
"""

from __future__ import annotations

import argparse
import lzma
from pathlib import Path

from moelab.data.story_text import EOT_TEXT, split_stories
from moelab.data.text_sources import SAMPLE_FILES
from moelab.fileio import atomic_write_bytes

TRAIN_KEEP_EVERY = 5
TRAIN_KEEP_FIRST = 2
VALID_STORIES = 500


def sample_stories(folder: Path) -> dict[str, list[str]]:
    train = split_stories((folder / "train.txt").read_text(encoding="utf-8"))
    valid = split_stories((folder / "valid.txt").read_text(encoding="utf-8"))
    return {
        "train": [s for i, s in enumerate(train) if i % TRAIN_KEEP_EVERY < TRAIN_KEEP_FIRST],
        "valid": valid[:VALID_STORIES],
    }


def tinystories_layout(stories: list[str]) -> str:
    return "".join(f"{story}\n{EOT_TEXT}\n" for story in stories)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="folder with train.txt and valid.txt")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "sample")
    args = parser.parse_args()
    for split, stories in sample_stories(args.folder).items():
        raw = tinystories_layout(stories).encode("utf-8")
        packed = lzma.compress(raw, preset=9 | lzma.PRESET_EXTREME)
        atomic_write_bytes(args.out / SAMPLE_FILES[split], packed)
        print(f"{split}: {len(stories)} stories, {len(raw):,} bytes, {len(packed):,} compressed")


if __name__ == "__main__":
    main()
