"""Behaviour pinned across refactors: run folders trained and reported by an earlier moelab
(tests/fixtures/house, see its README) are reported byte for byte the same today, and the same
config and seed train to the same losses and the same tensors.

The reference files were written by the code before a redesign, so these tests compare today's
code with yesterday's, never with itself.
"""

from __future__ import annotations

import hashlib
import json
import platform
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from moelab.cli import main
from moelab.numerics import NUMERICS_VARIABLES

pytestmark = pytest.mark.slow

HOUSE = Path(__file__).parent / "fixtures" / "house"
FOLDERS = ("study", "sweep-flops", "sweep-tokens")
REPORT_FILES = ("report.md", "results.json", "results.csv", "analysis.json", "forms.json",
                "isoflop.json", "throughput.json", "form_table.json")
"""What ``moelab report`` writes (each folder has the ones of its kind), and its figures/."""

# Spelled out, not tests/tiny_overrides.py: the recording pins this exact config, which must not
# follow later edits of the shared tiny run.
TRAIN_RUN = [
    "model.vocab_size=512", "model.d_model=32", "model.n_layers=2", "model.n_heads=2",
    "model.n_kv_heads=2", "model.d_ff=64", "model.max_seq_len=32", "data.source=sample",
    "data.max_train_stories=300", "train.batch_size=8", "train.lr=0.01", "train.eval_windows=8",
    "train.log_interval=1", "train.progress=false", "train.max_tokens=5120",
    "train.eval_interval=5",
]
ARMS = {"moe": "model.moe={num_experts: 4, top_k: 2, d_expert: 32}", "dense": "model.moe=null"}


def cpu_model() -> str:
    """The CPU's vendor, family, model and widest vector unit: float rounding (and so a run's
    last bits) depends on the kernels these select."""
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if ":" in line)
    except OSError:
        return platform.processor() or platform.machine()
    info = {key.strip(): value.strip() for key, value in info.items()}
    flags = info.get("flags", "").split()
    vector = next((flag for flag in ("avx512f", "avx2", "avx") if flag in flags), "none")
    return " / ".join([info.get("model name", "?"), f"family {info.get('cpu family', '?')}",
                       f"model {info.get('model', '?')}", vector])


def report_inputs(folder: Path, into: Path) -> Path:
    """A copy of a fixture folder without what ``moelab report`` writes."""
    copy = into / folder.name
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns(*REPORT_FILES, "figures"))
    return copy


def written_files(folder: Path) -> dict[str, bytes]:
    names = [name for name in REPORT_FILES if (folder / name).is_file()]
    names += [f"figures/{path.name}" for path in sorted((folder / "figures").glob("*.png"))]
    return {name: (folder / name).read_bytes() for name in names}


LAW_FORMS = ("sparsity", "sparsity-interaction", "sparsity-additive", "sparsity-effective-size",
             "chinchilla", "clark", "granularity", "joint")
LAW_FIT_FILES = ("forms.json", "form_table.json")
"""Fits of law forms that these tiny sweeps cannot identify: their optimiser wanders along flat
valleys, so the last bit of a BLAS sum (numpy's build, the CPU's kernels) moves the parameters
it stops at by orders of magnitude. Their structure is compared, not their numbers."""


def is_law_form_row(line: str) -> bool:
    """A report table row of one fitted form (its objective, intervals and problems) or of a
    nested test between two (its F, from the two objectives)."""
    return any(line.startswith(f"| `{form}` ") for form in LAW_FORMS)


def same_numbers(recorded, rebuilt, where: str, rel: float = 1e-9) -> None:
    """JSON values equal, floats to ``rel``: sums rounded in another order move the last bits."""
    if isinstance(recorded, dict):
        assert sorted(rebuilt) == sorted(recorded), where
        for key in recorded:
            same_numbers(recorded[key], rebuilt[key], f"{where}.{key}", rel)
    elif isinstance(recorded, list):
        assert len(rebuilt) == len(recorded), where
        for index, (a, b) in enumerate(zip(recorded, rebuilt)):
            same_numbers(a, b, f"{where}[{index}]", rel)
    elif isinstance(recorded, float) and isinstance(rebuilt, (int, float)):
        assert rebuilt == pytest.approx(recorded, rel=rel, abs=1e-300, nan_ok=True), where
    else:
        assert rebuilt == recorded, where


def same_structure(recorded, rebuilt, where: str) -> None:
    """The same keys and list lengths, and the same strings and booleans at the top of each
    form (its name and whether it was identified); numbers and problem lists may differ."""
    if isinstance(recorded, dict):
        assert sorted(rebuilt) == sorted(recorded), where
        for key in recorded:
            if key not in ("problems", "params", "replicates"):
                same_structure(recorded[key], rebuilt[key], f"{where}.{key}")
    elif isinstance(recorded, list):
        assert len(rebuilt) == len(recorded), where
        for index, (a, b) in enumerate(zip(recorded, rebuilt)):
            same_structure(a, b, f"{where}[{index}]")
    elif isinstance(recorded, (bool, str)) or recorded is None:
        assert rebuilt == recorded, where


