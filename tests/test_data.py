"""The data pipeline: sources, tokenizer, token cache, prepare-data CLI and bad input.

References are independent of the pipeline: the stories are re-read here with plain string
splitting, tokens are compared with Hugging Face ``tokenizers`` called directly, and counts with
the README of the shared TinyStories copy.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from moelab.cli import main
from moelab.config import DataConfig, load_config
from moelab.data import EOT_TEXT, Tokenizer, prepare_data
from moelab.data import cache as cache_module
from moelab.data.encoding import WordCacheEncoder, encode_batches
from moelab.errors import MoelabError

SMALL_VOCAB = 512
SMALL_TRAIN_STORIES = 600
LAYOUT_SEPARATOR = f"\n{EOT_TEXT}\n"


# --------------------------------------------------------------------------------------------
# Helpers and shared fixtures
# --------------------------------------------------------------------------------------------


def bundled_sample_stories(split: str) -> list[str]:
    """The bundled sample re-read with plain string splitting (not the pipeline's parser)."""
    name = {"train": "tinystories-train.txt.xz", "valid": "tinystories-valid.txt.xz"}[split]
    raw = resources.files("moelab.data").joinpath("sample", name).read_bytes()
    text = lzma.decompress(raw).decode("utf-8")
    assert text.endswith(LAYOUT_SEPARATOR)
    return text[: -len(LAYOUT_SEPARATOR)].split(LAYOUT_SEPARATOR)


def write_layout(path: Path, stories: list[str]) -> Path:
    path.write_text("".join(story + LAYOUT_SEPARATOR for story in stories), encoding="utf-8")
    return path


def hf_stream(tokenizer: Tokenizer, stories: list[str]) -> np.ndarray:
    """Each story encoded by Hugging Face tokenizers itself, then the separator id."""
    from tokenizers import Tokenizer as HFTokenizer

    hf = HFTokenizer.from_file(str(tokenizer.path))
    eot = hf.token_to_id(EOT_TEXT)
    return np.array([i for story in stories
                     for i in hf.encode(story, add_special_tokens=False).ids + [eot]])


def as_stream_text(stories: list[str]) -> str:
    """What a token stream of ``stories`` decodes to: each story, then the separator."""
    return "".join(story + EOT_TEXT for story in stories)


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["prepare-data", "--no-progress", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="session")
def small_data(tmp_path_factory):
    """600 sample stories, vocab 512: trained once per test session."""
    cfg = DataConfig(source="sample", max_train_stories=SMALL_TRAIN_STORIES,
                     cache_dir=str(tmp_path_factory.mktemp("small-cache")))
    return prepare_data(cfg, SMALL_VOCAB, progress=False)


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory) -> Path:
    """A folder source of 120 train / 20 valid real stories (the bad-input tests' base)."""
    folder = tmp_path_factory.mktemp("tiny-source")
    stories = bundled_sample_stories("train")
    write_layout(folder / "train.txt", stories[:120])
    write_layout(folder / "valid.txt", stories[120:140])
    return folder


# --------------------------------------------------------------------------------------------
# Bundled sample
# --------------------------------------------------------------------------------------------


def test_sample_loads_offline_with_all_its_stories(small_data):
    assert small_data.train.stories == SMALL_TRAIN_STORIES
    valid_stories = bundled_sample_stories("valid")
    assert small_data.valid.stories == len(valid_stories) == 500
    # The valid stream decodes to exactly the stories, each followed by the separator.
    decoded = small_data.tokenizer.decode(small_data.valid.tokens)
    assert decoded == as_stream_text(valid_stories)


def test_sample_ships_its_licence_and_is_enough_for_the_demo():
    folder = resources.files("moelab.data").joinpath("sample")
    licence = folder.joinpath("LICENSE-CDLA-Sharing-1.0.txt").read_text("utf-8")
    notice = folder.joinpath("NOTICE.md").read_text("utf-8")
    assert licence.startswith("Community Data License Agreement - Sharing - Version 1.0")
    assert "roneneldan/TinyStories" in notice and "CDLA-Sharing-1.0" in notice
    compressed = sum(len(folder.joinpath(name).read_bytes())
                     for name in ("tinystories-train.txt.xz", "tinystories-valid.txt.xz"))
    assert compressed < 2.5e6  # keeps the repository lean
    train_bytes = sum(len(story.encode()) + len(LAYOUT_SEPARATOR)
                      for story in bundled_sample_stories("train"))
    demo = load_config("demo")
    # Even at 4.5 bytes per token (it is ~3.7 at the demo's vocab) one run fits in ~1 epoch.
    assert train_bytes / 4.5 > demo.train.max_tokens


