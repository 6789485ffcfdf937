"""Stories as text: the TinyStories layout (each story on its own lines, followed by a line
``<|endoftext|>``), a .jsonl file's stories, a split's size in bytes, and the slice of one file
held out for validation.

A story is the text between two separators with surrounding whitespace stripped; empty stories
are dropped. A split's ``bytes`` are counted in the TinyStories layout (story +
``"\\n<|endoftext|>\\n"`` in UTF-8), which is exactly the file size of a file already in it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from moelab.errors import MoelabError

EOT_TEXT = "<|endoftext|>"
# What one document separator costs in the TinyStories file layout (a line of its own).
SEPARATOR_BYTES = len(f"\n{EOT_TEXT}\n".encode())
JSONL_TEXT_FIELDS = ("text", "story")


def split_stories(text: str) -> list[str]:
    """Stories of a TinyStories-layout text: split on ``<|endoftext|>``, strip, drop empties."""
    return [story for story in (piece.strip() for piece in text.split(EOT_TEXT)) if story]


def decode_utf8(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MoelabError(
            f"{where} is not UTF-8 text: invalid byte 0x{raw[exc.start]:02x} at offset "
            f"{exc.start}; allowed: UTF-8 encoded .txt or .jsonl"
        ) from None


def jsonl_stories(text: str, where: str) -> list[str]:
    """Stories of a ``.jsonl`` text: one JSON object per line with a 'text' or 'story' field."""
    stories = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            raise MoelabError(f"{where} line {line_number} is not valid JSON") from None
        fields = [f for f in JSONL_TEXT_FIELDS if isinstance(record, dict) and f in record]
        field = fields[0] if fields else None
        if field is None or not isinstance(record[field], str):
            raise MoelabError(
                f"{where} line {line_number} has no string field 'text' or 'story'"
            )
        story = record[field].strip()
        if story:
            stories.append(story)
    return stories


def split_bytes(stories: Sequence[str]) -> int:
    """UTF-8 size of ``stories`` in the TinyStories layout (each followed by a separator line)."""
    return sum(len(story.encode("utf-8")) for story in stories) + SEPARATOR_BYTES * len(stories)


def held_out_mask(num_stories: int, valid_fraction: float) -> list[bool]:
    """Which stories of a single file are validation: evenly spread, about ``valid_fraction``.

    Story i is held out when floor((i + 1) * f) > floor(i * f), i.e. once every 1/f stories,
    so the validation slice samples the whole file rather than only its tail.
    """
    return [int((i + 1) * valid_fraction) > int(i * valid_fraction) for i in range(num_stories)]