@pytest.mark.parametrize("name", FOLDERS)
def test_report_is_the_recorded_one(name, tmp_path, capsys):
    """Every file byte for byte where the numbers are well conditioned; to 1e-9 in JSON and the
    law forms' table rows left out where an unidentifiable fit makes the last bits matter."""
    recorded = written_files(HOUSE / name)
    assert "report.md" in recorded and len(recorded) >= 4  # the fixture holds a whole report
    folder = report_inputs(HOUSE / name, tmp_path)
    assert main(["report", str(folder)]) == 0
    rebuilt = written_files(folder)
    assert sorted(rebuilt) == sorted(recorded)
    for file_name, content in recorded.items():
        where = f"{name}/{file_name}"
        if file_name.endswith(".png"):  # rendering may move with matplotlib's version: same size
            assert abs(len(rebuilt[file_name]) - len(content)) < 0.2 * len(content), file_name
        elif file_name in LAW_FIT_FILES:
            same_structure(json.loads(content), json.loads(rebuilt[file_name]), where)
        elif file_name.endswith(".json"):
            same_numbers(json.loads(content), json.loads(rebuilt[file_name]), where)
        elif file_name == "report.md":
            lines = [line for line in content.decode().splitlines() if not is_law_form_row(line)]
            rebuilt_lines = [line for line in rebuilt[file_name].decode().splitlines()
                             if not is_law_form_row(line)]
            assert rebuilt_lines == lines, f"{where} differs"
        else:
            assert rebuilt[file_name] == content, f"{where} differs"


def train_record(run_dir: Path) -> dict:
    """A run's logged losses and the SHA-256 of every tensor of its final checkpoint."""
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    checkpoint = json.loads((run_dir / "checkpoints" / "latest.json").read_text())
    folder = run_dir / "checkpoints" / checkpoint["folder"]
    tensors = {}
    for file_name in ("model.safetensors", "trainer_state.safetensors"):
        with safe_open(folder / file_name, framework="pt") as handle:
            for key in sorted(handle.keys()):
                tensor = handle.get_tensor(key).contiguous()
                digest = hashlib.sha256(tensor.view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
                tensors[f"{file_name}:{key}"] = digest
    return {"train_loss": [e["loss"] for e in events if e["kind"] == "train"],
            "val_loss": [e["val_loss"] for e in events if e["kind"] == "eval"],
            "tensors": tensors}


def train_arm(arm: str, out: Path) -> Path:
    """Train one arm as the recording did: with the machine's own kernels (it predates
    train.numerics), so in a fresh process without the variables this session pins (conftest)."""
    argv = ["train", "demo", "--out", str(out), "--set", ARMS[arm], "--set",
            "train.numerics=native"]
    for item in TRAIN_RUN:
        argv += ["--set", item]
    env = {key: value for key, value in os.environ.items() if key not in NUMERICS_VARIABLES}
    subprocess.run([sys.executable, "-m", "moelab", *argv], env=env, check=True,
                   capture_output=True)
    return out


@pytest.mark.parametrize("arm", sorted(ARMS))
def test_training_matches_the_recorded_losses_and_tensors(arm, tmp_path):
    recorded = json.loads((HOUSE / "training.json").read_text())
    expected = recorded["runs"][arm]
    got = train_record(train_arm(arm, tmp_path / arm))
    assert len(got["train_loss"]) == len(expected["train_loss"]) == 20
    if cpu_model() == recorded["cpu"]:  # the recording's CPU: bit for bit
        assert got["train_loss"] == expected["train_loss"]
        assert got["val_loss"] == expected["val_loss"]
        assert got["tensors"] == expected["tensors"]
    else:  # another CPU's kernels round differently: the same curve, not the same bits
        assert got["train_loss"] == pytest.approx(expected["train_loss"], abs=2e-3)
        assert got["val_loss"] == pytest.approx(expected["val_loss"], abs=2e-3)
        assert sorted(got["tensors"]) == sorted(expected["tensors"])


def record_training(out: Path) -> None:
    """Write training.json (run once, by the code whose behaviour is to be kept)."""
    runs = {arm: train_record(train_arm(arm, out / arm)) for arm in sorted(ARMS)}
    (HOUSE / "training.json").write_text(json.dumps({"cpu": cpu_model(), "runs": runs},
                                                    indent=1) + "\n")


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        record_training(Path(tmp))
