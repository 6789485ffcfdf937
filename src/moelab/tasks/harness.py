"""The zero-shot tasks as a local task folder for lm-evaluation-harness (``moelab[lmeval]``).

    python -m moelab.tasks.harness TASKS_DIR
    moelab export-hf RUN HF_DIR
    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 lm_eval --model hf \\
        --model_args pretrained=HF_DIR,dtype=float32,add_bos_token=True \\
        --tasks moelab_last_word,moelab_ending,moelab_agreement --include_path TASKS_DIR

writes a copy of each task's JSONL and an lm-eval task YAML reading it (``dataset_path: json``,
nothing fetched). ``add_bos_token=True`` starts every context with ``<|endoftext|>`` (the
exported tokenizer's BOS), as ``moelab eval --tasks`` does. The harness's metrics then are
moelab's: ``acc`` of ``moelab_last_word`` is the greedy exact match, ``acc`` of
``moelab_agreement`` the minimal-pair accuracy, and ``acc`` of ``moelab_ending`` ranks by the
total log-likelihood (moelab's ``accuracy_total_loglik``; the harness has no per-token mean,
its ``acc_norm`` divides by the ending's characters).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from moelab.fileio import atomic_write_text
from moelab.tasks import TASK_FILES, task_text

_COMMON = {"dataset_path": "json", "test_split": "test", "target_delimiter": ""}
HARNESS_TASKS: dict[str, dict[str, Any]] = {
    "last_word": {"output_type": "loglikelihood", "doc_to_text": "{{context}}",
                  "doc_to_target": "{{target}}", "metric_list": [{"metric": "acc"}]},
    "ending": {"output_type": "multiple_choice", "doc_to_text": "{{context}}",
               "doc_to_choice": "{{endings}}", "doc_to_target": "{{label}}",
               "metric_list": [{"metric": "acc"}, {"metric": "acc_norm"}]},
    "agreement": {"output_type": "multiple_choice", "doc_to_text": "",
                  "doc_to_choice": "{{[good, bad]}}", "doc_to_target": 0,
                  "metric_list": [{"metric": "acc"}]},
}


def write_harness_tasks(out_dir: str | Path) -> list[str]:
    """Write ``moelab_<task>.yaml`` and ``<task>.jsonl`` for every task; return the task names.

    The YAML names its JSONL by absolute path: the harness resolves ``data_files`` against
    the working directory, not against the YAML's folder.
    """
    out_dir = Path(out_dir).resolve()
    names = []
    for task, spec in HARNESS_TASKS.items():
        data_file = atomic_write_text(out_dir / TASK_FILES[task], task_text(task))
        name = f"moelab_{task}"
        config = {"task": name, **_COMMON,
                  "dataset_kwargs": {"data_files": {"test": str(data_file)}}, **spec}
        atomic_write_text(out_dir / f"{name}.yaml", yaml.safe_dump(config, sort_keys=False))
        names.append(name)
    return names


USAGE_EXAMPLE = """\
then:
  moelab export-hf RUN HF_DIR
  HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 lm_eval --model hf \\
      --model_args pretrained=HF_DIR,dtype=float32,add_bos_token=True \\
      --tasks moelab_last_word,moelab_ending,moelab_agreement --include_path TASKS_DIR
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m moelab.tasks.harness",
        description="Write moelab's zero-shot tasks as a local task folder for\n"
        "lm-evaluation-harness (pip install 'moelab[lmeval]'): each task's JSONL and an\n"
        "lm-eval task YAML reading it, nothing fetched.",
        epilog=USAGE_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, metavar="TASKS_DIR",
                        help="the folder to write the task files into")
    args = parser.parse_args(argv)
    names = write_harness_tasks(args.out)
    print(f"wrote {', '.join(names)} to {args.out}; run lm_eval with --include_path {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
