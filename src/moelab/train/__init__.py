"""Training engine: the loop, evaluation, run folders, checkpoints, generation and HF export.

    summary = train(config, run_dir)              # one run; resume=True continues a killed one
    model, tokenizer = load_run(run_dir)          # the final weights and the run's tokenizer
    evaluate_run(run_dir)                         # {"val_loss": ..., "bits_per_byte": ...}

See docs/training.md.
"""

from moelab.train.evaluation import EvalResult, evaluate
from moelab.train.generate import generate_text
from moelab.train.loop import train
from moelab.train.optim import lr_at
from moelab.train.run_folder import RunFolder
from moelab.train.runs import evaluate_run, load_run

__all__ = ["EvalResult", "RunFolder", "evaluate", "evaluate_run", "generate_text", "load_run",
           "lr_at", "train"]
