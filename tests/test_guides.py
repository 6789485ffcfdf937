"""The guides run: every command of docs/guides' ```bash blocks, as written, on documents taken
from the bundled sample (about 200 KB, as the guides'), with tiny model settings appended to the
commands that train; each command marked ``# refused`` prints the one line quoted after it, in a
```text block, and exits 2; the report has the sections the first-study guide walks through."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from moelab.cli import main
from test_own_corpus import sample_stories

pytestmark = pytest.mark.slow

GUIDES = Path(__file__).resolve().parents[1] / "docs" / "guides"
REFUSED = "# refused"
CORPUS_BYTES = 200_000
TINY = [  # appended to a study that trains: runs of seconds (tests/test_study_e2e.py's TINY)
    "model.vocab_size=320", "model.d_model=32", "model.n_layers=2", "model.n_heads=2",
    "model.n_kv_heads=2", "model.d_ff=64", "model.moe.d_expert=32", "train.batch_size=4",
    "train.max_tokens=1024", "train.eval_interval=1", "train.log_interval=1",
    "train.logging.progress=false", "train.sample_tokens=0",
]
TINY_SWEEP = [  # appended to a sweep that trains: the grid's sizes and sparsities, 10-30 steps
    "model.vocab_size=320", "model.max_seq_len=32", "data.max_train_stories=400",
    "train.batch_size=4", "train.eval_interval=5", "train.eval_windows=2",
    "train.log_interval=5", "token_budgets=[1280,2560,3840]", "seeds=[0]",
]
TINY_FIT = ["--starts", "16"]  # with the bootstrap cut to 2 resamples: a fit of seconds


def guide_text(name: str) -> str:
    return (GUIDES / name).read_text("utf-8")


def guide_commands(name: str) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", guide_text(name), flags=re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def quoted_refusals(name: str) -> list[str]:
    """The ```text blocks that quote a refusal, in the guide's order."""
    blocks = re.findall(r"```text\n(.*?)```", guide_text(name), flags=re.S)
    return [block.strip() for block in blocks if block.startswith("moelab: error: ")]


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


def tiny(args: list[str]) -> list[str]:
    """A training command's arguments with the tiny settings appended."""
    if args[0] == "study":
        return args + [arg for item in TINY for arg in ("--set", item)] + ["--seeds", "2"]
    if args[0] == "sweep-sparsity" and "--dry-run" not in args:
        return args + [arg for item in TINY_SWEEP for arg in ("--set", item)] + [
            "--bootstrap", "2", *TINY_FIT]
    if args[0] == "fit" and "--bootstrap" in args:
        at = args.index("--bootstrap")
        return args[:at + 1] + ["2"] + args[at + 2:] + TINY_FIT
    return args


def run_moelab(line: str, capsys, refusals: list[str]) -> str:
    """``moelab ARGS [> FILE] [# refused]`` in this process (the tree under test); a refusal
    must print ``refusals``' next quote. Returns what it printed."""
    refused = line.endswith(REFUSED)
    args = shlex.split(line.removesuffix(REFUSED))[1:]
    target = None
    if ">" in args:
        args, target = args[:args.index(">")], args[args.index(">") + 1]
    if not refused:
        args = tiny(args)
    capsys.readouterr()
    code = main(args)
    out, err = capsys.readouterr()
    if refused:
        last_line = re.split(r"[\r\n]", err.strip())[-1]  # after the cache's progress bars
        assert code == 2 and last_line == refusals.pop(0), err
        return out
    assert code == 0, err
    if target is not None:
        Path(target).write_text(out)
    return out


def run_guide(name: str, tmp_path: Path, capsys) -> list[str]:
    """Every command of the guide, in ``tmp_path``; each moelab command's output."""
    refusals = quoted_refusals(name)
    outputs = []
    for line in guide_commands(name):
        if line.startswith("moelab "):
            outputs.append(run_moelab(line, capsys, refusals))
        else:
            subprocess.run(["bash", "-c", line], cwd=tmp_path, check=True)
    assert refusals == [], f"quoted refusals no command printed: {refusals}"
    return outputs


def test_the_first_study_guide_runs(tmp_path, monkeypatch, capsys):
    write_documents(tmp_path / "my_texts")
    monkeypatch.chdir(tmp_path)
    commands = guide_commands("first-study.md")
    assert [c.split()[0] for c in commands] == ["for", "moelab", "moelab", "moelab", "moelab"]
    run_guide("first-study.md", tmp_path, capsys)
    assert CORPUS_BYTES <= (tmp_path / "my_corpus.txt").stat().st_size < CORPUS_BYTES + 5_000
    report = (tmp_path / "my-study" / "report.md").read_text()
    walked_through = re.findall(r"`(## [^`]+)`", guide_text("first-study.md"))
    assert len(walked_through) >= 9
    headings = set(report.splitlines())
    for heading in walked_through:
        assert heading in headings, heading


def test_the_corpus_guide_refuses_and_passes_as_it_says(tmp_path, monkeypatch, capsys):
    write_documents(tmp_path / "my_texts")
    monkeypatch.chdir(tmp_path)
    commands = guide_commands("corpus.md")
    # two refusals (no separators; too little validation text), then the fix that trains
    assert sum(c.endswith(REFUSED) for c in commands) == len(quoted_refusals("corpus.md")) == 2
    outputs = run_guide("corpus.md", tmp_path, capsys)
    # prepare-data's table: the training and validation splits, the counts the refusal names
    # (3,201 validation tokens is a count of the 200 KB file, not a number of this test's)
    table = outputs[0]
    valid_tokens = int(re.search(r"^valid\s+\S+\s+\S+\s+([\d,]+)", table, re.M)[1].replace(",", ""))
    assert f"has {valid_tokens:,} tokens" in quoted_refusals("corpus.md")[1]
    assert valid_tokens // 129 == 24  # the "most that fit", by hand: 129-token windows
    assert (tmp_path / "my-study" / "report.md").is_file()
    assert not (tmp_path / "my_notes.txt").read_text().count("<|endoftext|>")


REPO = Path(__file__).resolve().parents[1]


def test_the_first_sweep_guide_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    commands = guide_commands("first-sweep.md")
    assert [c.split()[1] for c in commands] == [
        "sweep-sparsity", "sweep-sparsity", "fit", "optimal", "optimal", "isoflop"]
    outputs = run_guide("first-sweep.md", tmp_path, capsys)
    assert "72 runs" in outputs[0].splitlines()  # the guide's count, by hand: 3 x 4 x 3 x 2
    (estimate,) = [block for block in re.findall(r"```text\n(.*?)```", guide_text("first-sweep.md"),
                                                 flags=re.S) if block.startswith("estimated time")]
    assert estimate.strip() in outputs[0]  # the dry run's own estimate, quoted as it prints it
    results = (tmp_path / "my-sweep" / "results.csv").read_text().splitlines()
    assert len(results) == 1 + 36  # one seed of them, at the tiny settings
    report = (tmp_path / "my-sweep" / "report.md").read_text()
    headings = set(report.splitlines())
    walked_through = re.findall(r"`(## [^`]+)`", guide_text("first-sweep.md"))
    # the law's own sections are there only when a form passed, which the tiny runs need not
    always = [h for h in walked_through if h not in ("## Law fit", "## Held-out check",
                                                      "## Optimal sparsity")]
    assert len(always) >= 3
    for heading in always:
        assert heading in headings, heading


def test_the_first_sweep_guide_quotes_the_price_moelab_prints(monkeypatch, capsys):
    (price,) = [block for block in re.findall(r"```text\n(.*?)```", guide_text("first-sweep.md"),
                                              flags=re.S) if block.startswith("time at")]
    speeds = "experiments/results/sweeps/cpu-eager/results.csv"
    assert f"moelab sweep-sparsity quick-law --dry-run --speeds {speeds}\n" in guide_text(
        "first-sweep.md")
    monkeypatch.chdir(REPO)
    assert main(["sweep-sparsity", "quick-law", "--dry-run", "--speeds", speeds]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == price.strip()


def test_the_first_sweep_guide_quotes_the_form_checks_of_the_committed_runs():
    """Its table of the forms the report's checks chose on the cpu sweep's runs of the
    quick-law grid is the record's, row for row (the record: experiments/smallest_law_grid.py)."""
    import json

    text = guide_text("first-sweep.md")
    quoted = re.findall(r"^\| (seeds? [\d, and]+) \((\d+) runs\) \| (none passes|`[\w-]+`) \| "
                        r"(–|\d\.\d{4}) \|$", text, flags=re.M)
    record = json.loads((REPO / "experiments" / "results" /
                         "smallest_law_grid-quick-law.json").read_text())
    assert (record["bootstrap"], record["starts"]) == (200, 0)  # 0: the report's start grids
    assert "200 resamples and the report's start grids" in " ".join(text.split())
    expected = []
    for grid in record["sub_grids"]:
        seeds = ("seed " + grid["seeds"][0] if len(grid["seeds"]) == 1
                 else "seeds " + " and ".join(grid["seeds"]))
        if grid["chosen"] is None:
            expected.append((seeds, str(grid["runs"]), "none passes", "–"))
            continue
        (chosen,) = [form for form in grid["forms"] if form["law"] == grid["chosen"]]
        expected.append((seeds, str(grid["runs"]), f"`{grid['chosen']}`",
                         f"{chosen['holdout_mae']:.4f}"))
    assert sorted(quoted) == sorted(expected) and len(quoted) == len(record["sub_grids"]) >= 2
