"""Sweep grids by name (``moelab sweep-sparsity demo``). A YAML file with the same keys works too.

Keys: see ``moelab.scaling.sweep.SweepGrid``. Every grid derives from one base config preset,
so the points of a sweep differ only in model shape, experts and training length.
"""

from __future__ import annotations

# A laptop sweep: 3 tiny sizes x 4 sparsities (top-1, Switch-weighted: E = 1 (dense), 2, 4, 8;
# every sparsity of a size stores the same FFN parameters) x 2 compute budgets = 24 runs on the
# bundled TinyStories sample, about 2 minutes on 2 idle CPU cores with --jobs 2. Built on the
# `demo` config (same tokenizer).
DEMO = {
    "name": "demo",
    "base": "demo",
    # Tied head pinned: the sweep was measured with it, before the demo preset untied its own.
    "overrides": ["model.tie_embeddings=true", "train.batch_size=16", "model.max_seq_len=64",
                  "train.eval_interval=40",
                  "train.eval_windows=32", "train.warmup_fraction=0.1", "train.progress=false", "train.sample_tokens=0"],
    "sizes": [
        {"name": "s1", "d_model": 48, "n_layers": 2, "n_heads": 2, "n_kv_heads": 2, "d_ff": 192},
        {"name": "s2", "d_model": 64, "n_layers": 2, "n_heads": 2, "n_kv_heads": 2, "d_ff": 256},
        {"name": "s3", "d_model": 96, "n_layers": 3, "n_heads": 4, "n_kv_heads": 4, "d_ff": 384},
    ],
    "sparsities": [0.0, 0.5, 0.75, 0.875],
    "top_k": 1,
    "mode": "fixed_total",
    "flops_budgets": [4e10, 1.2e11],
    "seed": 0,
    "holdout": "S=max",
}

# The sparsity sweep a CPU can fit a law to: the demo's measured recipe (untied head, half the
# steps in warmup, batch 8 x 128, lr 0.01; docs/recipe.md) at 4 sizes (98K to 642K total
# parameters) x 4 sparsities (top-1, Switch-weighted: E = 1, 2, 4, 8 at fixed total FFN
# parameters) x 3 token budgets (400, 1,200 and 3,600 steps: 0.4M to 3.7M tokens, under one
# epoch of the shared TinyStories copy) = 48 runs. Token budgets, not FLOPs budgets: every size
# trains at every D, so the law sees N and D apart, and no run is shorter than 400 steps (a
# first FLOPs-budget grid gave its largest size 125-step runs that no law described; see
# docs/scaling.md). Measured in docs/scaling.md: the runs, the form the data identify and its
# held-out error.
CPU = {
    "name": "cpu",
    "base": "demo",
    "overrides": ["data.source=../shared/data/tinystories", "train.eval_interval=100",
                  "train.progress=false", "train.sample_tokens=0"],
    "sizes": [
        {"name": "s0", "d_model": 32, "n_layers": 2, "n_heads": 2, "n_kv_heads": 2, "d_ff": 128},
        {"name": "s1", "d_model": 48, "n_layers": 2, "n_heads": 2, "n_kv_heads": 2, "d_ff": 192},
        {"name": "s2", "d_model": 64, "n_layers": 3, "n_heads": 4, "n_kv_heads": 4, "d_ff": 256},
        {"name": "s3", "d_model": 96, "n_layers": 3, "n_heads": 4, "n_kv_heads": 4, "d_ff": 384},
    ],
    "sparsities": [0.0, 0.5, 0.75, 0.875],
    "top_k": 1,
    "mode": "fixed_total",
    "token_budgets": [409_600, 1_228_800, 3_686_400],
    "seed": 0,
    "holdout": "S=max",
}

# A GPU grid in the spirit of Abnar et al. (2025), scaled to TinyStories: 4 sizes (5.2M to
# 78.9M total parameters, 2.3M to 78.7M active, by moelab.accounting.count_params; a test checks
# these) x 5 sparsities (top-2: dense, E = 4, 8, 16, 32) x 4 compute budgets (1e16 .. 1e18
# FLOPs) = 80 runs on the `paper` config (bf16, hub data).
PAPER = {
    "name": "paper",
    "base": "paper",
    "overrides": ["train.eval_interval=250", "train.eval_windows=128", "train.checkpoint_interval=500"],
    "sizes": [
        {"name": "m256", "d_model": 256, "n_layers": 4, "n_heads": 4, "n_kv_heads": 4, "d_ff": 1024},
        {"name": "m384", "d_model": 384, "n_layers": 6, "n_heads": 6, "n_kv_heads": 6, "d_ff": 1536},
        {"name": "m512", "d_model": 512, "n_layers": 8, "n_heads": 8, "n_kv_heads": 8, "d_ff": 2048},
        {"name": "m768", "d_model": 768, "n_layers": 8, "n_heads": 12, "n_kv_heads": 12, "d_ff": 3072},
    ],
    "sparsities": [0.0, 0.5, 0.75, 0.875, 0.9375],
    "top_k": 2,
    "mode": "fixed_total",
    "flops_budgets": [1e16, 1e17, 3e17, 1e18],
    "seed": 0,
    "holdout": "S=max",
}

# The smallest sweep that exercises everything (tests): 2 sizes x 2 sparsities x 1 budget.
MICRO = {
    "name": "micro",
    "base": "demo",
    "overrides": ["model.tie_embeddings=true", "train.warmup_fraction=0.05",
                  "model.vocab_size=320", "data.max_train_stories=400", "train.batch_size=4",
                  "model.max_seq_len=32", "train.eval_interval=1", "train.eval_windows=2",
                  "train.progress=false", "train.sample_tokens=0"],
    "sizes": [
        {"name": "a", "d_model": 32, "n_layers": 1, "n_heads": 2, "n_kv_heads": 2, "d_ff": 64},
        {"name": "b", "d_model": 48, "n_layers": 1, "n_heads": 2, "n_kv_heads": 2, "d_ff": 96},
    ],
    "sparsities": [0.0, 0.5],
    "top_k": 1,
    "mode": "fixed_total",
    "token_budgets": [256],
    "seed": 0,
    "holdout": "S=max",
}

SWEEP_PRESETS = {"demo": DEMO, "cpu": CPU, "paper": PAPER, "micro": MICRO}
