"""Data pipeline speed: tokenizer training, encoding throughput, cache reuse, batch-loader cost.

    .venv/bin/python benchmarks/data_pipeline.py [--tinystories DIR] [--repeats N]
    .venv/bin/python benchmarks/data_pipeline.py --smoke --out /tmp/data_pipeline.json

Everything is measured side by side in one process on the shared 13 MB TinyStories copy
(default: ../shared/data/tinystories next to the repository). The machine is shared and
noisy, so each timing is the best of ``--repeats`` runs; read the ratios first. Raw results go
to benchmarks/results/data_pipeline.json.

- tokenizer training: byte-level BPE at the demo (2048) and default (4096) vocab sizes;
- encoding: Hugging Face ``encode_batch`` (its thread pool, all cores) against the pipeline's
  word-cache encoder in one process (cold: empty cache; warm: second pass) and on one worker
  process per core (``encode_batches``, what prepare_data runs), all checked to give equal tokens;
- prepare_data end to end on the folder (fresh cache, then reuse with full sha256 checks);
- loader: ``TrainBatches.next()`` at the demo preset's batch against one demo training step
  (forward, backward, AdamW) of the demo MoE model from ``moelab.model``.

``--smoke``: the bundled sample's first 200 stories, one vocab size of 320, one repeat, the
demo model at toy sizes.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from moelab.config import DataConfig, load_config
from moelab.data import Tokenizer, TrainBatches, prepare_data
from moelab.data.encoding import WordCacheEncoder, available_cores, encode_batches
from moelab.data.source_record import BATCH_STORIES
from moelab.data.sources import resolve_source
from moelab.data.story_text import split_bytes
from moelab.data.tokenizer import train_tokenizer
from moelab.fileio import atomic_write_json
from common import add_output_arguments, cpu_seconds, machine, parse_checked
from train_step import BENCHMARKED_DEMO, SMOKE_SHAPES  # the shapes BENCHMARKS.md measured

REPO = Path(__file__).resolve().parents[1]
SMOKE_DATA = ["data.source=sample", "data.max_train_stories=200"]
VOCAB_SIZES = (2048, 4096)


def best_time(fn, repeats: int) -> tuple[float, object]:
    """Smallest wall time of ``repeats`` calls (the least disturbed by other processes)."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def best_wall_and_cpu(fn, repeats: int) -> tuple[float, float, object]:
    """Smallest wall time and smallest CPU time of ``repeats`` calls, and the last result.

    CPU seconds barely depend on how busy the machine is; wall seconds do."""
    best_wall, best_cpu, result = float("inf"), float("inf"), None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), cpu_seconds()
        result = fn()
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, cpu_seconds() - cpu)
    return best_wall, best_cpu, result


def hf_encode_batch(tokenizer: Tokenizer, stories: list[str]) -> np.ndarray:
    eot = [tokenizer.eot_id]
    return np.concatenate([np.array(ids + eot, dtype=np.uint16)
                           for ids in tokenizer.encode_batch(stories)])


def bench_tokenizer_and_encoding(data_cfg: DataConfig, work: Path, repeats: int,
                                 vocab_sizes: tuple[int, ...] = VOCAB_SIZES) -> dict:
    train, _ = resolve_source(data_cfg).load()
    stories = [story for batch in train.read_batches() for story in batch]
    megabytes = split_bytes(stories) / 1e6
    results = {"train_megabytes": megabytes, "train_stories": len(stories), "tokenizer_train_s": {}}
    for vocab_size in vocab_sizes:
        wall, cpu, _ = best_wall_and_cpu(
            lambda size=vocab_size: train_tokenizer(train.read_batches(), size,
                                                    work / f"tok{size}.json", "bench"), 1)
        results["tokenizer_train_s"][vocab_size] = {"wall": wall, "cpu": cpu}
        print(f"tokenizer training, vocab {vocab_size}: {wall:.1f} s wall, {cpu:.1f} s CPU")

    tokenizer = Tokenizer(work / f"tok{vocab_sizes[0]}.json")
    chunks = [stories[i : i + BATCH_STORIES] for i in range(0, len(stories), BATCH_STORIES)]
    warm_encoder = WordCacheEncoder(tokenizer, np.uint16)
    warm_encoder.encode_stories(stories)
    # Hugging Face's thread pool goes last: once started, its spinning threads slow down
    # whatever runs after it in the process (tokenizer training took 2x the CPU).
    encoders = {
        "word_cache_cold": lambda: WordCacheEncoder(tokenizer, np.uint16).encode_stories(stories),
        "word_cache_warm": lambda: warm_encoder.encode_stories(stories),
        "word_cache_parallel": lambda: np.concatenate(
            [ids for _, ids in encode_batches(tokenizer, chunks, np.uint16)]),
        "hf_encode_batch": lambda: hf_encode_batch(tokenizer, stories),
    }
    timings = {name: best_wall_and_cpu(fn, repeats) for name, fn in encoders.items()}
    reference = timings["hf_encode_batch"][2]  # tokens as Hugging Face encodes them
    assert all(np.array_equal(reference, tokens) for _, _, tokens in timings.values())
    results["encode_workers"] = available_cores()
    results["encode_mb_per_s"] = {name: megabytes / wall for name, (wall, _, _) in timings.items()}
    results["encode_mb_per_cpu_s"] = {name: megabytes / cpu for name, (_, cpu, _) in timings.items()}
    results["tokens_equal"] = True
    for name, rate in results["encode_mb_per_s"].items():
        print(f"encode {name:<20} {rate:6.2f} MB/s wall, "
              f"{results['encode_mb_per_cpu_s'][name]:6.2f} MB per CPU second")
    return results


