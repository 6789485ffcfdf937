"""Build the zero-shot task files from the held-out (validation) TinyStories stories.

    python -m moelab.tasks.build            # rewrite src/moelab/tasks/data/*.jsonl
    python -m moelab.tasks.build --check    # rebuild in memory, compare with the shipped files

Only the bundled validation sample (``moelab/data/sample/tinystories-valid.txt.xz``, 500
stories) is read; the training split never is. Every random choice comes from
``random.Random(SEED + k)`` with a fixed k per task, and the stories are visited in file order,
so the same input gives byte-identical files on every machine and Python version >= 3.10.

Tasks (one JSON object a line; ``story`` is the 0-based index in the validation sample):

- ``last_word`` (LAMBADA-style): a sentence of a story that ends in ``word.``, where ``word``
  (3+ letters) already occurs earlier in the story, so the context makes it guessable (the
  LAMBADA property, without LAMBADA's human filtering). ``context`` is the story up to that
  word, ``target`` is ``" word"``. One item per story, at most ``ITEMS_PER_TASK``.
- ``ending``: the story without its last sentence as ``context``; ``endings`` holds the true
  last sentence and ``ENDING_DISTRACTORS`` last sentences of other stories of similar length
  (0.75-1.33x its characters), each with the separator that preceded the true one; ``label``
  indexes the true one.
- ``agreement`` (BLiMP-style minimal pairs): ``good`` is a sentence of a story, ``bad`` the same
  sentence with one word changed: ``verb_number`` swaps the number of be/have/do after a
  subject pronoun ("she was" -> "she were", "they have" -> "they has"); ``pronoun_case`` puts a
  subject pronoun after a conjunction in the object case ("but she smiled" -> "but her
  smiled") or an object pronoun before punctuation in the subject case ("gave it to him." ->
  "gave it to he."). Each pair of swapped words is balanced by direction (as many pairs with
  "was" grammatical as with "were"), see ``agreement_items``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from importlib import resources
from pathlib import Path

from moelab.data.stories import read_valid_stories, sentence_spans
from moelab.fileio import atomic_write_text
from moelab.tasks import TASK_FILES

SEED = 20
ITEMS_PER_TASK = 300
ENDING_DISTRACTORS = 3
# Endings and minimal pairs have 4 to 16 words, so that every continuation fits the context of
# a run with max_seq_len 64 (with a vocabulary of 512 tokens or more).
MAX_SENTENCE_WORDS = 16

_QUOTES = "\"'\u201c\u201d\u2018\u2019"
_LAST_WORD = re.compile(r"(?<=\s)([A-Za-z]{3,})\.$")

# verb_number: (subject pronouns, their verb -> the verb of the other number).
_SINGULAR_SWAPS = {"is": "are", "was": "were", "has": "have", "does": "do"}
_PLURAL_SWAPS = {"are": "is", "were": "was", "have": "has", "do": "does"}
_I_SWAPS = {"am": "is", "have": "has", "do": "does"}  # not "was": "I were" can be subjunctive
_VERB_SWAPS = {"he": _SINGULAR_SWAPS, "she": _SINGULAR_SWAPS, "it": _SINGULAR_SWAPS,
               "they": _PLURAL_SWAPS, "we": _PLURAL_SWAPS, "you": _PLURAL_SWAPS, "I": _I_SWAPS}
_PRONOUN_VERB = re.compile(r"\b(he|she|it|they|we|you|I|He|She|It|They|We|You)\s+([a-z]+)\b")
# pronoun_case: subject <-> object forms, lowercase only (a capitalised "Him" or "Us" is rare
# in the stories and splits into more tokens than "He", which an untrained model would already
# read as less likely); "you" and "it" have one form; "her" is also possessive, so it is only
# swapped before punctuation, where it is the object.
_SUBJECT_TO_OBJECT = {"he": "him", "she": "her", "they": "them", "we": "us", "I": "me"}
_OBJECT_TO_SUBJECT = {"him": "he", "her": "she", "them": "they", "us": "we", "me": "I"}
_CLAUSE_SUBJECT = re.compile(
    r"\b(?:and|but|so|because|when|that|if|until|while|then) (he|she|they|we|I)"
    r"(?= (?!and\b|or\b)[a-z]+\b)")
_OBJECT_BEFORE_PUNCT = re.compile(r"(?<=\s)(him|her|them|us|me)(?=[.,!?])")


def _plain(sentence: str) -> bool:
    """A sentence without quotes (the splitter cuts quoted speech at the wrong places)."""
    return not any(q in sentence for q in _QUOTES)


# --------------------------------------------------------------------------------------------
# The three tasks
# --------------------------------------------------------------------------------------------


def last_word_items(stories: list[str]) -> list[dict]:
    rng = random.Random(SEED + 1)
    items = []
    for index, story in enumerate(stories):
        choices = []
        for sentence_number, (start, end) in enumerate(sentence_spans(story)):
            sentence = story[start:end]
            match = _LAST_WORD.search(sentence)
            if sentence_number == 0 or not _plain(sentence) or match is None:
                continue
            word_start = start + match.start(1)
            context = story[:word_start].rstrip()
            if re.search(rf"\b{match.group(1)}\b", context) and story[len(context)] == " ":
                choices.append({"context": context, "target": " " + match.group(1)})
        if choices:
            items.append({"story": index, **rng.choice(choices)})
    return _numbered("last_word", _subset(items, rng))


def ending_items(stories: list[str]) -> list[dict]:
    rng = random.Random(SEED + 2)
    candidates = []  # (story index, context, separator, last sentence)
    for index, story in enumerate(stories):
        spans = sentence_spans(story)
        if len(spans) < 3:
            continue
        start, end = spans[-1]
        last = story[start:end]
        if _plain(last) and 4 <= len(last.split()) <= MAX_SENTENCE_WORDS:
            context = story[:start].rstrip()
            candidates.append((index, context, story[len(context):start], last))
    items = []
    for index, context, separator, last in candidates:
        pool = [c for c in candidates if c[0] != index and c[3] != last
                and 0.75 <= len(c[3]) / len(last) <= 4 / 3]
        if len(pool) < ENDING_DISTRACTORS:
            continue
        distractors = rng.sample(pool, ENDING_DISTRACTORS)
        label = rng.randrange(ENDING_DISTRACTORS + 1)
        endings = [separator + d[3] for d in distractors]
        endings.insert(label, separator + last)
        items.append({"story": index, "context": context, "endings": endings, "label": label,
                      "distractor_stories": [d[0] for d in distractors]})
    return _numbered("ending", _subset(items, rng))


def minimal_pairs(sentence: str) -> list[tuple[str, str, str, str]]:
    """(phenomenon, grammatical word, its swap, ungrammatical twin) for each swap of
    ``sentence``: at most one per phenomenon."""
    pairs = []
    for match in _PRONOUN_VERB.finditer(sentence):
        pronoun = match.group(1) if match.group(1) == "I" else match.group(1).lower()
        verb = match.group(2)
        swapped = _VERB_SWAPS[pronoun].get(verb)
        if swapped:
            pairs.append(("verb_number", verb, swapped,
                          sentence[:match.start(2)] + swapped + sentence[match.end(2):]))
            break
    for pattern, swaps in ((_CLAUSE_SUBJECT, _SUBJECT_TO_OBJECT),
                           (_OBJECT_BEFORE_PUNCT, _OBJECT_TO_SUBJECT)):
        found = pattern.search(sentence)
        if found:
            pronoun, swapped = found.group(1), swaps[found.group(1)]
            pairs.append(("pronoun_case", pronoun, swapped,
                          sentence[:found.start(1)] + swapped + sentence[found.end(1):]))
            break
    return pairs


def agreement_items(stories: list[str]) -> list[dict]:
    """``ITEMS_PER_TASK // 2`` pairs of each phenomenon, balanced by direction.

    Within a phenomenon, pairs are grouped by the two words swapped ({was, were}, {he, him},
    ...) and drawn round-robin over the groups, one pair of each direction at a time ("was"
    grammatical, then "were" grammatical), so that every group is balanced: a model that only
    prefers one word of a pair whatever the sentence (a unigram preference, or a word that
    its tokenizer splits into more tokens) scores exactly chance on it. Neither word of a
    pair occurs elsewhere in its sentence: then the two sentences differ by a swap of two
    word ids only, which leaves the distribution of a freshly initialised model unchanged, so
    an untrained model prefers the grammatical one with probability 1/2 on every pair.
    """
    rng = random.Random(SEED + 3)
    by_direction: dict[tuple[str, frozenset, str], list[dict]] = {}
    for index, story in enumerate(stories):
        for start, end in sentence_spans(story):
            sentence = story[start:end]
            if not (_plain(sentence) and 4 <= len(sentence.split()) <= MAX_SENTENCE_WORDS):
                continue
            for phenomenon, good_word, bad_word, bad in minimal_pairs(sentence):
                if _count_words(sentence, good_word, bad_word) != 1:
                    continue
                key = (phenomenon, frozenset((good_word, bad_word)), good_word)
                by_direction.setdefault(key, []).append(
                    {"story": index, "phenomenon": phenomenon,
                     "swap": f"{good_word} -> {bad_word}", "good": sentence, "bad": bad})
    items = []
    for phenomenon in ("verb_number", "pronoun_case"):
        groups: dict[frozenset, list[list[dict]]] = {}
        for (name, words, _good_word), pairs in sorted(by_direction.items(),
                                                      key=lambda kv: (kv[0][0], kv[0][2])):
            if name == phenomenon:  # sorted by the grammatical word: a fixed order
                groups.setdefault(words, []).append(rng.sample(pairs, len(pairs)))
        balanced = [queues for queues in groups.values() if len(queues) == 2]
        drawn: list[dict] = []
        while len(drawn) + 2 <= ITEMS_PER_TASK // 2 and any(all(q) for q in balanced):
            for first, second in balanced:
                if first and second and len(drawn) + 2 <= ITEMS_PER_TASK // 2:
                    drawn += [first.pop(), second.pop()]
        items += drawn
    items.sort(key=lambda item: (item["story"], item["good"], item["phenomenon"]))
    return _numbered("agreement", items)


def _count_words(sentence: str, *words: str) -> int:
    """How often any of ``words`` occurs in ``sentence`` as a word, ignoring case."""
    pattern = r"\b(?:" + "|".join(map(re.escape, words)) + r")\b"
    return len(re.findall(pattern, sentence, flags=re.IGNORECASE))


def _subset(items: list[dict], rng: random.Random) -> list[dict]:
    """At most ITEMS_PER_TASK items, chosen at random, kept in story order."""
    if len(items) <= ITEMS_PER_TASK:
        return items
    keep = sorted(rng.sample(range(len(items)), ITEMS_PER_TASK))
    return [items[i] for i in keep]


def _numbered(task: str, items: list[dict]) -> list[dict]:
    return [{"id": f"{task}-{n:04d}", **item} for n, item in enumerate(items)]


BUILDERS = {"last_word": last_word_items, "ending": ending_items, "agreement": agreement_items}


def build_files(stories: list[str] | None = None) -> dict[str, str]:
    """File name -> JSONL text of every task."""
    stories = read_valid_stories() if stories is None else stories
    return {TASK_FILES[task]: "".join(json.dumps(item, ensure_ascii=False) + "\n"
                                      for item in builder(stories))
            for task, builder in BUILDERS.items()}


def shipped_folder() -> Path:
    return Path(str(resources.files("moelab.tasks").joinpath("data")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="folder to write (default: the package's tasks/data)")
    parser.add_argument("--check", action="store_true",
                        help="compare a fresh build with the files in --out (exit 1 if any "
                             "differs) instead of writing")
    args = parser.parse_args(argv)
    out = args.out or shipped_folder()
    files = build_files()
    if args.check:
        stale = [name for name, text in files.items()
                 if not (out / name).is_file() or (out / name).read_text("utf-8") != text]
        for name in stale:
            print(f"{out / name} differs from a fresh build", file=sys.stderr)
        return 1 if stale else 0
    for name, text in files.items():
        atomic_write_text(out / name, text)
        print(f"{name}: {text.count(chr(10))} items, {len(text.encode('utf-8')):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
