"""A byte-level BPE tokenizer trained with Hugging Face ``tokenizers``.

Byte-level means every UTF-8 byte is in the base alphabet, so any text encodes and
``decode(encode(text)) == text`` holds exactly (no normaliser, no added prefix space).
``<|endoftext|>`` is the one special token; the token stream puts it after every story.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import Regex, decoders, models, pre_tokenizers, trainers

from moelab.errors import MoelabError, short_repr
from moelab.data.story_text import EOT_TEXT, SEPARATOR_BYTES

# 256 byte symbols plus <|endoftext|>.
MIN_VOCAB_SIZE = 257
# A sanity cap, checked before the BPE trainer runs: it reserves memory in proportion to the
# vocabulary it is asked for (about 70 bytes a token), so 10^9 tokens abort the process. 2^20
# is eight times the largest vocabularies in use; the data usually supports far fewer.
MAX_VOCAB_SIZE = 1 << 20
# The longest pre-token BPE sees, in bytes: the GPT-2 pattern keeps an unbroken run (a URL,
# base64, minified code) as one word, and the trainer's cost grows with the square of a word's
# length (each merge rewrites the word's symbol list): 36 s for one 100 KB "abab..." at 300
# tokens, 0.4 s cut (benchmarks/long_word.py). Longer words are cut into pieces of this length,
# for training and encoding alike. No word of the TinyStories samples is over 40 bytes, so
# their tokenizers keep every merge.
MAX_PRE_TOKEN_BYTES = 256
# Bump when anything below changes the trained tokenizer: cached tokenizers and token files
# are keyed by it, so old caches are never reused by mistake. 2: words cut at 256 bytes.
TOKENIZER_RECIPE_VERSION = 2


class Tokenizer:
    """The project's view of a trained tokenizer: encode, decode, the separator id, its file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self._hf = HFTokenizer.from_file(str(self.path))
        except Exception as exc:  # noqa: BLE001 -- tokenizers raises a bare Exception on a bad file
            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise MoelabError(f"{self.path} is not a valid tokenizer file ({first_line})") from None
        eot_id = self._hf.token_to_id(EOT_TEXT)
        if eot_id is None:
            raise MoelabError(f"{self.path} has no {EOT_TEXT} token")
        self.eot_id: int = eot_id
        self.vocab_size: int = self._hf.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no separator appended)."""
        return self._hf.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """``encode`` of many texts at once, on all cores (tokenizers' thread pool)."""
        return [e.ids for e in self._hf.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``; separators stay visible as ``<|endoftext|>``."""
        return self._hf.decode([int(i) for i in ids], skip_special_tokens=False)

    def token_byte_lengths(self) -> np.ndarray:
        """UTF-8 bytes each token id stands for, (V,) int64; the separator counts as its line.

        Summed over a split's token stream this gives the split's ``bytes`` exactly, so it turns
        any set of target tokens (validation windows, say) into an exact byte count.
        """
        # Byte-level BPE spells every byte as one printable character, so a token's length in
        # characters is its length in bytes.
        lengths = np.zeros(self.vocab_size, dtype=np.int64)
        for token, token_id in self._hf.get_vocab().items():
            lengths[token_id] = SEPARATOR_BYTES if token == EOT_TEXT else len(token)
        return lengths

    def largest_id(self) -> int:
        """The largest token id (a crafted file may skip ids, so not always vocab_size - 1)."""
        return max(self._hf.get_vocab(with_added_tokens=True).values())

    def sha256(self) -> str:
        return file_sha256(self.path)


def check_vocab_size(vocab_size: int) -> None:
    if vocab_size < MIN_VOCAB_SIZE:
        raise MoelabError(
            f"vocab_size={vocab_size} is too small: allowed >= {MIN_VOCAB_SIZE} "
            f"(256 byte symbols + {EOT_TEXT})"
        )
    if vocab_size > MAX_VOCAB_SIZE:
        raise MoelabError(f"vocab_size={vocab_size} is too large: allowed "
                          f"{MIN_VOCAB_SIZE}..{MAX_VOCAB_SIZE}")


def supported_vocab_bound(batches: Iterable[list[str]], enough: int) -> int:
    """An upper bound on the vocabulary byte-level BPE can reach on these stories; counting
    stops once it reaches ``enough`` (so a usual request costs a few batches, not a pass).

    BPE never merges across the pre-tokenizer's words, and every merge joins two symbols in
    at least one distinct word, which shrinks that word by one symbol. A word of n bytes
    can shrink n - 1 times, so there are at most sum(n - 1) merges over the distinct words,
    and each adds at most one token to the 256 bytes and ``<|endoftext|>``.
    """
    splitter = byte_level_pre_tokenizer()  # as ``train_tokenizer``'s
    seen: set[str] = set()
    bound = MIN_VOCAB_SIZE
    for stories in batches:
        for story in stories:
            for word, _ in splitter.pre_tokenize_str(story):  # one character per byte
                if word not in seen:
                    seen.add(word)
                    bound += len(word) - 1
            if bound >= enough:
                return bound
    return bound


def check_data_supports_vocab(batches: Iterable[list[str]], vocab_size: int,
                              source_label: str) -> None:
    """Refuse, before training, a vocabulary the data cannot reach (``supported_vocab_bound``)."""
    bound = supported_vocab_bound(batches, vocab_size)
    if bound < vocab_size:
        raise MoelabError(
            f"vocab_size={vocab_size} is too large for data source {short_repr(source_label)}: byte-level "
            f"BPE on its training split can reach at most {bound} tokens (256 bytes, "
            f"{EOT_TEXT} and one merge per byte after the first of each distinct word); "
            f"allowed {MIN_VOCAB_SIZE}..{bound}"
        )


def byte_level_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """GPT-2's byte-level words, each cut into pieces of at most ``MAX_PRE_TOKEN_BYTES`` bytes
    (after ``ByteLevel`` every byte is one character, so the cut counts bytes; it may split a
    character's bytes, which byte-level decoding joins again)."""
    return pre_tokenizers.Sequence([
        pre_tokenizers.ByteLevel(add_prefix_space=False),
        pre_tokenizers.Split(Regex(rf"[\s\S]{{1,{MAX_PRE_TOKEN_BYTES}}}"), behavior="isolated"),
    ])


def train_tokenizer(batches: Iterable[list[str]], vocab_size: int, path: Path,
                    source_label: str, *, progress: bool = False) -> Tokenizer:
    """Train a byte-level BPE of ``vocab_size`` tokens on ``batches`` of stories, save to ``path``.

    Raises ``MoelabError`` when the corpus runs out of merges before reaching ``vocab_size``
    (tokenizers then stops early and silently returns a smaller vocabulary).
    """
    from moelab.fileio import atomic_write

    check_vocab_size(vocab_size)
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = byte_level_pre_tokenizer()
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=progress,
    )
    hf.train_from_iterator(batches, trainer=trainer)
    reached = hf.get_vocab_size()
    if reached < vocab_size:
        raise MoelabError(
            f"vocab_size={vocab_size} is too large for data source {short_repr(source_label)}: its training "
            f"split only supports {reached} BPE tokens; allowed {MIN_VOCAB_SIZE}..{reached}"
        )
    atomic_write(path, lambda tmp: hf.save(tmp))
    return Tokenizer(path)


def file_sha256(path: Path, chunk_bytes: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()