def bench_prepare(data_cfg: DataConfig, work: Path, vocab_size: int = VOCAB_SIZES[0]) -> dict:
    cfg = replace(data_cfg, cache_dir=str(work / "cache"))
    fresh_s, prepared = best_time(lambda: prepare_data(cfg, vocab_size, progress=False), 1)
    reuse_s, _ = best_time(lambda: prepare_data(cfg, vocab_size, progress=False), 3)
    print(f"prepare_data (vocab {vocab_size}): fresh {fresh_s:.1f} s, reuse {reuse_s:.3f} s")
    return {"prepare_fresh_s": fresh_s, "prepare_reuse_s": reuse_s,
            "train_tokens": prepared.train.num_tokens,
            "train_bytes_per_token": prepared.train.bytes_per_token,
            "valid_bytes_per_token": prepared.valid.bytes_per_token}


def bench_loader_vs_step(repeats: int, overrides: tuple[str, ...] = ()) -> dict:
    from moelab.model import Transformer

    config = load_config("demo", [*BENCHMARKED_DEMO, *overrides])
    torch.manual_seed(0)
    seq_len, batch_size = config.model.max_seq_len, config.train.batch_size
    prepared = prepare_data(config.data, config.tokenizer_vocab_size, progress=False)
    batches = TrainBatches(prepared.train.tokens, seq_len, batch_size, seed=0)
    model = Transformer(config.model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.train.lr)

    def train_step() -> None:
        x_BT, y_BT = batches.batch_at(0)
        loss = model(x_BT, y_BT).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    def load_batches(n: int = 100) -> None:
        for _ in range(n):
            batches.next()

    train_step()  # warm up allocator and kernels
    step_s, _ = best_time(train_step, repeats if overrides else max(repeats, 5))
    loader_s, _ = best_time(load_batches, repeats)
    loader_s /= 100
    print(f"demo train step {step_s * 1e3:.1f} ms, loader {loader_s * 1e3:.3f} ms "
          f"= {100 * loader_s / step_s:.2f} % of a step")
    return {"demo_step_ms": step_s * 1e3, "loader_ms": loader_s * 1e3,
            "loader_fraction_of_step": loader_s / step_s,
            "batch": [batch_size, seq_len], "model": "moelab.model.Transformer, demo preset (MoE 4x top-2)"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tinystories", type=Path, default=REPO.parent / "shared" / "data" / "tinystories")
    parser.add_argument("--repeats", type=int, default=3)
    add_output_arguments(parser, "data_pipeline")
    args = parse_checked(parser, argv)
    smoke = (*SMOKE_SHAPES, *SMOKE_DATA) if args.smoke else ()
    data_cfg = (load_config("demo", list(smoke)).data if args.smoke
                else DataConfig(source=str(args.tinystories)))
    vocab_sizes = (320,) if args.smoke else VOCAB_SIZES
    repeats = 1 if args.smoke else args.repeats
    results = {"machine": machine(),
               "load_average_1min_before": os.getloadavg()[0]}  # other users of the machine
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        os.environ["MOELAB_CACHE"] = str(work / "moelab-cache")
        results.update(bench_prepare(data_cfg, work, vocab_sizes[0]))
        results.update(bench_loader_vs_step(repeats, smoke))
        results.update(bench_tokenizer_and_encoding(data_cfg, work, repeats, vocab_sizes))
    results["load_average_1min_after"] = os.getloadavg()[0]
    atomic_write_json(args.out, results)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