def test_sample_stories_are_real_tinystories(shared_dir):
    shared = shared_dir / "data" / "tinystories"
    train_text = (shared / "train.txt").read_text("utf-8")
    valid_text = (shared / "valid.txt").read_text("utf-8")
    shared_train = set(train_text[: -len(LAYOUT_SEPARATOR)].split(LAYOUT_SEPARATOR))
    assert set(bundled_sample_stories("train")) <= shared_train
    valid_sample = bundled_sample_stories("valid")
    assert valid_text.startswith("".join(story + LAYOUT_SEPARATOR for story in valid_sample))


# --------------------------------------------------------------------------------------------
# Tokenizer and cache
# --------------------------------------------------------------------------------------------

TRICKY_TEXTS = [
    "",
    "Once upon a time, Lily's dog didn't bark. THEY'LL see!",
    "  two leading spaces, trailing three   ",
    "tabs\tand\r\nwindows lines\n\n\nand blank lines",
    "snake_case __dunder__ _x_ 2_000",
    "numbers 3.14159, 1,000,000 and x² ½ Ⅻ",
    "naïve café, decomposed cafe\u0301, Ελληνικά, русский, 中文, 日本語",
    "emoji 🐶🐱 and 👩‍👩‍👧 family, nbsp\u00a0here, ideographic\u3000space",
    f"an inline {EOT_TEXT} marker inside a story",
    "control \x00\x1b\x1f chars and \u2028 line separator",
]


@pytest.mark.parametrize("text", TRICKY_TEXTS)
def test_tokenizer_round_trips(small_data, text):
    assert small_data.tokenizer.decode(small_data.tokenizer.encode(text)) == text


def test_word_cache_encoder_equals_huggingface_tokenizers(small_data):
    stories = TRICKY_TEXTS[1:] + bundled_sample_stories("valid")[:50]
    encoder = WordCacheEncoder(small_data.tokenizer, np.dtype(np.uint16))
    assert np.array_equal(encoder.encode_stories(stories), hf_stream(small_data.tokenizer, stories))


def test_word_cache_encoder_forgets_and_relearns_past_its_limit(small_data, monkeypatch):
    monkeypatch.setattr("moelab.data.encoding.MAX_CACHED_WORDS", 50)
    stories = bundled_sample_stories("valid")[:30]
    encoder = WordCacheEncoder(small_data.tokenizer, np.dtype(np.uint16))
    tokens = np.concatenate([encoder.encode_stories(stories[i : i + 3]) for i in range(0, 30, 3)])
    assert np.array_equal(tokens, hf_stream(small_data.tokenizer, stories))


def test_parallel_encoding_keeps_order_and_equals_huggingface_tokenizers(small_data):
    stories = bundled_sample_stories("valid")[:120]
    batches = [stories[i : i + 16] for i in range(0, len(stories), 16)]
    environment_before = dict(os.environ)
    results = list(encode_batches(small_data.tokenizer, batches, np.dtype(np.uint16), workers=2))
    assert [batch for batch, _ in results] == batches
    tokens = np.concatenate([ids for _, ids in results])
    assert np.array_equal(tokens, hf_stream(small_data.tokenizer, stories))
    assert dict(os.environ) == environment_before


def test_memmap_equals_direct_encoding(small_data):
    train_stories = bundled_sample_stories("train")[:SMALL_TRAIN_STORIES]
    tokens = small_data.train.tokens
    assert isinstance(tokens, np.memmap) and tokens.dtype == np.uint16
    assert np.array_equal(tokens, hf_stream(small_data.tokenizer, train_stories))
    assert int(np.sum(tokens == small_data.tokenizer.eot_id)) == SMALL_TRAIN_STORIES


def test_token_files_widen_to_uint32_for_large_vocabularies(tmp_path, tiny_folder, monkeypatch):
    assert cache_module.token_dtype(65_536) == np.uint16
    assert cache_module.token_dtype(65_537) == np.uint32
    monkeypatch.setattr(cache_module, "token_dtype", lambda vocab_size: np.dtype(np.uint32))
    cfg = DataConfig(source=str(tiny_folder), cache_dir=str(tmp_path))
    prepared = prepare_data(cfg, 300, progress=False)
    assert prepared.valid.tokens.dtype == np.uint32
    assert (prepared.cache_dir / "valid.bin").stat().st_size == 4 * len(prepared.valid.tokens)
    valid_stories = bundled_sample_stories("train")[120:140]
    assert np.array_equal(prepared.valid.tokens, hf_stream(prepared.tokenizer, valid_stories))


