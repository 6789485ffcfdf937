"""Training engine: the loop, evaluation, run folders, checkpoints, generation and HF export.

    summary = train(config, run_dir)              # a RunSummary; resume=True continues a killed one
    model, tokenizer = load_run(run_dir)          # the final weights and the run's tokenizer
    evaluate_run(run_dir)                         # a RunEvaluation: val_loss, bits_per_byte, ...
    evaluate_tasks(run_dir, ["agreement"])        # zero-shot tasks, into RUN/zero_shot.json
    branch_run(source_dir, step, config, out_dir) # a cooldown branch of a wsd budget family
    finetune(run_dir, data, out_dir)              # continue a run's weights on new text

See docs/training.md.
"""

from moelab.train.branch import branch_run
from moelab.train.budgets import BudgetRun, WsdFamily, wsd_budget_family
from moelab.train.evaluation import EvalResult, evaluate
from moelab.train.finetune import FinetuneSummary, finetune
from moelab.train.generate import generate_text
from moelab.train.loop import train
from moelab.train.run_folder import RunFolder
from moelab.train.trained_run import evaluate_run, evaluate_tasks, load_run
from moelab.train.schedule import Schedule
from moelab.train.state import TrainState
from moelab.train.run_summary import RunSummary

__all__ = ["BudgetRun", "EvalResult", "FinetuneSummary", "RunFolder", "RunSummary", "Schedule",
           "TrainState", "WsdFamily", "branch_run", "evaluate", "evaluate_run", "evaluate_tasks",
           "finetune", "generate_text", "load_run", "train",
           "wsd_budget_family"]
