"""Sub-commands ``train``, ``eval``, ``generate`` and ``export-hf``: parsing and printing only.

The engine (``moelab.train``, ``moelab.tasks``: torch) is imported inside each handler, so
that building the parser, ``moelab --help`` and the other commands do not pay torch's import.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import TYPE_CHECKING

from moelab.cli import add_config_arguments, non_negative_int, positive_int, seed_int
from moelab.codec import to_json
from moelab.config import load_config
from moelab.errors import MoelabError, short_repr, short_text
from moelab.fileio import refuse_overwriting_inputs

if TYPE_CHECKING:
    from moelab.train.run_summary import RunSummary

DEFAULT_NEW_TOKENS = 64
"""``generate``'s default length, cut to the run's context where that is shorter."""


def register(subparsers) -> None:
    """Add this module's sub-commands."""
    train = subparsers.add_parser(
        "train", help="train one run into a folder",
        description="Train one model; under torchrun --nproc_per_node=N it uses DDP.")
    add_config_arguments(train)
    train.add_argument("--out", required=True, metavar="RUN", help="the run folder to write")
    train.add_argument("--resume", action="store_true",
                       help="continue the run in --out from its latest checkpoint")
    train.add_argument("--branch-from", metavar="SOURCE_RUN",
                       help="start from SOURCE_RUN's kept checkpoint at --branch-step (a wsd "
                            "cooldown branch; the same command again resumes it)")
    train.add_argument("--branch-step", type=positive_int, metavar="S",
                       help="the step of SOURCE_RUN's kept checkpoint (train.keep_checkpoints_at)")
    train.set_defaults(func=_train)

    finetune = subparsers.add_parser(
        "finetune", help="continue a run's final weights on new text, in a new run folder",
        description="Train a finished run's final weights on another text source with a fresh "
                    "optimizer and schedule, tokenized with the run's tokenizer, validated on "
                    "that source's held-out split. The same command again resumes it.")
    finetune.add_argument("run", metavar="RUN", help="the finished run to start from")
    finetune.add_argument("--data", required=True, metavar="PATH",
                          help="the new text: adaptation (the bundled adaptation set), a "
                               "folder with train.txt and valid.txt, or a .txt/.jsonl file")
    finetune.add_argument("--out", required=True, metavar="DIR", help="the run folder to write")
    finetune.add_argument("--set", dest="overrides", action="append", default=[],
                          metavar="KEY=VALUE",
                          help="override a train or data key of the finetune, e.g. --set "
                               "train.max_tokens=50000 (repeatable)")
    finetune.set_defaults(func=_finetune)

    evaluate = subparsers.add_parser("eval", help="validation loss and bits/byte of a run")
    evaluate.add_argument("run", metavar="RUN", help="a run folder")
    evaluate.add_argument("--data", metavar="PATH",
                          help="score the validation split of this source instead (a folder "
                               "with valid.txt, or a .txt/.jsonl file)")
    evaluate.add_argument("--cache-dir", metavar="DIR",
                          help="token cache folder for the run's own validation split (default: "
                               "the run's data.cache_dir, used only inside the run folder or "
                               "the cache root $MOELAB_CACHE)")
    evaluate.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    evaluate.add_argument("--windows", type=positive_int, metavar="N",
                          help="score N validation windows instead of the run's "
                               "train.eval_windows (the whole split allows len // (context + 1))")
    evaluate.add_argument("--tasks", metavar="NAMES",
                          help="score zero-shot tasks instead: a comma-separated list of "
                               "last_word, ending, agreement, or all; writes RUN/zero_shot.json")
    evaluate.add_argument("--json", action="store_true", help="print JSON")
    evaluate.set_defaults(func=_eval)

    generate = subparsers.add_parser("generate", help="continue a prompt with a trained run")
    generate.add_argument("run", metavar="RUN", help="a run folder")
    generate.add_argument("--prompt", required=True, help="the text to continue")
    generate.add_argument("--max-new-tokens", type=non_negative_int, default=None, metavar="N",
                          help=f"tokens to generate (default {DEFAULT_NEW_TOKENS}, or the run's "
                               f"max_seq_len if shorter; at most max_seq_len)")
    generate.add_argument("--temperature", type=_temperature, default=1.0, metavar="T",
                          help="sampling temperature; 0 means greedy (default 1.0)")
    generate.add_argument("--top-k", type=positive_int, default=None, metavar="K",
                          help="sample only among the K most likely tokens")
    generate.add_argument("--seed", type=seed_int, default=0, metavar="S",
                          help="seed of the sampler: the same seed gives the same text")
    generate.set_defaults(func=_generate)

    again = subparsers.add_parser(
        "rerun", help="train a stored run again from its config and compare, bit for bit",
        description="Retrain RUN from its own config.yaml (with the numerics and threads it "
                    "recorded) into a new folder; say whether every loss matches bit for bit, "
                    "else the difference at each evaluation and how the two machines differ. Exit 0 when "
                    "they match, 1 when they do not.")
    again.add_argument("run", metavar="RUN", help="a finished run folder")
    again.add_argument("--out", metavar="DIR", help="the new run folder (default: RUN-rerun)")
    again.set_defaults(func=_rerun)

    export = subparsers.add_parser(
        "export-hf", help="write a Hugging Face model folder (Llama or Mixtral) of a run")
    export.add_argument("run", metavar="RUN", help="a run folder")
    export.add_argument("out", metavar="OUT", help="the folder to create")
    export.set_defaults(func=_export_hf)


