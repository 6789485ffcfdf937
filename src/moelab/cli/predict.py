"""Sub-commands that predict runs not yet trained and score them once trained: ``predict``
(a sweep's law or IsoFLOP parabolas extrapolated to target cells, with prediction intervals)
and ``score`` (measured run folders against a prediction file). The maths is
``moelab.scaling.prediction`` and ``moelab.scaling.prediction_score``; this module parses and
prints, and imports them when a handler runs (numpy, scipy, matplotlib)."""

from __future__ import annotations

import json
from pathlib import Path

from moelab.cli import bounded_int, positive_int, seed_int
from moelab.errors import MoelabError, short_repr
from moelab.fileio import atomic_write_json, refuse_overwriting_inputs

FORMS = ("sparsity", "sparsity-interaction", "sparsity-additive", "sparsity-effective-size",
         "chinchilla", "isoflop-parabola")
"""Spelled out (the laws' module imports scipy); a test checks them against the laws."""
MAX_BOOTSTRAP = 10_000


def register(subparsers) -> None:
    predict = subparsers.add_parser(
        "predict", help="predict the loss of untrained cells from a sweep, with 90%% prediction "
                        "intervals",
        description="Fit a law (or the IsoFLOP parabolas) to a sweep's runs and predict target "
                    "cells at a new budget: the mean loss of --seeds new runs with a 90%% "
                    "prediction interval (refits over the seeds' wsd families, the fit's misfit, "
                    "the seeds' noise), each size's best sparsity and the compute-optimal "
                    "(N*, S*). docs/explanation/prediction.md, 'Predicting your next budget'.",
    )
    predict.add_argument("sweep", metavar="SWEEP|FIT.json",
                         help="a sweep folder (its results.csv), or a fit file of moelab fit "
                              "--out (then: parameters from its bootstrap only, no misfit, "
                              "noise only with --noise-sd, cells as N:S)")
    predict.add_argument("--form", choices=FORMS, default="sparsity-additive",
                         help="the law or isoflop-parabola (default sparsity-additive)")
    predict.add_argument("--flops", type=float, metavar="C",
                         help="the targets' FLOPs budget (a FLOPs sweep); also gives the "
                              "compute-optimal model at C")
    predict.add_argument("--tokens", type=float, metavar="D",
                         help="the targets' token budget (a tokens sweep)")
    predict.add_argument("--cell", action="append", default=[], metavar="SIZE:S",
                         help="a target: a size of the sweep (or a total parameter count) and a "
                              "sparsity, e.g. s2:0.875 (repeatable)")
    predict.add_argument("--seeds", type=positive_int, default=3, metavar="M",
                         help="seeds each target will be trained with (default 3)")
    predict.add_argument("--exclude", action="append", default=[], metavar="COLUMN=VALUE",
                         help="leave out the sweep's runs whose results.csv COLUMN is VALUE "
                              "(repeatable), e.g. size=s3")
    predict.add_argument("--bootstrap", type=bounded_int(MAX_BOOTSTRAP), default=200, metavar="R",
                         help="refits over resampled seed families (default 200)")
    predict.add_argument("--starts", type=positive_int, default=None, metavar="K",
                         help="a law's start grid: a seeded subset of K starts")
    predict.add_argument("--rollout", action="store_true",
                         help="first leave out the sweep's largest budget and predict it from "
                              "the rest: the error found beyond the predicted sd widens every "
                              "interval (an extrapolation term; needs >= 3 budgets)")
    predict.add_argument("--noise-sd", type=float, default=None, metavar="SD",
                         help="with FIT.json: the run-to-run sd of one run's loss (nats)")
    predict.add_argument("--noise-df", type=positive_int, default=None, metavar="DF",
                         help="with --noise-sd: its degrees of freedom")
    predict.add_argument("--seed", type=seed_int, default=0, help="bootstrap seed")
    predict.add_argument("--command", dest="train_command", default="", metavar="TEXT",
                         help="the command that will train the targets (recorded, for a "
                              "pre-registered prediction)")
    predict.add_argument("--out", metavar="PREDICTION.json", help="write the prediction here")
    predict.add_argument("--json", action="store_true", help="print the prediction as JSON")
    predict.set_defaults(func=_predict)

    score = subparsers.add_parser(
        "score", help="score trained runs against a prediction file",
        description="Per predicted cell, the mean best validation loss of the runs found in "
                    "RUNS against the prediction: inside or outside its interval, the "
                    "standardised error; coverage over cells; each size's measured best "
                    "sparsity. Writes SCORE.json, SCORE.md and a figure beside it.",
    )
    score.add_argument("prediction", metavar="PREDICTION.json")
    score.add_argument("runs", metavar="RUNS", nargs="+",
                       help="run folders, or folders holding them (a sweep folder)")
    score.add_argument("--out", metavar="SCORE.json", required=True,
                       help="the score record; SCORE.md and SCORE.png are written beside it")
    score.set_defaults(func=_score)