def test_vocab_and_byte_counts(small_data):
    tokenizer = small_data.tokenizer
    assert tokenizer.vocab_size == SMALL_VOCAB
    for split, stories in ((small_data.valid, bundled_sample_stories("valid")),):
        expected_bytes = sum(len(s.encode("utf-8")) for s in stories) + len(stories) * 15
        assert split.bytes == expected_bytes
        assert split.bytes_per_token == pytest.approx(expected_bytes / len(split.tokens))
        # Each token's byte length summed over the stream gives the same count.
        assert int(tokenizer.token_byte_lengths()[split.tokens].sum()) == expected_bytes


def test_cache_is_reused_and_rebuilt_only_when_an_input_changes(tmp_path, tiny_folder, monkeypatch):
    source = tmp_path / "corpus"
    source.mkdir()
    for name in ("train.txt", "valid.txt"):
        (source / name).write_bytes((tiny_folder / name).read_bytes())
    cfg = DataConfig(source=str(source), cache_dir=str(tmp_path / "cache"))
    first = prepare_data(cfg, 300, progress=False)
    before = folder_bytes(first.cache_dir)

    def no_training(*args, **kwargs):
        raise AssertionError("the tokenizer was trained again")

    monkeypatch.setattr(cache_module, "train_tokenizer", no_training)
    again = prepare_data(cfg, 300, progress=False)
    assert again.cache_dir == first.cache_dir and folder_bytes(again.cache_dir) == before

    (source / "valid.txt").write_text("A new story.\n<|endoftext|>\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="trained again"):  # content changed: rebuild
        prepare_data(cfg, 300, progress=False)
    with pytest.raises(AssertionError, match="trained again"):  # vocab changed: rebuild
        prepare_data(DataConfig(source=str(tiny_folder), cache_dir=cfg.cache_dir), 301,
                     progress=False)
    assert folder_bytes(first.cache_dir) == before  # the old cache is left as it was


def test_builds_are_reproducible(tmp_path, tiny_folder):
    digests = []
    for name in ("a", "b"):
        cfg = DataConfig(source=str(tiny_folder), cache_dir=str(tmp_path / name))
        prepared = prepare_data(cfg, 300, progress=False)
        files = folder_bytes(prepared.cache_dir)
        digests.append({name: hashlib.sha256(data).hexdigest() for name, data in files.items()})
    assert digests[0] == digests[1]


def test_manifest_keeps_its_keys_and_counts_the_token_files(tmp_path, tiny_folder):
    cfg = DataConfig(source=str(tiny_folder), cache_dir=str(tmp_path))
    prepared = prepare_data(cfg, 300, progress=False)
    manifest = json.loads((prepared.cache_dir / "manifest.json").read_text())
    assert list(manifest) == ["manifest_version", "source", "source_fingerprint",
                              "tokenizer_recipe_version", "vocab_size", "eot_id",
                              "tokenizer_sha256", "dtype", "splits"]
    assert list(manifest["splits"]) == ["train", "valid"]
    for name, entry in manifest["splits"].items():
        assert list(entry) == ["file", "stories", "bytes", "tokens", "file_bytes", "sha256"]
        data = (prepared.cache_dir / entry["file"]).read_bytes()
        assert entry["file_bytes"] == len(data) == 2 * entry["tokens"]  # uint16 tokens
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
    assert manifest["dtype"] == "uint16" and manifest["vocab_size"] == 300


def test_interrupted_build_without_manifest_is_rebuilt(tmp_path, tiny_folder):
    cfg = DataConfig(source=str(tiny_folder), cache_dir=str(tmp_path))
    prepared = prepare_data(cfg, 300, progress=False)
    train_tokens = np.array(prepared.train.tokens)  # a copy: the file is about to be cut short
    cache_dir = prepared.cache_dir
    del prepared
    (cache_dir / "manifest.json").unlink()
    (cache_dir / "train.bin").write_bytes(b"half")
    rebuilt = prepare_data(cfg, 300, progress=False)
    assert np.array_equal(rebuilt.train.tokens, train_tokens)


# --------------------------------------------------------------------------------------------
# Sources
# --------------------------------------------------------------------------------------------


def test_single_txt_file_holds_out_an_even_validation_slice(tmp_path):
    stories = [f"Story number {i} is short." for i in range(40)]
    path = write_layout(tmp_path / "all.txt", stories)
    cfg = DataConfig(source=str(path), valid_fraction=0.1, cache_dir=str(tmp_path / "cache"))
    prepared = prepare_data(cfg, 300, progress=False)
    # Hand count: one story in ten, the 10th, 20th, 30th and 40th.
    held_out = [stories[i] for i in (9, 19, 29, 39)]
    kept = [s for i, s in enumerate(stories) if i not in (9, 19, 29, 39)]
    assert prepared.tokenizer.decode(prepared.valid.tokens) == as_stream_text(held_out)
    assert prepared.tokenizer.decode(prepared.train.tokens) == as_stream_text(kept)
    assert (prepared.train.stories, prepared.valid.stories) == (36, 4)


def test_jsonl_file_with_text_or_story_fields(tmp_path):
    lines = [json.dumps({"text": f"  Text story {i}.\n"}) for i in range(10)]
    lines += ["", json.dumps({"story": "A story field story.", "id": 7})]
    path = tmp_path / "stories.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = DataConfig(source=str(path), valid_fraction=0.25, cache_dir=str(tmp_path / "cache"))
    prepared = prepare_data(cfg, 260, progress=False)
    # Hand count: 11 stories, one in four held out: the 4th and the 8th.
    assert (prepared.train.stories, prepared.valid.stories) == (9, 2)
    decoded = prepared.tokenizer.decode(prepared.valid.tokens)
    assert decoded == f"Text story 3.{EOT_TEXT}Text story 7.{EOT_TEXT}"
    assert prepared.tokenizer.decode(prepared.train.tokens).endswith(
        f"Text story 9.{EOT_TEXT}A story field story.{EOT_TEXT}")


def test_hf_source_path_on_a_local_dataset(monkeypatch, tmp_path):
    datasets = pytest.importorskip("datasets")
    stories = bundled_sample_stories("train")[:60]
    local = datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"text": stories[:50] + ["   "]}),
        "validation": datasets.Dataset.from_dict({"text": ["\n" + s + "\n" for s in stories[50:]]}),
    })
    calls = []
    monkeypatch.setattr(datasets, "load_dataset", lambda name, *a, **k: calls.append(name) or local)
    cfg = DataConfig(source="hf", cache_dir=str(tmp_path))
    prepared = prepare_data(cfg, 300, progress=False)
    assert calls == ["roneneldan/TinyStories"]
    assert (prepared.train.stories, prepared.valid.stories) == (50, 10)  # blank story dropped
    assert prepared.tokenizer.decode(prepared.valid.tokens) == as_stream_text(stories[50:])
    monkeypatch.setattr(cache_module, "train_tokenizer", None)  # a rebuild would fail
    assert prepare_data(cfg, 300, progress=False).cache_dir == prepared.cache_dir


