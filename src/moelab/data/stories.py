"""The bundled held-out stories and their sentences, which the files built from them (the
zero-shot tasks, the adaptation set) both read: one reader and one splitter, so that both
builds see the same stories cut the same way."""

from __future__ import annotations

import lzma
import re

from moelab.data.story_text import split_stories
from moelab.data.text_sources import sample_path

# A sentence ends at . ! or ? (repeated, and a closing quote) followed by whitespace or the end.
SENTENCE_END = re.compile(r"[.!?]+[\"'\u201d]?(?=\s|$)")


def read_valid_stories() -> list[str]:
    """The 500 stories of the bundled validation sample, in file order."""
    return split_stories(lzma.decompress(sample_path("valid").read_bytes()).decode("utf-8"))


def sentence_spans(story: str) -> list[tuple[int, int]]:
    """(start, end) character spans of the sentences of ``story``, in order, covering it."""
    spans, start = [], 0
    for match in SENTENCE_END.finditer(story):
        spans.append((start, match.end()))
        start = match.end()
        while start < len(story) and story[start].isspace():
            start += 1
    if start < len(story):
        spans.append((start, len(story)))
    return spans


def sentences(story: str) -> list[str]:
    """The sentences of ``story`` in order, the whitespace around them dropped."""
    return [text for start, end in sentence_spans(story) if (text := story[start:end].strip())]