def _predict(args) -> int:
    from moelab.codec import to_json
    from moelab.scaling.prediction import predict
    from moelab.scaling.prediction_data import read_sweep_runs
    from moelab.scaling.prediction_score import format_prediction, target_cells
    from moelab.scaling.rollout import extrapolation, rollout

    if args.out:
        refuse_overwriting_inputs(args.out, "--out", [str(Path(args.sweep) / "results.csv")])
    if (args.flops is None) == (args.tokens is None):
        raise MoelabError("give exactly one of --flops C or --tokens D: the targets' budget")
    budget = args.flops if args.flops is not None else args.tokens
    if not budget > 0:
        raise MoelabError(f"budget {budget} is invalid: must be a positive number")
    if Path(args.sweep).is_file() and args.sweep.endswith(".json"):
        return _predict_from_fit(args, budget)
    if args.noise_sd is not None or args.noise_df is not None:
        raise MoelabError("--noise-sd and --noise-df go with a FIT.json: a sweep's noise is "
                          "estimated from its seeds")
    runs = read_sweep_runs(args.sweep, args.exclude)
    if runs.budget_kind != ("C" if args.flops is not None else "D"):
        raise MoelabError(f"{args.sweep}'s budgets are {'FLOPs' if runs.budget_kind == 'C' else 'tokens'}: "
                          f"give {'--flops' if runs.budget_kind == 'C' else '--tokens'}")
    cells = target_cells(runs, args.cell, budget)
    extra = None
    if args.rollout:
        extra = extrapolation(rollout(runs, args.form, sweep=str(args.sweep),
                                      bootstrap=args.bootstrap, seed=args.seed,
                                      max_starts=args.starts))
    record = predict(runs, args.form, cells, flops=[budget] if args.flops is not None else [],
                     seeds=args.seeds, bootstrap=args.bootstrap, seed=args.seed,
                     max_starts=args.starts, source=str(args.sweep), excluded=args.exclude,
                     extrapolation=extra)
    record.command = args.train_command
    if args.out:
        atomic_write_json(args.out, to_json(record))
    print(json.dumps(to_json(record), indent=2) if args.json else format_prediction(record))
    return 0


def _predict_from_fit(args, budget: float) -> int:
    import hashlib

    from moelab.codec import to_json
    from moelab.scaling.fit_record import load_fit
    from moelab.scaling.prediction import predict_from_fit
    from moelab.scaling.prediction_score import format_prediction, numeric_cells

    for flag, value in (("--exclude", args.exclude), ("--rollout", args.rollout)):
        if value:
            raise MoelabError(f"{flag} needs a sweep folder, not a fit file")
    if args.noise_sd is not None and not args.noise_sd >= 0:
        raise MoelabError(f"--noise-sd {args.noise_sd} is invalid: must be a number >= 0")
    if (args.noise_sd is None) != (args.noise_df is None):
        raise MoelabError("give --noise-sd SD and --noise-df DF together")
    fit = load_fit(args.sweep)
    shared = fit.shared_fraction or 0.0
    cells = numeric_cells(args.cell, budget, shared, flops=args.flops is not None)
    record = predict_from_fit(
        fit, cells, flops=[budget] if args.flops is not None else [], seeds=args.seeds,
        source=str(args.sweep), data_hash=hashlib.sha256(Path(args.sweep).read_bytes()).hexdigest(),
        noise_sd=args.noise_sd, noise_df=args.noise_df or 0)
    record.command = args.train_command
    if args.out:
        atomic_write_json(args.out, to_json(record))
    print(json.dumps(to_json(record), indent=2) if args.json else format_prediction(record))
    return 0


def _score(args) -> int:
    from moelab.codec import from_json, to_json
    from moelab.fileio import atomic_write_text, read_json
    from moelab.scaling.prediction import Prediction
    from moelab.runs.measured import measured_runs
    from moelab.scaling.prediction_score import render, score, write_score_figure

    out = Path(args.out)
    if out.suffix != ".json":
        raise MoelabError(f"--out {short_repr(args.out)} is invalid: allowed a path ending .json")
    refuse_overwriting_inputs(args.out, "--out", [args.prediction])
    prediction = from_json(Prediction, read_json(args.prediction))
    for folder in args.runs:
        if not Path(folder).is_dir():
            raise MoelabError(f"RUNS {short_repr(folder)} is invalid: not a folder")
    measured = measured_runs([Path(folder) for folder in args.runs])
    record = score(prediction, measured, source=args.prediction)
    atomic_write_json(out, to_json(record))
    atomic_write_text(out.with_suffix(".md"), render(record))
    write_score_figure(record, out.with_suffix(".png"))
    print(render(record))
    return 0
