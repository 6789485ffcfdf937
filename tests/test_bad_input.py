"""Bad input to every command: exit code 2, no traceback, one line on stderr naming the value.

The table walks every sub-command of ``moelab --help`` and its inputs: config files and
overrides, numbers out of range (nan, inf, 1e400, negative, huge), files that are not UTF-8,
not JSON/YAML, the wrong shape or empty, and run, study and fit files edited by hand. Each
case names the text its message must contain (the value, or the file). Nothing trains more
than the two steps of the shared tiny run and study; cases that would train are refused
before the first step, and are checked to leave no folder behind.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest
import yaml

from moelab.cli import main
from moelab.errors import bad_input_message
from tiny_overrides import TINY_MOE_RUN

TWO_STEPS = TINY_MOE_RUN + ["train.max_tokens=512", "train.sample_tokens=0"]
GOOD_FIT_ROWS = [(1e6, 1e8, 3.1), (2e6, 3e8, 2.9), (4e6, 1e9, 2.6), (8e6, 2e8, 2.8),
                 (1e7, 5e8, 2.6), (2e7, 2e9, 2.4), (4e7, 4e9, 2.3)]
GOOD_FIT = {"law": "chinchilla",
            "params": {"E": 1.7, "A": 400.0, "B": 410.0, "alpha": 0.34, "beta": 0.28}}


def _csv(header: str, rows) -> str:
    return header + "\n" + "".join(",".join(f"{v:g}" for v in row) + "\n" for row in rows)


def _write_inputs(folder: Path) -> None:
    """The bad (and a few good) input files the cases name as {in}/NAME."""
    files = {
        "latin1.yaml": b"model:\n  d_model: \xff\n",
        "list.yaml": b"- 1\n- 2\n",
        "bad.yaml": b"model: [\n",
        "dup.yaml": b"model:\n  d_model: 64\n  d_model: 128\n",
        "deep.yaml": b"[" * 30_000 + b"]" * 30_000 + b"\n",
        "latin1.txt": b"Once upon a time \xff\xfe there was a dog.\n<|endoftext|>\n",
        "tiny.txt": "".join(f"Story {i} about a cat.\n<|endoftext|>\n" for i in range(40)).encode(),
        "latin1.csv": b"\xff\xfe,\n1,2\n",
        "empty.csv": b"",
        "header.csv": b"N,D,loss\n",
        "nonnum.csv": b"N,D,loss\nabc,1e9,3.0\n",
        "identical.csv": _csv("N,D,loss", [(1e6, 1e9, 3.0)] * 15).encode(),
        "one_n.csv": _csv("N,D,loss", [(1e6, 1e8 * (i + 1), 3 - 0.1 * i) for i in range(8)]
                          ).encode(),
        "few_points.csv": _csv("N,D,loss", GOOD_FIT_ROWS[:5] * 3).encode(),
        "good.csv": _csv("N,D,loss", GOOD_FIT_ROWS).encode(),
        "iso_few.csv": b"N,C,loss\n1e6,1e18,3.0\n2e6,1e18,2.9\n",
        "iso_flat.csv": b"N,C,loss\n1e6,1e18,3.0\n2e6,1e18,3.0\n4e6,1e18,3.0\n",
        "good_fit.json": json.dumps(GOOD_FIT).encode(),
        "fit_nonnum.json": json.dumps({**GOOD_FIT, "params": {**GOOD_FIT["params"],
                                                              "alpha": "abc"}}).encode(),
        "fit_nan.json": json.dumps({**GOOD_FIT, "params": {**GOOD_FIT["params"],
                                                           "alpha": float("nan")}}).encode(),
        "fit_bool.json": json.dumps({**GOOD_FIT, "params": {**GOOD_FIT["params"],
                                                            "beta": True}}).encode(),
        "fit_flat.json": json.dumps({**GOOD_FIT, "params": {**GOOD_FIT["params"],
                                                            "alpha": 0.0}}).encode(),
        "fit_rising.json": json.dumps({**GOOD_FIT, "params": {**GOOD_FIT["params"],
                                                              "beta": -0.3}}).encode(),
        "fit_boot_list.json": json.dumps({**GOOD_FIT, "bootstrap": [1]}).encode(),
        "fit_boot_bad.json": json.dumps({**GOOD_FIT, "bootstrap": {"params": [{"E": "x"}]}}).encode(),
        "fit_shared.json": json.dumps({**GOOD_FIT, "shared_fraction": 7}).encode(),
        "fit_law.json": json.dumps({**GOOD_FIT, "law": "nope"}).encode(),
        "fit_no_params.json": json.dumps({"law": "chinchilla"}).encode(),
        "list.json": b"[1, 2]",
        "latin1.json": b"\xff",
        "empty.json": b"",
        "empty.txt": b"",
        "list.jsonl": b"[1]\n",
        "file": b"a file, not a folder\n",
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (folder / "emptydir").mkdir()
    (folder / "train_a_folder" / "train.txt").mkdir(parents=True)
    grid = {"name": "g", "base": "demo", "sizes": [{"name": "a", "d_ff": 64}],
            "sparsities": [0], "token_budgets": [256]}
    (folder / "grid_twice.yaml").write_text(yaml.safe_dump(grid) + "sparsities: [0.5]\n")
    for name, change in {"grid_climbs.yaml": {"sizes": [{"name": "../../x", "d_ff": 64}]},
                         "grid_size_list.yaml": {"sizes": [3]},
                         "grid_name.yaml": {"name": "../../x"}}.items():
        (folder / name).write_text(yaml.safe_dump({**grid, **change}))


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """{in}: the input files; {run}: a finished 2-step run; {study}: a 1-seed study of them."""
    root = tmp_path_factory.mktemp("bad-input")
    (root / "in").mkdir()
    _write_inputs(root / "in")
    sets = [arg for item in TWO_STEPS for arg in ("--set", item)]
    with pytest.MonkeyPatch.context() as patch:  # the session's cache, as conftest sets it
        patch.setenv("MOELAB_CACHE", str(tmp_path_factory.getbasetemp() / "moelab-cache"))
        assert main(["train", "demo", "--out", str(root / "run"), *sets]) == 0
        assert main(["study", "demo", "--out", str(root / "study"), "--seeds", "1",
                     *sets]) == 0
    return root


# --------------------------------------------------------------------------------------------
# Damage done to a copy of the run or study before a case runs
# --------------------------------------------------------------------------------------------


def _edit_yaml(path: Path, edit: Callable[[dict], None]) -> None:
    raw = yaml.safe_load(path.read_text())
    edit(raw)
    path.write_text(yaml.safe_dump(raw))


def _edit_json(path: Path, edit: Callable[[dict], object]) -> None:
    record = json.loads(path.read_text())
    path.write_text(json.dumps(edit(record)))


def _run_config(edit):
    return lambda tmp: _edit_yaml(tmp / "run" / "config.yaml", edit)


def _write(relative: str, data: bytes):
    return lambda tmp: (tmp / relative).write_bytes(data)


def _truncate(relative: str):
    def damage(tmp):
        path = tmp / relative
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return damage


def _killed_after_checkpoint_with(edit):
    """The run as if killed after its last checkpoint, its trainer_state.json edited."""
    def damage(tmp):
        (tmp / "run" / "summary.json").unlink()
        _edit_json(tmp / "run" / "checkpoints" / "step_00000002" / "trainer_state.json", edit)
    return damage


STUDY_SEED0 = "study/runs/moe/seed0"


def _study_summary(edit):
    return lambda tmp: _edit_json(tmp / STUDY_SEED0 / "summary.json", lambda s: {**s, **edit})


def _study_summary_without(key: str):
    return lambda tmp: _edit_json(tmp / STUDY_SEED0 / "summary.json",
                                  lambda s: {k: v for k, v in s.items() if k != key})


def _study_metrics(make: Callable[[bytes], bytes]):
    def damage(tmp):
        path = tmp / STUDY_SEED0 / "metrics.jsonl"
        path.write_bytes(make(path.read_bytes()))
    return damage


def _not_a_run_folder(tmp):
    (tmp / "mine").mkdir()
    (tmp / "mine" / "notes.txt").write_text("keep me")


# --------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------


@dataclass
class Case:
    args: str
    """The command line (shlex-split after formatting {in}, {tmp}, {run}, {study})."""
    expected: str
    """Text the one line must contain: the bad value or the file."""
    damage: Optional[Callable[[Path], None]] = None
    """Applied to the per-case copies of the run and study first."""


RUN_SETS = " ".join(f"--set '{item}'" for item in TWO_STEPS).replace("{", "{{").replace("}", "}}")

CASES = {
    # -- the command line itself
    "unknown command": Case("nope", "invalid choice: 'nope'"),
    # -- params: config files and overrides
    "config not utf-8": Case("params {in}/latin1.yaml", "latin1.yaml' is not UTF-8 text"),
    "config a list": Case("params {in}/list.yaml", "expected a mapping at the top level"),
    "config bad yaml": Case("params {in}/bad.yaml", "bad.yaml' is not valid YAML at line 2"),
    "config duplicate key": Case("params {in}/dup.yaml", "key 'd_model' is given twice"),
    "config nests too deep": Case("params {in}/deep.yaml", "deep.yaml' is not valid YAML at line 1: it nests too deeply"),
    "config a folder": Case("params {in}/emptydir", "emptydir' is neither a file nor a preset"),
    "config missing": Case("params nope", "'nope' is neither a file nor a preset"),
    "override 1e400": Case("params demo --set model.d_model=1e400", "model.d_model=inf"),
    "override nan": Case("params demo --set model.d_model=nan", "model.d_model=nan"),
    "override .inf": Case("params demo --set train.lr=.inf", "train.lr=inf"),
    "override a list": Case("params demo --set 'model.d_model=[1, 2]'", "model.d_model=[1, 2]"),
    "override not a number": Case("params demo --set train.lr=abc", "train.lr='abc'"),
    "override no value": Case("params demo --set model.d_model", "override 'model.d_model'"),
    "override no key": Case("params demo --set =3", "override '=3'"),
    "override unknown key": Case("params demo --set model.width=3", "model.width is not a known"),
    "override section a number": Case("params demo --set model=3", "model=3"),
    "override deep": Case("params demo --set 'model.moe=" + "[" * 60 + "]" * 60 + "'",
                          "model.moe=[[["),
    "heads do not divide": Case("params demo --set model.n_heads=3", "divisible by n_heads (3)"),
    "top_k above experts": Case("params demo --set model.moe.top_k=9", "model.moe.top_k=9"),
    "vocab above the cap": Case("params demo --set data.vocab_size=2000000",
                                "data.vocab_size=2000000"),
    "blank cache dir": Case("params demo --set \"data.cache_dir=' '\"", "data.cache_dir=' '"),
    "beta1 of 1": Case("params demo --set train.beta1=1", "train.beta1=1"),
    "float16": Case("params demo --set train.dtype=float16", "train.dtype='float16'"),
    "eval tasks unknown": Case("params demo --set 'train.eval_tasks=[lambada]'",
                               "train.eval_tasks=['lambada'] is invalid: allowed a list of "
                               "distinct names from last_word, ending, agreement"),
    "eval tasks twice": Case("params demo --set 'train.eval_tasks=[ending, ending]'",
                             "train.eval_tasks=['ending', 'ending'] is invalid"),
    "eval tasks a mapping": Case("params demo --set 'train.eval_tasks={{a: 1}}'",
                                 "train.eval_tasks={{'a': 1}} is invalid: expected a list"),
    "budget above the cap": Case("params demo --set train.max_tokens=1e30",
                                 "train.max_tokens=1000000000000000019884624838656"),
    # -- match
    "match criterion": Case("match demo --criterion foo", "invalid choice: 'foo'"),
    "match step 0": Case("match demo --step 0", "--step: 0 is invalid"),
    "match step huge": Case("match demo --step 100000000000000000000000",
                            "--step 100000000000000000000000 is invalid"),
    "match dense": Case("match demo --set model.moe=null", "model.moe=null"),
    "match not utf-8": Case("match {in}/latin1.yaml", "latin1.yaml' is not UTF-8 text"),
    # -- prepare-data
    "vocab 1e9": Case("prepare-data --out {tmp}/c --vocab-size 1000000000 --no-progress",
                      "vocab_size=1000000000 is too large"),
    "vocab 10": Case("prepare-data --out {tmp}/c --vocab-size 10 --no-progress",
                     "vocab_size=10 is too small"),
    "vocab text": Case("prepare-data --out {tmp}/c --vocab-size abc", "invalid int value: 'abc'"),
    "vocab beyond the data": Case("prepare-data --out {tmp}/c --source {in}/tiny.txt "
                                  "--vocab-size 5000 --valid-fraction 0.2 --no-progress",
                                  "vocab_size=5000 is too large for data source 'tiny': "
                                  "byte-level BPE on its training split can reach at most"),
    "valid fraction nan": Case("prepare-data --out {tmp}/c --valid-fraction nan --no-progress",
                               "data.valid_fraction=nan"),
    "valid fraction 1": Case("prepare-data --out {tmp}/c --valid-fraction 1 --no-progress",
                             "data.valid_fraction=1.0"),
    "source not utf-8": Case("prepare-data --out {tmp}/c --source {in}/latin1.txt --no-progress",
                             "latin1.txt is not UTF-8 text"),
    "source a csv": Case("prepare-data --out {tmp}/c --source {in}/latin1.csv --no-progress",
                         "unknown file type '.csv'"),
    "source missing": Case("prepare-data --out {tmp}/c --source {tmp}/nope --no-progress",
                           "nope': no such file or folder"),
    "source empty folder": Case("prepare-data --out {tmp}/c --source {in}/emptydir --no-progress",
                                "emptydir': the folder has no train.txt"),
    "source blank": Case("prepare-data --out {tmp}/c --source '' --no-progress",
                         "data.source=''"),
    "source an empty file": Case("prepare-data --out {tmp}/c --source {in}/empty.txt --no-progress",
                                 "empty.txt contains no stories"),
    "source jsonl of lists": Case("prepare-data --out {tmp}/c --source {in}/list.jsonl "
                                  "--no-progress", "list.jsonl line 1 has no string field"),
    "source train.txt a folder": Case("prepare-data --out {tmp}/c --source {in}/train_a_folder "
                                      "--no-progress", "train_a_folder': the folder has no "
                                                       "train.txt"),
    "hf config of a file": Case("prepare-data --out {tmp}/c --source {in}/tiny.txt "
                                "--hf-config x --no-progress",
                                "data.hf_config='x' is invalid for data source {in}/tiny.txt"),
    "text field of the sample": Case("prepare-data --out {tmp}/c --text-field body --no-progress",
                                     "data.text_field='body' is invalid for data source sample"),
    "train split of a file": Case("prepare-data --out {tmp}/c --source {in}/tiny.txt "
                                  "--train-split training --no-progress",
                                  "data.train_split='training' is invalid for data source"),
    "valid split of a file": Case("prepare-data --out {tmp}/c --source {in}/tiny.txt "
                                  "--valid-split test --no-progress",
                                  "data.valid_split='test' is invalid for data source"),
    "out blank": Case("prepare-data --out '' --no-progress", "data.cache_dir=''"),
    "out under a file": Case("prepare-data --out {in}/file/c --no-progress",
                             "cannot write {in}/file/c"),
    # -- train
    "train config missing": Case("train nope --out {tmp}/r", "'nope' is neither a file"),
    "train config not utf-8": Case("train {in}/latin1.yaml --out {tmp}/r", "is not UTF-8 text"),
    "train duplicate key": Case("train {in}/dup.yaml --out {tmp}/r", "is given twice"),
    "train below one step": Case("train demo --out {tmp}/r --set train.max_tokens=100",
                                 "train.max_tokens=100"),
    "train batch 0": Case("train demo --out {tmp}/r --set train.batch_size=0",
                          "train.batch_size=0"),
    "train batch 1e20": Case("train demo --out {tmp}/r --set train.batch_size=1e20",
                             "batch_size * max_seq_len = 12800000000000000000000"),
    "train 1e9 layers": Case("train demo --out {tmp}/r --set model.n_layers=1000000000",
                             "115,072,000,131,136 parameters"),
    "train d_model 1e6": Case("train demo --out {tmp}/r --set model.d_model=1000000 "
                              "--set model.n_heads=1000 --set model.n_kv_heads=1000",
                              "16,008,217,000,000 parameters"),
    "train 1e6 experts": Case("train demo --out {tmp}/r --set model.moe.num_experts=1000000",
                              "98,560,197,184 parameters"),
    "train context 1e8": Case("train demo --out {tmp}/r --set model.max_seq_len=100000000 "
                              "--set train.max_tokens=1e12", "micro batches of 8 x 100000000"),
    "train micro batch": Case("train demo --out {tmp}/r --set train.micro_batch_size=3",
                              "train.micro_batch_size=3"),
    "train device": Case("train demo --out {tmp}/r --set train.device=tpu",
                         "train.device='tpu'"),
    "train tasks unknown": Case("train demo --out {tmp}/r --set 'train.eval_tasks=[x]'",
                                "train.eval_tasks=['x'] is invalid"),
    "train negative seed": Case("train demo --out {tmp}/r --set train.seed=-1", "train.seed=-1"),
    "train seed past 64 bits": Case("train demo --out {tmp}/r --set train.seed=99999999999999999999999",
                                    "train.seed=99999999999999999999999 is invalid: allowed 0..2^63-1"),
    "train data_seed past 64 bits": Case("params demo --set train.data_seed=9223372036854775808",
                                         "train.data_seed=9223372036854775808"),
    "train huge sample": Case("train demo --out {tmp}/r --set train.sample_tokens=1000000000",
                              "train.sample_tokens=1000000000 is invalid: allowed 0..100,000"),
    "train out is a file": Case("train demo --out {in}/file", "cannot create run folder"),
    "train over a run": Case("train demo --out {run}", "already holds a run"),
    "train resume other config": Case("train demo --out {run} --resume",
                                      "config differs at model.vocab_size"),
    "train into a folder not a run": Case("train demo --out {tmp}/mine",
                                          "mine is not empty and holds no run",
                                          _not_a_run_folder),
    "resume a pointer out of the run": Case(
        "train {run}/config.yaml --out {run} --resume", "latest.json names folder",
        lambda tmp: ((tmp / "run" / "summary.json").unlink(),
                     _edit_json(tmp / "run" / "checkpoints" / "latest.json",
                                lambda r: {**r, "folder": "../../elsewhere"}))),
    "resume a state at step -5": Case(
        "train {run}/config.yaml --out {run} --resume", "trainer_state.json is corrupt",
        _killed_after_checkpoint_with(lambda s: {**s, "step": -5})),
    "resume a state without data": Case(
        "train {run}/config.yaml --out {run} --resume", "trainer_state.json is corrupt",
        _killed_after_checkpoint_with(lambda s: {k: v for k, v in s.items() if k != "data"})),
    "resume a changed weight": Case(
        "train {run}/config.yaml --out {run} --resume", "model.safetensors is corrupt",
        lambda tmp: ((tmp / "run" / "summary.json").unlink(),
                     _write("run/checkpoints/step_00000002/model.safetensors",
                            (tmp / "run/checkpoints/step_00000002/model.safetensors")
                            .read_bytes()[:-1] + b"\x7f")(tmp))),
    # -- eval
    "eval missing run": Case("eval {tmp}/nope", "nope is not a run folder"),
    "eval a file": Case("eval {in}/file", "file is not a run folder"),
    "eval device": Case("eval {run} --device tpu", "device='tpu'"),
    "eval data not utf-8": Case("eval {run} --data {in}/latin1.txt", "latin1.txt is not UTF-8"),
    "eval data missing": Case("eval {run} --data {tmp}/nope", "nope': no such file or folder"),
    "eval tasks blank": Case("eval {run} --tasks ' , '", "--tasks ' , ' is invalid"),
    "eval windows zero": Case("eval {run} --windows 0", "0 is invalid: must be a whole number > 0"),
    "eval windows too many": Case("eval {run} --windows 100000000",
                                  "too few for 100000000 windows of seq_len + 1"),
    "eval cache dir a file": Case("eval {run} --cache-dir {in}/file", "cannot write {in}/file/"),
    "eval blank cache dir": Case("eval {run} --cache-dir ''", "--cache-dir ''"),
    "eval cache dir outside": Case("eval {run}", "data.cache_dir=/etc",
                                   _run_config(lambda c: c["data"].update(cache_dir="/etc"))),
    "eval config not utf-8": Case("eval {run}", "config.yaml' is not UTF-8 text",
                                  _write("run/config.yaml", b"model: \xff\n")),
    "eval config a list": Case("eval {run}", "expected a mapping at the top level",
                               _write("run/config.yaml", b"[1]\n")),
    "eval config 1e9 layers": Case("eval {run}", "parameters, 1.3 PiB of weights, more than",
                                   _run_config(lambda c: c["model"].update(n_layers=10**9,
                                                                            vocab_size=4096,
                                                                            d_model=256))),
    "eval tokenizer garbage": Case("eval {run}", "tokenizer.json is not a valid tokenizer file",
                                   _write("run/tokenizer.json", b"garbage")),
    "eval tokenizer without eot": Case(
        "eval {run}", "tokenizer.json has no <|endoftext|> token",
        _write("run/tokenizer.json", json.dumps({"version": "1.0", "model": {
            "type": "BPE", "vocab": {"a": 0}, "merges": []}}).encode())),
    "generate tokenizer ids past the model": Case(
        "generate {run} --prompt Once", "has token id 99999, beyond the run's model.vocab_size=512",
        lambda tmp: _edit_json(tmp / "run" / "tokenizer.json", lambda t: {
            **t, "model": {**t["model"], "vocab": {**t["model"]["vocab"], "Once": 99999}}})),
    "eval pointer garbage": Case("eval {run}", "latest.json is corrupt",
                                 _write("run/checkpoints/latest.json", b"{\"fold")),
    "eval pointer not utf-8": Case("eval {run}", "latest.json is corrupt",
                                   _write("run/checkpoints/latest.json", b"\xff\xfe")),
    "eval torn weights": Case("eval {run}", "model.safetensors is corrupt",
                              _truncate("run/checkpoints/step_00000002/model.safetensors")),
    "eval no checkpoint": Case("eval {run}", "has no checkpoint yet",
                               lambda tmp: shutil.rmtree(tmp / "run" / "checkpoints")),
    # -- generate
    "prompt not utf-8": Case("generate {run} --prompt " + "\udcff\udcfe", "--prompt"),
    "max new tokens huge": Case("generate {run} --prompt x --max-new-tokens 100000000000",
                                "--max-new-tokens 100000000000 is invalid: allowed 0..32"),
    "max new tokens -1": Case("generate {run} --prompt x --max-new-tokens -1",
                              "--max-new-tokens: -1 is invalid"),
    "temperature nan": Case("generate {run} --prompt x --temperature nan", "nan is invalid"),
    "temperature 1e400": Case("generate {run} --prompt x --temperature 1e400",
                              "1e400 is invalid"),
    "temperature 1e-300": Case("generate {run} --prompt x --max-new-tokens 2 "
                               "--temperature 1e-300",
                               "temperature=1e-300 is invalid: allowed 0 (greedy) or 1e-06"),
    "top-k 0": Case("generate {run} --prompt x --top-k 0", "--top-k: 0 is invalid"),
    "seed -1": Case("generate {run} --prompt x --seed -1", "--seed: -1 is invalid"),
    "seed 1e30": Case("generate {run} --prompt x --seed 1000000000000000000000000000000",
                      "--seed: 1000000000000000000000000000000 is invalid"),
    "seed text": Case("generate {run} --prompt x --seed abc", "--seed: abc is invalid"),
    "generate missing run": Case("generate {tmp}/nope --prompt x", "nope is not a run folder"),
    "generate torn weights": Case("generate {run} --prompt x", "model.safetensors is corrupt",
                                  _truncate("run/checkpoints/step_00000002/model.safetensors")),
    # -- train --branch-from, finetune
    "branch without a step": Case("train demo --out {tmp}/b --branch-from {run}",
                                  "--branch-from and --branch-step go together"),
    "branch step not kept": Case("train demo --out {tmp}/b --branch-from {run} --branch-step 1",
                                 "kept no checkpoint at step 1 (kept: none)"),
    "train keep step 0": Case("train demo --out {tmp}/r --set train.keep_checkpoints_at=[0]",
                              "train.keep_checkpoints_at=[0] is invalid"),
    "train warmup steps -1": Case("train demo --out {tmp}/r --set train.warmup_steps=-1",
                                  "train.warmup_steps=-1 is invalid"),
    "finetune missing run": Case("finetune {tmp}/nope --data {in}/tiny.txt --out {tmp}/f",
                                 "nope is not a run folder"),
    "finetune missing data": Case("finetune {run} --data {tmp}/nope.txt --out {tmp}/f",
                                  "nope.txt': no such file or folder"),
    "finetune data not utf-8": Case("finetune {run} --data {in}/latin1.txt --out {tmp}/f",
                                    "latin1.txt is not UTF-8 text"),
    "finetune changes the model": Case(
        "finetune {run} --data {in}/tiny.txt --out {tmp}/f --set model.d_model=8",
        "--set model.d_model=8 is invalid in a finetune"),
    # -- export-hf
    "export onto a file": Case("export-hf {run} {in}/file", "is not an empty folder"),
    "export onto the run": Case("export-hf {run} {run}", "is not an empty folder"),
    "export missing run": Case("export-hf {tmp}/nope {tmp}/hf", "nope is not a run folder"),
    "export changed weights": Case(
        "export-hf {run} {tmp}/hf", "model.safetensors is corrupt",
        lambda tmp: _write("run/checkpoints/step_00000002/model.safetensors",
                           (tmp / "run/checkpoints/step_00000002/model.safetensors")
                           .read_bytes()[:-1] + b"\x7f")(tmp)),
    # -- study and ablate-routing (--list-runs: nothing trains)
    "budgets 1e400": Case("study demo --list-runs --out {tmp}/s --budgets 1e400",
                          "token budget ~1e400 is invalid"),
    "budgets below a step": Case("study demo --list-runs --out {tmp}/s --budgets 10",
                                 "token budget 10 is invalid: less than one step"),
    "budgets text": Case("study demo --list-runs --out {tmp}/s --budgets abc",
                         "token budget 'abc'"),
    "budgets empty": Case("study demo --list-runs --out {tmp}/s --budgets ,", "--budgets ','"),
    "budgets via set": Case("study demo --list-runs --out {tmp}/s --set 'study.budgets=[1e400]'",
                            "study.budgets: token budget ~1e400"),
    "seeds 0": Case("study demo --list-runs --out {tmp}/s --seeds 0", "--seeds=0"),
    "ray address malformed": Case("study demo --out {tmp}/s --launcher ray --ray-address nonsense",
                                  "--ray-address 'nonsense' is invalid: expected HOST:PORT"),
    "ray address unreachable": Case("study demo --out {tmp}/s --launcher ray --ray-address 127.0.0.1:1 "
                                    "--set train.max_tokens=2048",
                                    "--ray-address 127.0.0.1:1: no Ray cluster answers there"),
    "slurm without slurm": Case("study demo --out {tmp}/s --launcher slurm",
                                "--launcher slurm needs SLURM on this machine (no sbatch found)"),
    "launcher unknown": Case("study demo --out {tmp}/s --launcher kube", "--launcher: invalid choice"),
    "gpus per run nan": Case("study demo --out {tmp}/s --launcher ray --gpus-per-run nan",
                             "'nan' is invalid: allowed a number of GPUs in 0..64"),
    "slurm fractional gpus": Case("sweep-sparsity micro --out {tmp}/s --launcher slurm --gpus-per-run 0.5",
                                  "--gpus-per-run 0.5 is invalid with --launcher slurm"),
    "runs per gpu with ray": Case("study demo --out {tmp}/s --launcher ray --runs-per-gpu 2",
                                  "--runs-per-gpu is invalid with --launcher ray"),
    "seeds past 64 bits": Case("study demo --list-runs --out {tmp}/s --seeds 99999999999999999999999,1",
                               "99999999999999999999999"),
    "seeds 1e11": Case("study demo --list-runs --out {tmp}/s --seeds 100000000000",
                       "--seeds=100000000000 seeds is invalid"),
    "seeds repeated": Case("study demo --list-runs --out {tmp}/s --seeds 1,1",
                           "seed 1 is listed twice"),
    "seeds 1e400": Case("study demo --list-runs --out {tmp}/s --seeds 1e400",
                        "'1e400' is not a whole number"),
    "criteria unknown": Case("study demo --list-runs --out {tmp}/s --criteria foo",
                             "criterion 'foo'"),
    "criteria empty": Case("study demo --list-runs --out {tmp}/s --criteria ,", "--criteria ','"),
    "jobs 0": Case("study demo --list-runs --out {tmp}/s --jobs 0", "--jobs: 0 is invalid"),
    "match step 0 via set": Case("study demo --list-runs --out {tmp}/s --set study.match_step=0",
                                 "study.match_step=0"),
    "study section a number": Case("study demo --list-runs --out {tmp}/s --set study=3",
                                   "study=3"),
    "study unknown key": Case("study demo --list-runs --out {tmp}/s --set study.width=1",
                              "study.width is not a known key"),
    "study dense": Case("study demo --list-runs --out {tmp}/s --set model.moe=null",
                        "model.moe=null"),
    "study not utf-8": Case("study {in}/latin1.yaml --list-runs --out {tmp}/s",
                            "latin1.yaml' is not UTF-8"),
    "study out under a file": Case("study demo --list-runs --out {in}/file/s", "cannot write"),
    "study dry run with tune-lr": Case("study demo --dry-run --tune-lr 0.01,0.02 --out {tmp}/s",
                                       "--dry-run is invalid with --tune-lr"),
    "study dry run until resolved": Case("study demo --dry-run --until-resolved --out {tmp}/s",
                                         "--dry-run is invalid with --until-resolved"),
    "study into a folder not a study": Case("study demo --list-runs --out {tmp}/mine",
                                            "mine is not empty and holds no study",
                                            _not_a_run_folder),
    "study into a run folder": Case("study demo --list-runs --out {run}",
                                    "is not empty and holds no study (it has checkpoints"),
    "study plan a list": Case("study demo --list-runs --out {study}", "plan.json is corrupt",
                              _write("study/plan.json", b"[1]")),
    "study plan not utf-8": Case("study demo --list-runs --out {study}", "plan.json is corrupt",
                                 _write("study/plan.json", b"\xff")),
    "study eval tasks unknown": Case("study demo --list-runs --out {tmp}/s --set "
                                     "'train.eval_tasks=[x]'", "train.eval_tasks=['x'] is invalid"),
    "study yaml broken": Case("study demo --list-runs --out {study} " + RUN_SETS + " --seeds 1",
                              "study.yaml is corrupt", _write("study/study.yaml", b"a: [\n")),
    "ladder seeds 0": Case("ablate-routing demo --list-runs --out {tmp}/s --seeds 0", "--seeds=0"),
    "ladder dense": Case("ablate-routing demo --list-runs --out {tmp}/s --set model.moe=null",
                         "model.moe=null"),
    # -- report
    "report missing": Case("report {tmp}/nope", "nope is not a study folder"),
    "report a file": Case("report {in}/good.csv", "good.csv is a file, not a study folder"),
    "report empty folder": Case("report {in}/emptydir", "emptydir is not a study folder"),
    "report no complete run": Case(
        "report {study}", "runs whose folders are missing or incomplete",
        lambda tmp: [p.unlink() for p in (tmp / "study" / "runs").rglob("summary.json")]),
    "report empty metrics": Case("report {study}", "metrics.jsonl of a complete run has no eval",
                                 _study_metrics(lambda data: b"")),
    "report duplicated metrics": Case("report {study}", "logs eval step 2 again",
                                      _study_metrics(lambda data: data + data)),
    "report metrics not utf-8": Case("report {study}", "metrics.jsonl cannot be read",
                                     _study_metrics(lambda data: data + b"\xff\n")),
    "report metrics a list line": Case("report {study}", "is not a JSON object",
                                       _study_metrics(lambda data: data + b"[1]\n")),
    "report best loss text": Case("report {study}", "best_val_loss='low' is not a finite number",
                                  _study_summary({"best_val_loss": "low"})),
    "report best loss nan": Case("report {study}", "best_val_loss=nan is not a finite number",
                                 _study_summary({"best_val_loss": float("nan")})),
    "report best loss missing": Case("report {study}", "best_val_loss is missing",
                                     _study_summary_without("best_val_loss")),
    "report best loss null": Case("report {study}", "best_val_loss is missing",
                                  _study_summary({"best_val_loss": None})),
    "report best loss negative": Case("report {study}", "best_val_loss=-0.5 is not a loss",
                                      _study_summary({"best_val_loss": -0.5})),
    "report final bpb negative": Case("report {study}", "final_val_bpb=-1 is not a loss",
                                      _study_summary({"final_val_bpb": -1})),
    "report summary a list": Case("report {study}", "summary.json is corrupt (not a JSON object)",
                                  _write(STUDY_SEED0 + "/summary.json", b"[1, 2]")),
    "report summary nests too deep": Case("report {study}", "summary.json nests too deeply",
                                          _write(STUDY_SEED0 + "/summary.json",
                                                 b"[" * 30_000 + b"]" * 30_000)),
    "report routing a number": Case("report {study}", "routing is not a list of layers",
                                    _study_summary({"routing": 3})),
    "report tasks.json not json": Case("report {study}", "tasks.json is not valid JSON",
                                       _write(STUDY_SEED0 + "/tasks.json", b"{")),
    "report tasks.json not utf-8": Case("report {study}", "tasks.json is not valid JSON",
                                        _write(STUDY_SEED0 + "/tasks.json", b"\xff")),
    "report tasks.json no accuracy": Case("report {study}", "tasks.json is corrupt",
                                          _write(STUDY_SEED0 + "/tasks.json",
                                                 b'{"tasks": {"ending": {"correct": 3}}}')),
    "report plan a list": Case("report {study}", "plan.json is corrupt",
                               _write("study/plan.json", b"[1]")),
    "report plan arms a number": Case("report {study}", "arms is not a list",
                                      lambda tmp: _edit_json(tmp / "study" / "plan.json",
                                                             lambda p: {**p, "arms": 3})),
    "report run config not utf-8": Case("report {study}", "config.yaml cannot be read",
                                        _write(STUDY_SEED0 + "/config.yaml", b"model: \xff\n")),
    # -- fit
    "fit missing": Case("fit {tmp}/nope.csv", "cannot read {tmp}/nope.csv"),
    "fit a folder": Case("fit {in}/emptydir", "cannot read {in}/emptydir"),
    "fit not utf-8": Case("fit {in}/latin1.csv", "latin1.csv is not a readable CSV"),
    "fit empty": Case("fit {in}/empty.csv", "empty.csv has no data rows"),
    "fit header only": Case("fit {in}/header.csv", "header.csv has no data rows"),
    "fit not a number": Case("fit {in}/nonnum.csv", "N='abc' is not a number"),
    "fit identical rows": Case("fit {in}/identical.csv", "every loss is 3"),
    "fit one size": Case("fit {in}/one_n.csv", "N takes one value (1e+06)"),
    "fit repeated points": Case("fit {in}/few_points.csv", "too few distinct (N, D) points"),
    "fit law": Case("fit {in}/good.csv --law bogus", "invalid choice: 'bogus'"),
    "fit sparsity without S": Case("fit {in}/good.csv --law sparsity", "column 'S'"),
    "fit starts 0": Case("fit {in}/good.csv --starts 0", "--starts 0 is invalid"),
    "fit drop highest": Case("fit {in}/good.csv --drop-highest 100", "--drop-highest 100"),
    "fit bootstrap huge": Case("fit {in}/good.csv --bootstrap 100000000000",
                               "--bootstrap: 100000000000 is invalid"),
    "fit seed -1": Case("fit {in}/good.csv --seed -1", "--seed: -1 is invalid"),
    "fit columns": Case("fit {in}/good.csv --columns foo", "--columns 'foo'"),
    "fit column missing": Case("fit {in}/good.csv --columns N=nope", "column 'nope' (for N)"),
    "fit holdout": Case("fit {in}/good.csv --holdout garbage", "--holdout 'garbage'"),
    "fit out under a file": Case("fit {in}/good.csv --starts 5 --out {in}/file/fit.json",
                                 "cannot write {in}/file/fit.json"),
    # -- optimal
    "optimal param text": Case("optimal {in}/fit_nonnum.json --flops 1e20",
                               "params.alpha='abc' is invalid"),
    "optimal param nan": Case("optimal {in}/fit_nan.json --flops 1e20",
                              "params.alpha=nan is invalid"),
    "optimal alpha 0": Case("optimal {in}/fit_flat.json --flops 1e20",
                            "params.alpha=0.0 is invalid: allowed > 0"),
    "optimal beta negative": Case("optimal {in}/fit_rising.json --params 1e8",
                                  "params.beta=-0.3 is invalid: allowed > 0"),
    "optimal param bool": Case("optimal {in}/fit_bool.json --flops 1e20",
                               "params.beta=True is invalid"),
    "optimal bootstrap list": Case("optimal {in}/fit_boot_list.json --flops 1e20",
                                   "bootstrap is invalid"),
    "optimal replica text": Case("optimal {in}/fit_boot_bad.json --flops 1e20",
                                 "bootstrap.params[0].E='x'"),
    "optimal shared fraction": Case("optimal {in}/fit_shared.json --flops 1e20",
                                    "shared_fraction=7 is invalid"),
    "optimal law": Case("optimal {in}/fit_law.json --flops 1e20", "law 'nope' is unknown"),
    "optimal no params": Case("optimal {in}/fit_no_params.json --flops 1e20", "is not a fit"),
    "optimal a list": Case("optimal {in}/list.json --flops 1e20", "list.json is not a fit"),
    "optimal not utf-8": Case("optimal {in}/latin1.json --flops 1e20",
                              "latin1.json is not UTF-8 text"),
    "optimal empty": Case("optimal {in}/empty.json --flops 1e20", "empty.json is not JSON"),
    "optimal missing": Case("optimal {tmp}/nope.json --flops 1e20", "cannot read {tmp}/nope.json"),
    "optimal flops nan": Case("optimal {in}/good_fit.json --flops nan", "--flops=nan"),
    "optimal flops 1e400": Case("optimal {in}/good_fit.json --flops 1e400", "--flops=inf"),
    "optimal flops text": Case("optimal {in}/good_fit.json --flops abc",
                               "invalid float value: 'abc'"),
    "optimal tokens 0": Case("optimal {in}/good_fit.json --params 1e6 --tokens 0",
                             "--tokens=0.0 is invalid"),
    "optimal flops tiny": Case("optimal {in}/good_fit.json --flops 1e-300", "--flops 1e-300"),
    "optimal params alone": Case("optimal {in}/good_fit.json --params 1e6",
                                 "--params N needs --tokens D or --flops C"),
    "optimal tokens without params": Case("optimal {in}/good_fit.json --flops 1e20 --tokens 1e9",
                                          "--tokens D needs --params N"),
    "optimal no budget": Case("optimal {in}/good_fit.json", "give --params N"),
    "optimal seconds zero": Case("optimal {in}/good_fit.json --seconds 0",
                                 "--seconds 0.0 is invalid"),
    "optimal seconds nan": Case("optimal {in}/good_fit.json --seconds nan",
                                "--seconds nan is invalid"),
    "optimal seconds no table": Case("optimal {in}/good_fit.json --seconds 60 --throughput "
                                     "{tmp}/nope.json", "cannot read throughput table {tmp}/nope.json"),
    "optimal seconds bad table": Case("optimal {in}/good_fit.json --seconds 60 --throughput "
                                      "{in}/empty.json", "throughput table {in}/empty.json is not JSON"),
    # -- throughput
    "throughput no source": Case("throughput --out {tmp}/t.json",
                                 "give exactly one of CONFIG or --grid"),
    "throughput seconds": Case("throughput --grid micro --seconds-per-shape -1 --out {tmp}/t.json",
                               "--seconds-per-shape -1.0 is invalid"),
    "optimal params nan": Case("optimal {in}/good_fit.json --params nan --tokens 1e9",
                               "--params=nan"),
    "optimal shared 2": Case("optimal {in}/good_fit.json --flops 1e20 --shared-fraction 2",
                             "--shared-fraction 2.0"),
    "optimal max sparsity 1": Case("optimal {in}/good_fit.json --flops 1e20 --max-sparsity 1",
                                   "--max-sparsity 1.0"),
    # -- isoflop
    "config show missing": Case("config show nope", "config 'nope' is neither a file nor a preset"),
    "compare missing side": Case("compare demo nope --seeds 1", "config 'nope' is neither a file nor a preset"),
    "compare zero seeds": Case("compare demo demo --seeds 0", "--seeds=0 is invalid"),
    "pool missing study": Case("pool {tmp}/nothing", "nothing does not exist: give a study folder"),
    "isoflop too few points": Case("isoflop {in}/iso_few.csv",
                                   "no budget could be analysed: a parabola in log N needs 3 "
                                   "distinct sizes"),
    "isoflop flat": Case("isoflop {in}/iso_flat.csv", "C=1e+18: 3 points, 3 sizes"),
    "isoflop not utf-8": Case("isoflop {in}/latin1.csv", "latin1.csv is not a readable CSV"),
    "isoflop empty": Case("isoflop {in}/empty.csv", "empty.csv has no data rows"),
    "isoflop where": Case("isoflop {in}/iso_few.csv --where foo", "--where 'foo'"),
    "isoflop where no rows": Case("isoflop {in}/iso_few.csv --where N=5",
                                  "no rows left after --where N=5"),
    "isoflop seed column missing": Case("isoflop {in}/iso_few.csv --seed-column run_seed",
                                        "--seed-column 'run_seed' is not a column of"),
    "isoflop window of a global fit": Case("isoflop {in}/iso_few.csv --estimator global "
                                           "--window-factor 2", "--window-factor 2 is invalid with "
                                           "--estimator global"),
    "isoflop column": Case("isoflop {in}/iso_few.csv --columns N=nope", "column 'nope' (for N)"),
    # -- sweep-sparsity
    "sweep grid missing": Case("sweep-sparsity nope", "sweep grid 'nope' is neither"),
    "sweep grid not utf-8": Case("sweep-sparsity {in}/latin1.yaml", "latin1.yaml' is not UTF-8"),
    "sweep grid a list": Case("sweep-sparsity {in}/list.yaml", "expected a mapping"),
    "sweep grid bad yaml": Case("sweep-sparsity {in}/bad.yaml", "is not valid YAML"),
    "sweep grid duplicate key": Case("sweep-sparsity {in}/grid_twice.yaml --dry-run",
                                     "key 'sparsities' is given twice"),
    "sweep grid nests too deep": Case("sweep-sparsity {in}/deep.yaml", "nests too deeply"),
    "sweep size climbs out": Case("sweep-sparsity {in}/grid_climbs.yaml --dry-run",
                                  "size name '../../x' is invalid"),
    "sweep size a number": Case("sweep-sparsity {in}/grid_size_list.yaml --dry-run",
                                "sizes[0]=3 is invalid: expected a mapping"),
    "sweep name climbs out": Case("sweep-sparsity {in}/grid_name.yaml",
                                  "sweep grid name '../../x'"),
    "sweep bootstrap": Case("sweep-sparsity demo --dry-run --bootstrap -1",
                            "--bootstrap: -1 is invalid"),
    "sweep starts": Case("sweep-sparsity demo --dry-run --starts 0", "--starts: 0 is invalid"),
    "sweep jobs": Case("sweep-sparsity demo --dry-run --jobs 0", "--jobs: 0 is invalid"),
    "sweep finetune steps": Case("sweep-sparsity cpu-finetune --dry-run --set finetune.steps=0",
                                 "finetune.steps=0 is invalid"),
    "sweep finetune lr": Case("sweep-sparsity cpu-finetune --dry-run --set finetune.lr=-1",
                              "finetune.lr=-1.0 is invalid"),
    "sweep finetune batch": Case("sweep-sparsity cpu-finetune --dry-run "
                                 "--set finetune.batch_size=0", "finetune.batch_size=0 is invalid"),
    "sweep finetune data": Case("sweep-sparsity cpu-finetune --dry-run --set finetune.data=nope",
                                "finetune.data='nope' is invalid"),
    "sweep finetune key": Case("sweep-sparsity cpu-finetune --dry-run --set finetune.epochs=1",
                               "finetune.epochs is not a known key"),
    "sweep out under a file": Case("sweep-sparsity demo --out {in}/file/s", "cannot write"),
    "sweep speeds missing": Case("sweep-sparsity micro --dry-run --speeds {tmp}/nope.csv",
                                 "cannot read {tmp}/nope.csv"),
    "sweep speeds without dry run": Case("sweep-sparsity micro --speeds {tmp}/nope.csv",
                                         "--speeds is invalid without --dry-run"),
    # -- merge
    "merge missing sweep": Case("merge {tmp}/a {tmp}/b --out {tmp}/m",
                                "{tmp}/a is not a sweep folder: no such folder"),
    "merge one sweep": Case("merge {tmp}/a --out {tmp}/m", "merge needs 2 or more sweep folders"),
    # -- rerun
    "rerun not a run": Case("rerun {tmp}/nope", "{tmp}/nope is not a run folder: it has no config.yaml"),
    # -- predict, score
    "predict missing sweep": Case("predict {tmp}/nope --flops 1e13 --cell s1:0 --out {tmp}/p.json",
                                  "'{tmp}/nope' is invalid: not a sweep folder with a results.csv"),
    "score missing prediction": Case("score {tmp}/nope.json {tmp}/runs --out {tmp}/s.json",
                                     "cannot access {tmp}/nope.json"),
    # -- findings
    "findings missing results": Case("findings --results {tmp}/nope --out {tmp}/f --readme {tmp}/r.md --check",
                                     "--readme {tmp}/r.md is invalid: no such file"),
    # -- report
    "report bootstrap of a study": Case("report {tmp} --bootstrap 4",
                                        "--bootstrap is invalid for {tmp}: it has no grid.json"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_one_line_and_exit_2(shared, tmp_path, capsys, monkeypatch, name):
    import shlex

    case = CASES[name]
    for folder in ("run", "study"):
        if "{" + folder + "}" in case.args:
            shutil.copytree(shared / folder, tmp_path / folder)
    if case.damage:
        case.damage(tmp_path)
    places = {"in": shared / "in", "tmp": tmp_path, "run": tmp_path / "run",
              "study": tmp_path / "study"}
    args = [arg.format(**places) for arg in shlex.split(case.args)]
    monkeypatch.chdir(tmp_path)  # default output folders (out/) land here
    before = sorted(p.name for p in tmp_path.iterdir())
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:  # argparse exits itself; main returns
        raise SystemExit(main(args))
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("moelab"), err
    assert case.expected.format(**places) in err, err
    if name.startswith("train ") and "{run}" not in case.args:
        assert sorted(p.name for p in tmp_path.iterdir()) == before  # refused before writing


def test_the_table_covers_every_command():
    from moelab.cli import build_parser

    parser = build_parser()
    commands = set(parser._subparsers._group_actions[0].choices)  # what moelab --help lists
    covered = {case.args.split()[0] for case in CASES.values()}
    assert commands <= covered, sorted(commands - covered)


# --------------------------------------------------------------------------------------------
# The guard itself
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("exc, expected", [
    (UnicodeDecodeError("utf-8", b"ab\xff", 2, 3, "invalid start byte"),
     "not UTF-8 text (invalid start byte at byte 2"),
    (OverflowError("int too large to convert to float"), "a number is too large"),
    (json.JSONDecodeError("Expecting value", "x", 0), "a JSON file is malformed"),
    (yaml.YAMLError("mapping values are not allowed here\nline 2"), "a YAML file is malformed"),
    (FileNotFoundError(2, "No such file or directory", "/no/file"),
     "cannot access /no/file: No such file or directory"),
    (RecursionError("maximum recursion depth exceeded"), "nests too deeply"),
    (MemoryError(), "out of memory"),
])
def test_expected_error_classes_become_one_line(exc, expected):
    message = bad_input_message(exc)
    assert expected in message and "\n" not in message


def test_a_bug_keeps_its_traceback(monkeypatch):
    import moelab.cli.model as model_cli

    def broken(args):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(model_cli, "run_params", broken)
    with pytest.raises(ZeroDivisionError):
        main(["params", "demo"])


def test_an_expected_error_from_deep_inside_is_one_line(monkeypatch, capsys):
    import moelab.cli.model as model_cli

    def deep(args):
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

    monkeypatch.setattr(model_cli, "run_params", deep)
    capsys.readouterr()
    assert main(["params", "demo"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("moelab: error: the input is not UTF-8 text") and err.count("\n") == 1


@pytest.mark.slow
def test_a_real_process_exits_2_with_one_line(shared):
    """The same through ``python -m moelab``: exit status and stderr as a shell sees them."""
    for args in (["params", str(shared / "in" / "latin1.yaml")],
                 ["study", "demo", "--list-runs", "--budgets", "1e400"]):
        child = subprocess.run([sys.executable, "-m", "moelab", *args], capture_output=True,
                               text=True)
        assert child.returncode == 2, child.stderr
        assert len(child.stderr.strip().splitlines()) == 1 and "Traceback" not in child.stderr


@pytest.mark.slow
@pytest.mark.parametrize("env, expected", [
    ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc' is invalid"),
    ({"WORLD_SIZE": "0"}, "WORLD_SIZE='0' is invalid"),
    ({"WORLD_SIZE": "2", "RANK": "x"}, "RANK='x' is invalid"),
    ({"WORLD_SIZE": "2"}, "RANK is not set"),
    ({"WORLD_SIZE": "2", "RANK": "5"}, "RANK=5 is invalid: allowed 0..1"),
])
def test_malformed_torchrun_variables_are_one_line(tmp_path, capsys, monkeypatch, env, expected):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    sets = [arg for item in TWO_STEPS for arg in ("--set", item)]
    capsys.readouterr()
    assert main(["train", "demo", "--out", str(tmp_path / "run"), *sets]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_compiling_for_a_cpu_without_a_cpp_compiler_is_refused_before_writing(tmp_path, capsys):
    """Inductor turns a CPU model into C++; with no compiler on the machine the run is refused
    on one line, not with inductor's traceback at step 1 (the cpu sweep preset compiles)."""
    from torch._inductor import config as inductor_config, cpp_builder

    sets = [arg for item in TWO_STEPS for arg in ("--set", item)]
    cpp_builder.cpp_compiler_search.cache_clear()  # it remembers the compiler it found
    try:
        with inductor_config.patch({"cpp.cxx": (None, "no-such-c++")}):
            capsys.readouterr()
            assert main(["train", "demo", "--out", str(tmp_path / "run"), *sets,
                         "--set", "train.compile=true", "--set", "train.device=cpu"]) == 2
    finally:
        cpp_builder.cpp_compiler_search.cache_clear()
    err = capsys.readouterr().err
    assert "train.compile=true is invalid here" in err and "no-such-c++" in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_output_into_a_closed_pipe_ends_quietly():
    """`moelab ... --dry-run | head -1`: the reader goes away, the command stops without a
    traceback (exit 141, as for SIGPIPE)."""
    child = subprocess.Popen([sys.executable, "-m", "moelab", "sweep-sparsity", "paper",
                              "--dry-run"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()  # before the child prints anything
    stderr = child.stderr.read().decode()
    assert child.wait(timeout=120) == 141 and stderr == "", stderr
