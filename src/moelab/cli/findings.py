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
    findings.add_argument("--readme", default="README.md", metavar="FILE",
                          help="the README whose findings summary block is rewritten")
    findings.add_argument("--check", action="store_true",
                          help="write nothing; exit 1 naming each page that differs from a "
                               "fresh render")
    findings.set_defaults(func=_findings)


def _findings(args) -> int:
    from moelab.fileio import atomic_write_text
    from moelab.findings import render, stale_pages, with_summary

    out, readme = Path(args.out), Path(args.readme)
    if not readme.is_file():
        raise MoelabError(f"--readme {readme} is invalid: no such file; allowed: the README "
                          "holding the findings summary block")
    if args.check:
        stale = stale_pages(Path(args.results), out, readme)
        for name in stale:
            shown = readme if name == readme.name else out / name
            print(f"moelab findings: {shown} differs from a fresh render", file=sys.stderr)
        return EXIT_STALE if stale else 0
    rendered = render(Path(args.results))
    new_readme = with_summary(readme.read_text(encoding="utf-8"), rendered.summary)
    if out.exists() and not out.is_dir():
        raise MoelabError(f"--out {out} is invalid: it is a file; allowed: a folder")
    out.mkdir(parents=True, exist_ok=True)
    for name, text in rendered.pages.items():
        atomic_write_text(out / name, text)
        print(out / name)
    atomic_write_text(readme, new_readme)
    print(readme)
    return 0
