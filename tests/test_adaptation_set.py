"""The adaptation set (``data.source: adaptation``): its builder reproduces the shipped files
byte for byte and fails on an altered copy; every document is a validation story found verbatim
in the bundled validation sample, behind headers made from it; the source splits it as shipped.

References: the validation sample read here with lzma, the headers checked against the story by
plain string tests, the split by story index.
"""

from __future__ import annotations

import lzma
import shutil

from moelab.config import DataConfig
from moelab.data import adaptation
from moelab.data.sources import resolve_source
from moelab.data.story_text import EOT_TEXT, split_stories
from moelab.data.text_sources import ADAPTATION_FILES, sample_path


def test_check_passes_on_the_shipped_files():
    assert adaptation.main(["--check"]) == 0


def test_check_fails_on_an_altered_copy(tmp_path, capsys):
    for name in ADAPTATION_FILES.values():
        shutil.copy(adaptation.shipped_folder() / name, tmp_path / name)
    assert adaptation.main(["--check", "--out", str(tmp_path)]) == 0
    valid = tmp_path / ADAPTATION_FILES["valid"]
    text = lzma.decompress(valid.read_bytes()).decode("utf-8")
    valid.write_bytes(lzma.compress(text.replace("Words: ", "Words:  ", 1).encode("utf-8")))
    capsys.readouterr()
    assert adaptation.main(["--check", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ADAPTATION_FILES["valid"] in err[0]
    (tmp_path / ADAPTATION_FILES["train"]).unlink()  # a missing file differs too
    assert adaptation.main(["--check", "--out", str(tmp_path)]) == 1


def test_documents_are_the_validation_stories_behind_their_headers():
    stories = split_stories(lzma.decompress(sample_path("valid").read_bytes()).decode("utf-8"))
    texts = adaptation.build_texts()
    documents = {split: split_stories(text) for split, text in texts.items()}
    assert len(documents["valid"]) == len(stories) // 5 and len(documents["train"]) == (
        len(stories) - len(stories) // 5)
    held_out = [s for i, s in enumerate(stories) if i % 5 == 4]
    trained = [s for i, s in enumerate(stories) if i % 5 != 4]
    for split, originals in (("valid", held_out), ("train", trained)):
        for document, story in zip(documents[split], originals):
            header, _, body = document.partition("\nStory: ")
            assert body == story
            lines = header.splitlines()
            assert lines[0].startswith("Words: ")
            words = lines[0][len("Words: "):].split(", ")
            assert len(words) == 3 and len(set(words)) == 3
            assert all(len(w) >= 4 and f"{w}" in story for w in words)
            for line in lines[1:]:
                key, _, value = line.partition(": ")
                assert key in ("Summary", "Random sentence"), line
                assert all(part in story for part in value.split(". ") if part)
    # Both optional headers occur, each in a fair share of documents, and no story twice.
    headers = [d.split("\nStory: ")[0] for d in documents["train"]]
    for key in ("Summary: ", "Random sentence: "):
        assert 0.3 < sum(key in h for h in headers) / len(headers) < 0.7
    assert not set(held_out) & set(trained)


def test_the_source_reads_the_shipped_splits():
    train, valid = resolve_source(DataConfig(source="adaptation")).load()
    for split, stories in (("train", train), ("valid", valid)):
        shipped = lzma.decompress(
            (adaptation.shipped_folder() / ADAPTATION_FILES[split]).read_bytes()).decode("utf-8")
        read = [story for batch in stories.read_batches() for story in batch]
        assert "".join(f"{s}\n{EOT_TEXT}\n" for s in read) == shipped
    assert resolve_source(DataConfig(source="adaptation")).fingerprint != resolve_source(
        DataConfig(source="sample")).fingerprint
