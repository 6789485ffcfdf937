"""The committed results a findings page reads: experiments/results/, each file read once.

The findings are rebuilt from these files alone, as a report is rebuilt from its folder: a page
asks the ``ResultsRoot`` for a file by its path under the root and gets it parsed, cached, with a
one-line error naming a missing or malformed file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from moelab.errors import MoelabError
from moelab.fileio import read_json

SeedLosses = dict[int, float]
"""{seed: best validation loss} of one arm."""


class ResultsRoot:
    """experiments/results/ (or a copy of it): JSON files by relative path, read once."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise MoelabError(f"{self.root} is not a folder: give the results folder the "
                              "findings are generated from (experiments/results)")
        self._cache: dict[str, Any] = {}

    def json(self, relative: str) -> Any:
        """The parsed JSON file ``root/relative``."""
        if relative not in self._cache:
            path = self.root / relative
            try:
                self._cache[relative] = read_json(path)
            except FileNotFoundError:
                raise MoelabError(f"{path} is missing: the findings need it (it is committed "
                                  "with moelab; restore it with git)") from None
            except (OSError, ValueError) as exc:
                raise MoelabError(f"{path} is not readable JSON: {exc}") from None
        return self._cache[relative]


def seed_losses(by_seed: dict[str, Any], key: str | None = None) -> SeedLosses:
    """{seed: loss} from a JSON mapping of seed strings to a loss (or to a record holding it at
    ``key``)."""
    return {int(seed): float(value[key] if key else value) for seed, value in by_seed.items()}


def arm_losses(arms: dict[str, Any], arm: str) -> SeedLosses:
    """{seed: best validation loss} of one arm of a stored study's ``arms`` (its ``runs``)."""
    return {int(run["seed"]): float(run["best_val_loss"]) for run in arms[arm]["runs"]}
