"""A run is a folder; this module is the one place that knows its file names.

    config.yaml        the resolved config of the run
    tokenizer.json     a copy of the tokenizer, so the run folder is self-contained
    metrics.jsonl      one JSON object per train-log or eval event: {"kind", "step", "tokens", ...}
                       (the schema: moelab.train.events)
    summary.json       written once, at the end of a complete run (status "complete"); a run
                       that failed or was killed has none (a study records failures in its
                       failures.json)
    samples.txt        a few generations of the final model
    wandb.json         with train.logging.wandb: the W&B run's id, which a resumed run continues
    checkpoints/       see moelab.train.checkpoint
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from moelab.codec import to_json
from moelab.config import Config, build_config, read_raw, save_config, to_dict, without_logging
from moelab.data.tokenizer import Tokenizer, file_sha256
from moelab.errors import MoelabError, short_repr
from moelab.fileio import (
    WriterLock, atomic_write, atomic_write_json, atomic_write_text, check_folder_kind,
    is_bookkeeping, read_json, remove_stale_temporaries,
)
from moelab.train.events import read_events
from moelab.train.run_summary import RunSummary, parse_summary

RUN_KIND = "run"
"""The kind of command that owns a run folder (``moelab.fileio.claim_folder``): train and
finetune; its config.yaml tells it."""


class RunFolder:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    config_path = property(lambda self: self.path / "config.yaml")
    tokenizer_path = property(lambda self: self.path / "tokenizer.json")
    metrics_path = property(lambda self: self.path / "metrics.jsonl")
    summary_path = property(lambda self: self.path / "summary.json")
    samples_path = property(lambda self: self.path / "samples.txt")
    checkpoints_dir = property(lambda self: self.path / "checkpoints")
    wandb_run_path = property(lambda self: self.path / "wandb.json")

    # -- the run's config ---------------------------------------------------------------

    def start(self, config: Config, resume: bool) -> None:
        """Create the folder (or check a resumed one holds the same config) and save config.yaml.

        A folder whose run has neither a checkpoint nor a summary (a first start that failed or
        was killed before its first checkpoint) holds nothing to continue: it starts afresh,
        with any config. A non-empty folder without a run is refused: it is someone's data;
        so is a folder another kind of command owns (a study's, a sweep's).
        """
        check_folder_kind(self.path, RUN_KIND)
        if self.has_progress():
            if not resume:
                raise MoelabError(
                    f"run folder {self.path} already holds a run: pass --resume to continue it "
                    f"or choose another --out"
                )
            self.check_same_config(config)
        elif not self.config_path.exists() and self.path.is_dir():
            others = sorted(p.name for p in self.path.iterdir() if not is_bookkeeping(p))
            if others:
                raise MoelabError(
                    f"run folder {self.path} is not empty and holds no run (no config.yaml; it "
                    f"has {', '.join(others[:3])}{', ...' if len(others) > 3 else ''}): choose "
                    f"another --out or an empty folder"
                )
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MoelabError(f"cannot create run folder {self.path}: {exc.strerror or exc}") from None
        # One writer per run: held until this object goes (the run ends) or the process dies.
        # Taken before the temporaries go: another writer's would be in use.
        self.writer_lock = WriterLock(self.path)
        self._remove_stale_temporaries()
        save_config(config, self.config_path)

    def has_progress(self) -> bool:
        """Whether the folder holds something to continue: a checkpoint or a summary."""
        return (self.checkpoints_dir / "latest.json").is_file() or self.summary_path.is_file()

    def _remove_stale_temporaries(self) -> None:
        """Temporary files a killed write left behind (this process holds the writer lock)."""
        steps = self.checkpoints_dir.glob("step_*") if self.checkpoints_dir.is_dir() else ()
        remove_stale_temporaries(self.path, self.checkpoints_dir, *steps)

    def read_config(self) -> Config:
        if not self.config_path.is_file():
            raise MoelabError(f"{self.path} is not a run folder: it has no config.yaml")
        return build_config(read_raw(self.config_path))

    def check_same_config(self, config: Config) -> None:
        """Refuse to resume with a config that computes something else than the run's."""
        # a run may resume shown otherwise (train.logging)
        saved = without_logging(to_dict(self.read_config()))
        difference = first_difference(saved, without_logging(to_dict(config)))
        if difference:
            key, in_run, in_given = difference
            raise MoelabError(
                f"cannot resume {self.path}: its config differs at {key} ({short_repr(in_run)} in the run, "
                f"{short_repr(in_given)} given); resume with the same config or start a new run"
            )

    def save_tokenizer(self, tokenizer_file: Path) -> None:
        atomic_write(self.tokenizer_path, lambda tmp: shutil.copyfile(tokenizer_file, tmp))

    def check_same_tokenizer(self, cache_tokenizer: Tokenizer, remedy: str) -> None:
        """Refuse a data cache whose tokenizer is not the run's (the cache was rebuilt, say):
        its token ids mean other text than the ones the run's weights were trained on."""
        if not self.tokenizer_path.is_file():
            raise MoelabError(f"cannot check the tokenizer of run {self.path}: "
                              f"{self.tokenizer_path} is missing")
        if file_sha256(self.tokenizer_path) != cache_tokenizer.sha256():
            raise MoelabError(
                f"the data cache {cache_tokenizer.path.parent} holds another tokenizer than the "
                f"one run {self.path} was trained with ({self.tokenizer_path}): {remedy}"
            )

    # -- metrics ------------------------------------------------------------------------

    def append_metrics(self, event: dict[str, Any]) -> None:
        """Append one event as a line (flushed at once, so a killed run keeps what it logged)."""
        try:
            with open(self.metrics_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(event) + "\n")
        except OSError as exc:
            raise MoelabError(f"cannot write {self.metrics_path}: {exc.strerror or exc}") from None

    def read_metrics(self) -> list[dict[str, Any]]:
        """Every event as logged (``moelab.train.events``: a torn last line of a killed run is
        skipped; any other line that is not an event is a one-line error)."""
        return [event.fields for event in read_events(self.metrics_path).events]

    def truncate_metrics(self, last_step: int) -> None:
        """Keep only events up to ``last_step``: a resumed run then logs exactly what an
        uninterrupted run would have."""
        kept = [e for e in self.read_metrics() if e["step"] <= last_step]
        atomic_write_text(self.metrics_path, "".join(json.dumps(e) + "\n" for e in kept))

    # -- summary and samples ------------------------------------------------------------

    def write_summary(self, summary: RunSummary) -> None:
        atomic_write_json(self.summary_path, to_json(summary))

    def read_summary(self) -> dict[str, Any] | None:
        """The summary, or None when the run has not finished; MoelabError when unreadable."""
        if not self.summary_path.is_file():
            return None
        try:
            summary = read_json(self.summary_path)
        except (OSError, ValueError) as exc:
            raise MoelabError(f"{self.summary_path} is corrupt ({exc}): resume the run "
                              f"(--resume) to write it again from its last checkpoint") from None
        if not isinstance(summary, dict):
            raise MoelabError(f"{self.summary_path} is corrupt (not a JSON object): resume the "
                              f"run (--resume) to write it again from its last checkpoint")
        return summary

    def summary(self) -> RunSummary | None:
        """The typed summary (``moelab.train.run_summary``), or None when the run has not finished;
        a damaged one is a one-line error naming the file."""
        record = self.read_summary()
        return None if record is None else parse_summary(record, self.summary_path)

    def is_complete(self) -> bool:
        """Whether the run finished: its summary says so. An unreadable summary is not
        complete, so resuming recomputes it from the final checkpoint."""
        try:
            summary = self.read_summary()
        except MoelabError:
            return False
        return summary is not None and summary.get("status") == "complete"

    def write_samples(self, text: str) -> None:
        atomic_write_text(self.samples_path, text)


def first_difference(old: Any, new: Any, prefix: str = "") -> tuple[str, Any, Any] | None:
    """(dotted key, old value, new value) of the first difference of two nested dicts, or None
    when they are equal. A key missing on one side shows as None there."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in list(old) + [k for k in new if k not in old]:
            found = first_difference(old.get(key), new.get(key), f"{prefix}{key}.")
            if found:
                return found
        return None
    return None if old == new else (prefix[:-1], old, new)
