"""What a newcomer reads first says what is true: the README fits a screenful or two and says
how to reach the ``moelab`` command ``make demo`` installs; the glossary's sweep sizes are the
presets' own."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MOST_README_LINES = 150


def test_the_readme_stays_short():
    assert len(README.read_text("utf-8").splitlines()) <= MOST_README_LINES


def test_the_quickstart_says_how_to_run_the_command_make_demo_installs():
    quickstart = README.read_text("utf-8").split("## Quickstart")[1].split("\n## ")[0]
    makefile = (ROOT / "Makefile").read_text()
    # The Makefile installs moelab into .venv (its target is that venv's script), not onto PATH.
    assert "VENV := .venv" in makefile and "$(BIN)/moelab: pyproject.toml" in makefile
    assert "source .venv/bin/activate" in quickstart and ".venv/bin/moelab" in quickstart


def _glossary_sizes() -> dict[str, tuple[int, int, int, int]]:
    """{size name: (d_model, layers, heads, d_ff)} as docs/glossary.md lists them."""
    text = (ROOT / "docs" / "glossary.md").read_text("utf-8")
    found = re.findall(r"^  - `(s\w)`: d_model (\d+), (\d+) layers, (\d+) heads, d_ff (\d+)",
                       text, flags=re.M)
    return {name: tuple(map(int, dims)) for name, *dims in found}


def test_the_glossary_sizes_are_the_sweep_presets_sizes():
    listed = _glossary_sizes()
    assert sorted(listed) == ["s0", "s1", "s2", "s3", "sA"]
    # The one preset whose s2 differs, as the glossary says beside it.
    exceptions = {("demo", "s2"): (64, 2, 2, 256)}
    seen = set()
    for preset in sorted((ROOT / "src" / "moelab" / "presets" / "sweeps").glob("*.yaml")):
        for size in yaml.safe_load(preset.read_text())["sizes"]:
            if size["name"] not in listed:
                continue
            dims = (size["d_model"], size["n_layers"], size["n_heads"], size["d_ff"])
            assert size["n_kv_heads"] == size["n_heads"], preset.name
            assert dims == exceptions.get((preset.stem, size["name"]), listed[size["name"]]), \
                (preset.name, size)
            seen.add(size["name"])
    assert seen == set(listed)
    assert "(the `demo` sweep's `s2`: 2 layers, 2 heads)" in (ROOT / "docs/glossary.md").read_text()


def test_the_smallest_sweeps_row_says_they_identify_no_law_and_names_the_smallest_that_does():
    row = next(line for line in README.read_text("utf-8").splitlines()
               if line.startswith("| sweeps `demo`, `micro` |"))
    assert "identify a law" in row and "`moelab optimal` refuses" in row
    assert "`quick-law`" in row and "(docs/guides/first-sweep.md)" in row
    # What the row says is what the law page says of the demo sweep, and quick-law's own row.
    laws = (ROOT / "docs/explanation/laws.md").read_text("utf-8")
    assert "demo's 24 points identify no form" in " ".join(laws.split())
    quick = next(line for line in README.read_text("utf-8").splitlines()
                 if line.startswith("| sweep `quick-law` |"))
    assert "the smallest grid that fitted a law form" in quick


def _glossary_terms() -> list[str]:
    text = (ROOT / "docs" / "glossary.md").read_text("utf-8")
    return [term.lower() for term in re.findall(r"^- \*\*(.+?)\*\*", text, flags=re.M)]


def test_the_glossary_defines_the_routing_columns_the_study_report_prints():
    # The headers of the study report's routing table, read from its source file.
    source = (ROOT / "src/moelab/study/analyses/routing.py").read_text("utf-8")
    for column in ("E²·usage variance", "routing entropy / log E", "effective experts"):
        assert f'"{column}"' in source, column  # still a column the report prints
        assert any(term.startswith(column.lower()) for term in _glossary_terms()), column


def test_the_glossary_defines_the_sweep_word_identified():
    assert "identified" in _glossary_terms()
    text = " ".join((ROOT / "docs" / "glossary.md").read_text("utf-8").split())
    assert "**Identified** (a law form, in a sweep's report)" in text
    # The thresholds are the law page's own.
    laws = " ".join((ROOT / "docs/explanation/laws.md").read_text("utf-8").split())
    for threshold in ("at least 0.01 nats", "wider than 1", "finite"):
        assert threshold in laws
    assert "0.01 nats" in text and "wider than 1" in text and '"Which form a sweep' in text
