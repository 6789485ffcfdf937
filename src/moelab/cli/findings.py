"""``moelab findings``: the findings pages (docs/findings/*.md) rendered from the committed
results (experiments/results/), or, with ``--check``, compared with them."""

from __future__ import annotations

import sys
from pathlib import Path

from moelab.errors import MoelabError

EXIT_STALE = 1
"""``--check``: a page differs from a fresh render."""


def register(subparsers) -> None:
    """Add this module's sub-commands."""
    findings = subparsers.add_parser(
        "findings", help="render the findings pages from the committed results",
        description="Write docs/findings/*.md from experiments/results/ through moelab's own "
                    "analyses: numbers, intervals and verdict words come from the files "
                    "(docs/verdicts.md gives the rules for the words).")
    findings.add_argument("--results", default="experiments/results", metavar="DIR",
                          help="the results folder the pages are generated from")
    findings.add_argument("--out", default="docs/findings", metavar="DIR",
                          help="where the pages are written")
    findings.add_argument("--check", action="store_true",
                          help="write nothing; exit 1 naming each page that differs from a "
                               "fresh render")
    findings.set_defaults(func=_findings)


def _findings(args) -> int:
    from moelab.fileio import atomic_write_text
    from moelab.findings import render_pages, stale_pages

    out = Path(args.out)
    if args.check:
        stale = stale_pages(Path(args.results), out)
        for name in stale:
            print(f"moelab findings: {out / name} differs from a fresh render", file=sys.stderr)
        return EXIT_STALE if stale else 0
    if out.exists() and not out.is_dir():
        raise MoelabError(f"--out {out} is invalid: it is a file; allowed: a folder")
    out.mkdir(parents=True, exist_ok=True)
    for name, text in render_pages(Path(args.results)).items():
        atomic_write_text(out / name, text)
        print(out / name)
    return 0
