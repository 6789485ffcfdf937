"""results.csv parsed once into typed rows: values checked against the cells by hand, older
files (no seed, k or throughput columns) read with those fields empty, and a bad cell or a
missing column refused in one line naming the file."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from moelab.errors import MoelabError
from moelab.sweep.folder import read_results

ROOT = Path(__file__).resolve().parents[1]
STORED = sorted((ROOT / "experiments" / "results" / "sweeps").glob("*/results.csv"))

OLDER_FILE = """run,size,budget,C_budget,N_total,N_active,D,C,S,E,best_val_loss,final_val_loss
runs/D100/s0/S0.500-E2k1/seed3,s0,D100,,98592,86304,100,6000.5,0.5,2,3.25,3.5
"""
CURRENT_FILE = (
    "run,size,budget,seed,C_budget,N_total,N_active,N_non_embedding,D,C,S,E,k,d_expert,"
    "best_val_loss,final_val_loss,collapse,tokens_per_s,step_time_s,tokens_per_step,"
    "peak_memory_bytes,device,zero_shot_last_word,finetune_source_val_loss,finetune_val_loss,"
    "finetune_gain\n"
    "runs/C1e+12/s1/S0.750-E8k2/seed7,s1,C1e+12,7,1e+12,200,80,50,1000,1e12,0.75,8,2,16,"
    "3.0,3.1,False,1500.5,0.5,1024,4096,cpu,0.25,3.3,2.9,0.4\n"
    "runs/C1e+12/s1/S0.000-E1k1/seed7,s1,C1e+12,7,1e+12,100,100,40,1000,1e12,0.0,1,1,,"
    "3.2,3.2,False,,,,,,,,,\n")


def write(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.csv").write_text(text)
    return folder


def test_an_older_file_reads_with_its_missing_columns_empty_and_the_seed_from_the_run(tmp_path):
    [row] = read_results(write(tmp_path, OLDER_FILE)).rows
    assert (row.run, row.size, row.budget, row.seed) == (
        "runs/D100/s0/S0.500-E2k1/seed3", "s0", "D100", "3")
    assert (row.N_total, row.N_active, row.D, row.C, row.S, row.E) == (
        98592.0, 86304.0, 100.0, 6000.5, 0.5, 2)
    assert (row.best_val_loss, row.final_val_loss) == (3.25, 3.5)
    assert row.C_budget is None and row.k is None and row.N_non_embedding is None
    assert row.tokens_per_s is None and row.device == "" and row.zero_shot == {}
    assert row.finetune_val_loss is None


def test_a_current_file_reads_every_column_as_its_type(tmp_path):
    results = read_results(write(tmp_path, CURRENT_FILE))
    sparse, dense = results.rows
    assert sparse.seed == "7" and sparse.C_budget == 1e12 and sparse.k == 2 and sparse.E == 8
    assert (sparse.tokens_per_s, sparse.step_time_s, sparse.tokens_per_step,
            sparse.peak_memory_bytes, sparse.device) == (1500.5, 0.5, 1024.0, 4096.0, "cpu")
    assert sparse.zero_shot == {"last_word": 0.25}
    assert (sparse.finetune_source_val_loss, sparse.finetune_val_loss,
            sparse.finetune_gain) == (3.3, 2.9, 0.4)
    assert dense.tokens_per_s is None and dense.zero_shot == {} and dense.finetune_gain is None
    assert results.has_column("zero_shot_last_word") and not results.has_column("zero_shot_ending")
    assert results.cells[0]["best_val_loss"] == "3.0"  # the text the law fit's column map reads


@pytest.mark.parametrize("path", STORED, ids=[p.parent.name for p in STORED])
def test_every_stored_results_csv_reads_the_numbers_its_cells_hold(path):
    rows = read_results(path.parent).rows
    with open(path, newline="") as f:
        cells = list(csv.DictReader(f))
    assert len(rows) == len(cells)
    for row, cell in zip(rows, cells):
        assert row.run == cell["run"] and row.S == float(cell["S"]) and row.E == int(cell["E"])
        assert row.best_val_loss == float(cell["best_val_loss"]) and row.D == float(cell["D"])
        assert row.seed == (cell.get("seed") or cell["run"].split("seed")[-1])
        assert row.C_budget == (float(cell["C_budget"]) if cell["C_budget"] else None)


@pytest.mark.parametrize("text, message", [
    (OLDER_FILE.replace("3.25", "low"), "line 2: best_val_loss='low' is not a number"),
    (OLDER_FILE.replace(",2,3.25", ",2.5,3.25"), "line 2: E='2.5' is invalid: expected a whole"),
    (OLDER_FILE.replace(",E,", ",experts,"), "column 'E' is missing"),
])
def test_a_bad_cell_or_a_missing_column_is_one_line_naming_the_file(tmp_path, text, message):
    with pytest.raises(MoelabError, match=message) as error:
        read_results(write(tmp_path, text))
    assert "\n" not in str(error.value) and str(tmp_path / "results.csv") in str(error.value)


def test_a_header_alone_is_no_results_yet(tmp_path):
    assert read_results(write(tmp_path, OLDER_FILE.splitlines()[0] + "\n")) is None
    assert read_results(tmp_path / "elsewhere") is None


def test_the_writer_and_the_reader_share_one_schema(tmp_path):
    """The header written is ResultRow's fields in order (the zero-shot and finetune groups as
    their columns), a row read back holds what was written, and a key that is no column of
    ResultRow is refused: a new column is a new field, in one place."""
    from moelab.sweep.tabulate import write_results_csv

    header = CURRENT_FILE.splitlines()[0].split(",")
    cells = dict(zip(header, CURRENT_FILE.splitlines()[1].split(",")))
    cells.update(flops_per_token_6n="480", flops_per_token_kaplan="512")
    path = write_results_csv(tmp_path / "results.csv", [cells])
    written = path.read_text().splitlines()[0].split(",")
    # By hand: the run's columns in the file's order, then the task, then the finetune group.
    assert written == (header[:14] + ["flops_per_token_6n", "flops_per_token_kaplan"]
                       + header[14:])
    row = read_results(tmp_path).rows[0]
    assert (row.d_expert, row.flops_per_token_6n, row.collapse) == (16, 480.0, False)
    assert (row.zero_shot, row.finetune_gain) == ({"last_word": 0.25}, 0.4)
    with pytest.raises(ValueError, match="new_column"):
        write_results_csv(tmp_path / "other.csv", [{**cells, "new_column": "1"}])