def _train(args) -> int:
    from moelab.train import branch_run, train

    refuse_overwriting_inputs(args.out, "--out", [args.config, args.branch_from])
    config = load_config(args.config, args.overrides)
    if (args.branch_from is None) != (args.branch_step is None):
        raise MoelabError("--branch-from and --branch-step go together: give both or neither")
    if args.branch_from is not None:
        summary = branch_run(args.branch_from, args.branch_step, config, args.out)
    else:
        summary = train(config, args.out, resume=args.resume)
    _print_summary(args.out, summary)
    return 0


def _finetune(args) -> int:
    from moelab.train import finetune

    refuse_overwriting_inputs(args.out, "--out", [args.run, args.data])
    result = finetune(args.run, args.data, args.out, args.overrides)
    _print_summary(args.out, result.run)
    print(f"source {args.run} on the new data: val loss {result.reference.source_val_loss:.4f}; "
          f"fine-tuned: best {result.run.best_val_loss:.4f}")
    return 0


def _print_summary(out: str, summary: RunSummary | None) -> None:
    if summary is not None:  # the other ranks of a DDP run return None and print nothing
        print(f"{out}: best val loss {summary.best_val_loss:.4f} "
              f"(step {summary.best_val_step}), final {summary.final_val_loss:.4f} "
              f"= {summary.final_val_bpb:.4f} bits/byte; {summary.tokens:,} tokens in "
              f"{summary.steps} steps, {summary.tokens_per_s:,.0f} tokens/s{_cpu_rate(summary)}")


def _cpu_rate(summary: RunSummary) -> str:
    """Tokens per CPU-second and the MFU, its convention named (on a CPU: CPU time)."""
    rate = (f" ({summary.tokens_per_cpu_s:,.0f} per CPU-second)"
            if summary.tokens_per_cpu_s else "")
    if summary.mfu is None:
        return rate
    return f"{rate}; MFU {100 * summary.mfu:.1f} % = {summary.mfu_convention}"


def _rerun(args) -> int:
    from moelab.train.rerun import rerun

    out = args.out or f"{args.run.rstrip('/')}-rerun"
    refuse_overwriting_inputs(out, "--out", [args.run])
    result = rerun(args.run, out)
    if result.identical:
        print(f"{out}: every loss matches {args.run} bit for bit")
    else:
        print(f"{out}: differs from {args.run}; val loss rerun - stored per evaluation:")
        for row in result.evals:
            print(f"  step {row.step}: {row.stored:.6f} -> {row.rerun:.6f} "
                  f"({row.difference:+.2e})")
    for line in result.machine_differences or ["machines: the same record"]:
        print(f"  {line}")
    return 0 if result.identical else 1


def _eval(args) -> int:
    from moelab.train import evaluate_run

    if args.tasks is not None:
        return _eval_tasks(args)
    if args.cache_dir is not None and not args.cache_dir.strip():
        raise MoelabError("--cache-dir '' is invalid: expected a folder")
    result = evaluate_run(args.run, data=args.data, device=args.device,
                          cache_dir=args.cache_dir, windows=args.windows)
    if args.json:
        print(json.dumps(to_json(result)))
    else:
        print(f"val loss {result.val_loss:.4f} nats/token, "
              f"{result.bits_per_byte:.4f} bits/byte ({result.windows} windows)")
    return 0


def _eval_tasks(args) -> int:
    from moelab.tasks import parse_task_names
    from moelab.train import evaluate_tasks

    names = parse_task_names(args.tasks)
    if args.data is not None or args.cache_dir is not None:
        raise MoelabError("--data and --cache-dir choose the validation split; they do not "
                          "apply to --tasks")
    result = evaluate_tasks(args.run, names, device=args.device)
    if args.json:
        print(json.dumps(result))
        return 0
    for name, task in result["tasks"].items():
        print(f"{name}: accuracy {task['accuracy']:.3f} [{task['ci_low']:.3f}, "
              f"{task['ci_high']:.3f}] ({task['ci']}, {task['items']} items), chance "
              f"{task['chance']:.3f}: {task['metric']}")
    print(f"step {result['step']}; written to {result['path']}")
    return 0


def _generate(args) -> int:
    from moelab.train import generate_text, load_run

    try:  # bytes that are not UTF-8 reach Python as lone surrogates, which no tokenizer takes
        args.prompt.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise MoelabError(f"--prompt {short_repr(args.prompt)} is invalid: not UTF-8 text (at character "
                          f"{exc.start})") from None
    model, tokenizer = load_run(args.run)
    context = model.cfg.max_seq_len
    if args.max_new_tokens is None:  # the default fits every run: a context-32 run gets 32
        args.max_new_tokens = min(DEFAULT_NEW_TOKENS, context)
    if args.max_new_tokens > context:
        raise MoelabError(f"--max-new-tokens {args.max_new_tokens} is invalid: allowed 0..{context}, "
                          f"the run's context (model.max_seq_len); beyond it the model would "
                          f"only see the last {context} tokens")
    print(generate_text(model, tokenizer, args.prompt, args.max_new_tokens,
                        args.temperature, args.top_k, args.seed))
    return 0


def _export_hf(args) -> int:
    from moelab.train.export import export_hf

    out = export_hf(args.run, args.out)
    print(f"wrote {out} (load it with transformers.AutoModelForCausalLM.from_pretrained)")
    return 0


def _temperature(text: str) -> float:
    """A finite number >= 0; 0 means greedy (argmax), and nan or inf would break sampling."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{short_text(text)} is invalid: must be a finite number >= 0 "
                                         f"(0 = greedy)")
    return value