def test_hf_source_unreachable_is_a_one_line_error(monkeypatch, tmp_path):
    datasets = pytest.importorskip("datasets")

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'roneneldan/TinyStories' on the Hub\nmore detail")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(MoelabError, match="cannot load roneneldan/TinyStories") as info:
        prepare_data(DataConfig(source="hf", cache_dir=str(tmp_path)), 300, progress=False)
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def test_prepare_data_counts_on_the_shared_copy_equal_its_readme(shared_dir, tmp_path, capsys):
    source = shared_dir / "data" / "tinystories"
    code, out, err = run_cli(capsys, "--source", str(source), "--vocab-size", str(SMALL_VOCAB),
                             "--out", str(tmp_path), "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert set(summary) == {"vocab_size", "bytes_per_token", "splits"}
    # The README's table: stories and bytes (file sizes) of train.txt and valid.txt.
    assert summary["splits"]["train"]["stories"] == 15_933
    assert summary["splits"]["train"]["bytes"] == 13_267_564
    assert (source / "train.txt").stat().st_size == 13_267_564  # bytes = the file size
    assert summary["splits"]["valid"]["stories"] == 1_000
    assert summary["splits"]["valid"]["bytes"] == 802_259
    train = summary["splits"]["train"]
    assert summary["vocab_size"] == SMALL_VOCAB
    assert summary["bytes_per_token"] == pytest.approx(train["bytes"] / train["tokens"])
    assert 2.0 < summary["bytes_per_token"] < 4.0  # a 512-token BPE on English stories


def test_prepare_data_human_table(tiny_folder, tmp_path, capsys):
    code, out, _ = run_cli(capsys, "--source", str(tiny_folder), "--vocab-size", "300",
                           "--out", str(tmp_path))
    assert code == 0
    train_line = next(line for line in out.splitlines() if line.startswith("train"))
    valid_line = next(line for line in out.splitlines() if line.startswith("valid"))
    assert train_line.split()[1] == "120" and valid_line.split()[1] == "20"
    assert "bytes/token" in out and str(tmp_path) in out


# --------------------------------------------------------------------------------------------
# Bad input: one line, exit 2, any existing cache intact
# --------------------------------------------------------------------------------------------


@pytest.fixture
def existing_cache(tmp_path, tiny_folder):
    """A finished cache in ``tmp_path / 'cache'`` and a snapshot of its files."""
    out = tmp_path / "cache"
    prepare_data(DataConfig(source=str(tiny_folder), cache_dir=str(out)), 300, progress=False)
    return out, folder_bytes(out)


def bad_file(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / ("bad.jsonl" if kind == "jsonl" else "bad.txt")
    contents = {
        "empty": b"",
        "separators only": f"{EOT_TEXT}\n\n{EOT_TEXT}\n".encode(),
        "not utf-8": b"Once upon a time" + b"\xff\xfe broken",
        "no separators": b"One long story without any separator line.\nIt goes on.\n",
        "jsonl": b'{"text": "fine"}\n{"text": oops}\n',
    }
    path.write_bytes(contents[kind])
    return path


@pytest.mark.parametrize("kind, message", [
    ("empty", "contains no stories"),
    ("separators only", "contains no stories"),
    ("not utf-8", "is not UTF-8 text: invalid byte 0xff at offset 16"),
    ("no separators", "has 1 story, too few to hold out"),
    ("jsonl", "line 2 is not valid JSON"),
])
def test_bad_files(kind, message, tmp_path, existing_cache, capsys):
    out, snapshot = existing_cache
    path = bad_file(tmp_path, kind)
    code, _, err = run_cli(capsys, "--source", str(path), "--vocab-size", "300", "--out", str(out))
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("moelab: error: ")
    assert str(path) in err and message in err
    assert folder_bytes(out) == snapshot


@pytest.mark.parametrize("argv, message", [
    (["--source", "no/such/folder"], "no such file or folder"),
    (["--vocab-size", "256"], "vocab_size=256 is too small: allowed >= 257"),
    (["--vocab-size", "100000"], "vocab_size=100000 is too large for data source"),
    (["--valid-fraction", "1.5"], "data.valid_fraction=1.5 is invalid"),
])
def test_bad_arguments(argv, message, tiny_folder, existing_cache, capsys):
    out, snapshot = existing_cache
    argv = ["--source", str(tiny_folder), "--vocab-size", "300", *argv]  # later flags win
    code, _, err = run_cli(capsys, *argv, "--out", str(out))
    assert code == 2 and err.count("\n") == 1 and message in err
    assert folder_bytes(out) == snapshot


def flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage, culprit, message", [
    (lambda d: (d / "train.bin").write_bytes((d / "train.bin").read_bytes()[:-2]), "train.bin",
     "the manifest says"),
    (lambda d: flip_last_byte(d / "valid.bin"), "valid.bin", "sha256 does not match"),
    (lambda d: (d / "manifest.json").write_text("{ not json", encoding="utf-8"), "manifest.json",
     "not a readable JSON manifest"),
    (lambda d: (d / "tokenizer.json").unlink(), "tokenizer.json", "missing"),
    (lambda d: flip_last_byte(d / "tokenizer.json"), "tokenizer.json", "sha256 does not match"),
])
def test_corrupt_cache_is_refused_and_left_alone(damage, culprit, message, tiny_folder,
                                                 existing_cache, capsys):
    out, _ = existing_cache
    cache_dir = next(out.iterdir())
    damage(cache_dir)
    damaged = folder_bytes(out)
    code, _, err = run_cli(capsys, "--source", str(tiny_folder), "--vocab-size", "300",
                           "--out", str(out))
    assert code == 2 and err.count("\n") == 1
    assert f"corrupt data cache {cache_dir / culprit}" in err and message in err
    assert folder_bytes(out) == damaged  # nothing rewritten or deleted behind the user's back


def test_config_rejects_a_vocab_below_the_byte_alphabet():
    from moelab.errors import ConfigError

    with pytest.raises(ConfigError, match=r"data.vocab_size=256 is invalid: must be >= 257"):
        DataConfig(vocab_size=256).validate()
    DataConfig(vocab_size=257).validate()
