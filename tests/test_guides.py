"""The guides run: every command of docs/guides/first-study.md's ```bash blocks, as written,
on documents taken from the bundled sample (about 200 KB, as the guide's), with tiny model
settings appended to the study that trains; the refusal it quotes is the one moelab prints, and
the report has the sections it walks through."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from moelab.cli import main
from test_own_corpus import sample_stories

pytestmark = pytest.mark.slow

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "first-study.md"
REFUSED = "# refused"
CORPUS_BYTES = 200_000
TINY = [  # appended to a study that trains: runs of seconds (tests/test_study_e2e.py's TINY)
    "model.vocab_size=320", "model.d_model=32", "model.n_layers=2", "model.n_heads=2",
    "model.n_kv_heads=2", "model.d_ff=64", "model.moe.d_expert=32", "train.batch_size=4",
    "train.max_tokens=1024", "train.eval_interval=1", "train.log_interval=1",
    "train.logging.progress=false", "train.sample_tokens=0",
]


def guide_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", GUIDE.read_text("utf-8"), flags=re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def quoted_refusal() -> str:
    (text,) = re.findall(r"```text\n(.*?)```", GUIDE.read_text("utf-8"), flags=re.S)
    return text.strip()


def write_documents(folder: Path) -> None:
    """One file per story, the first ~200 KB of the sample's (with the separators the guide's
    loop adds)."""
    folder.mkdir()
    size = 0
    for index, story in enumerate(sample_stories()):
        (folder / f"story{index:04d}.txt").write_text(story)
        size += len(story.encode()) + len("\n<|endoftext|>\n")
        if size >= CORPUS_BYTES:
            return


def run_moelab(line: str, capsys) -> None:
    """``moelab ARGS [> FILE] [# refused]`` in this process (the tree under test)."""
    refused = line.endswith(REFUSED)
    args = shlex.split(line.removesuffix(REFUSED))[1:]
    target = None
    if ">" in args:
        args, target = args[:args.index(">")], args[args.index(">") + 1]
    if args[0] == "study" and not refused:
        args += [arg for item in TINY for arg in ("--set", item)] + ["--seeds", "2"]
    capsys.readouterr()
    code = main(args)
    out, err = capsys.readouterr()
    if refused:
        last_line = re.split(r"[\r\n]", err.strip())[-1]  # after the cache's progress bars
        assert code == 2 and last_line == quoted_refusal(), err
        return
    assert code == 0, err
    if target is not None:
        Path(target).write_text(out)


def test_the_first_study_guide_runs(tmp_path, monkeypatch, capsys):
    write_documents(tmp_path / "my_texts")
    monkeypatch.chdir(tmp_path)
    commands = guide_commands()
    assert [c.split()[0] for c in commands] == ["for", "moelab", "moelab", "moelab", "moelab"]
    for line in commands:
        if line.startswith("moelab "):
            run_moelab(line, capsys)
        else:
            subprocess.run(["bash", "-c", line], cwd=tmp_path, check=True)
    assert CORPUS_BYTES <= (tmp_path / "my_corpus.txt").stat().st_size < CORPUS_BYTES + 5_000
    report = (tmp_path / "my-study" / "report.md").read_text()
    walked_through = re.findall(r"`(## [^`]+)`", GUIDE.read_text("utf-8"))
    assert len(walked_through) >= 9
    headings = set(report.splitlines())
    for heading in walked_through:
        assert heading in headings, heading
