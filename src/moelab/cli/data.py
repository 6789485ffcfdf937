"""``moelab prepare-data``: build (or reuse) the tokenizer and token caches of a data source."""

from __future__ import annotations

import json

from moelab.config import DataConfig, ModelConfig
from moelab.fileio import check_folder_kind, claim_folder, refuse_overwriting_inputs

DATA_CACHE_KIND = "prepare-data"
"""The kind of command that owns a --out cache folder (``moelab.fileio.claim_folder``)."""


def register(subparsers) -> None:
    """Add this module's sub-commands."""
    parser = subparsers.add_parser(
        "prepare-data",
        help="train the BPE tokenizer and build the token caches of a data source",
        description="Train the byte-level BPE tokenizer and build the token caches of a data "
        "source (reused when its inputs are unchanged); print stories, bytes and tokens per split.",
    )
    parser.add_argument(
        "--source", default="sample", metavar="sample|tinystories|hf|hf:NAME|PATH",
        help="'sample' (bundled TinyStories), 'tinystories' (what the CPU presets read: the "
        "local copy $MOELAB_DATA names, else roneneldan/TinyStories from the hub, "
        "downloaded once), 'hf' (the hub), 'hf:NAME' (any Hugging Face dataset, streamed), "
        "a folder with train.txt and valid.txt, a datasets save_to_disk folder, or one "
        ".txt/.jsonl/.parquet/.arrow file (default: sample)",
    )
    parser.add_argument("--text-field", metavar="COLUMN",
                        help="data.text_field: the column holding the text of a dataset source "
                        "(default: text, else story)")
    parser.add_argument("--hf-config", metavar="NAME", help="data.hf_config: the configuration "
                        "of an hf:NAME dataset")
    parser.add_argument("--train-split", default=DataConfig().train_split, metavar="SPLIT",
                        help="data.train_split (default: train)")
    parser.add_argument("--valid-split", metavar="SPLIT", help="data.valid_split (default: "
                        "validation, valid or test, else a slice held out of the training split)")
    parser.add_argument("--max-train-stories", type=int, metavar="N",
                        help="data.max_train_stories: read only the first N training documents")
    parser.add_argument(
        "--vocab-size", type=int, default=ModelConfig().vocab_size, metavar="N",
        help=f"BPE vocabulary size (default: {ModelConfig().vocab_size})",
    )
    parser.add_argument("--out", metavar="DIR",
                        help="cache folder (data.cache_dir); each input gets a sub-folder "
                        "(default: the one training reads, $MOELAB_CACHE/data or "
                        "~/.cache/moelab/data)")
    parser.add_argument("--valid-fraction", type=float, default=DataConfig().valid_fraction,
                        metavar="F", help="validation share held out of a single file")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.set_defaults(func=prepare_data_command)


def prepare_data_command(args) -> int:
    from moelab.data import prepare_data  # here: the data pipeline imports torch, --help must not
    from moelab.data.sources import check_settings_read

    refuse_overwriting_inputs(args.out, "--out", [args.source])
    if args.out is not None:
        check_folder_kind(args.out, DATA_CACHE_KIND)
    data_cfg = DataConfig(source=args.source, cache_dir=args.out,
                          valid_fraction=args.valid_fraction, text_field=args.text_field,
                          hf_config=args.hf_config, train_split=args.train_split,
                          valid_split=args.valid_split, max_train_stories=args.max_train_stories)
    data_cfg.validate()
    check_settings_read(data_cfg)
    prepared = prepare_data(data_cfg, args.vocab_size, progress=not args.no_progress)
    if args.out is not None:  # claimed once it holds a cache: a refused source leaves nothing
        claim_folder(args.out, DATA_CACHE_KIND)
    summary = data_summary(prepared)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(summary_table(summary, str(prepared.cache_dir)))
    return 0


def data_summary(prepared) -> dict:
    """The JSON of ``prepare-data``; bytes_per_token is the training split's."""
    return {
        "vocab_size": prepared.tokenizer.vocab_size,
        "bytes_per_token": prepared.train.bytes_per_token,
        "splits": {
            split.name: {"stories": split.stories, "bytes": split.bytes, "tokens": split.num_tokens}
            for split in (prepared.train, prepared.valid)
        },
    }


def summary_table(summary: dict, cache_dir: str) -> str:
    lines = [
        f"cache       {cache_dir}",
        f"vocab size  {summary['vocab_size']}",
        "",
        f"{'split':<6} {'stories':>10} {'bytes':>14} {'tokens':>13} {'bytes/token':>12}",
    ]
    for name, counts in summary["splits"].items():
        lines.append(
            f"{name:<6} {counts['stories']:>10,} {counts['bytes']:>14,} {counts['tokens']:>13,} "
            f"{counts['bytes'] / counts['tokens']:>12.3f}"
        )
    return "\n".join(lines)
