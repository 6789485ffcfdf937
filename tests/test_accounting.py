"""Parameter and FLOP counts against hand counts, the built model, and brute-force matching."""

from __future__ import annotations

import dataclasses
import json

import pytest

from moelab.accounting import count_params, criterion_value, flops_per_token, match_dense
from moelab.config import ModelConfig, MoEConfig, load_config
from moelab.errors import ConfigError

# Hand counts. Dense, GQA, untied: V=100, d=16, L=2, 4 heads of 4, 2 kv heads, d_ff=40.
#   embedding 100*16 = 1600, output 1600
#   per layer: wq 16*16=256, wk 16*8=128, wv 128, wo 256 -> 768; SwiGLU 3*16*40 = 1920;
#              two norms 32 -> 2720; two layers 5440
#   final norm 16 -> total 1600 + 1600 + 5440 + 16 = 8656
DENSE_GQA_UNTIED = ModelConfig(
    vocab_size=100, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=40,
    max_seq_len=32, tie_embeddings=False,
)
# MoE, tied: V=100, d=16, L=2, 4 heads, 4 kv heads, E=4, k=2, d_expert=8.
#   embedding 1600 (shared with the head)
#   per layer: attention 4*256 = 1024; router 16*4 = 64; experts 4 * 3*16*8 = 1536; norms 32
#              -> 2656; two layers 5312
#   final norm 16 -> total 1600 + 5312 + 16 = 6928
#   active skips 2 experts (384 each) in 2 layers: 6928 - 1536 = 5392
MOE_TIED = ModelConfig(
    vocab_size=100, d_model=16, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=40,
    max_seq_len=32, tie_embeddings=True, moe=MoEConfig(num_experts=4, top_k=2, d_expert=8),
)

# MOE_TIED + 2 shared experts of d_shared=4: per layer + 3*16*(2*4) = 384 shared, all active.
#   total 6928 + 2 * 384 = 7696; active 5392 + 768 = 6160 (= per layer: attention 1024 + router
#   64 + shared 384 + k=2 routed 2 * 384 + norms 32 = 2272, two layers 4544, + embedding 1600
#   + final norm 16)
MOE_SHARED = dataclasses.replace(
    MOE_TIED, moe=MoEConfig(num_experts=4, top_k=2, d_expert=8, num_shared_experts=2, d_shared=4))


def test_dense_gqa_untied_hand_count():
    counts = count_params(DENSE_GQA_UNTIED)
    assert counts.total == 8656
    assert counts.active == 8656
    assert counts.embedding == 3200
    assert counts.non_embedding == 5456


def test_moe_tied_hand_count():
    counts = count_params(MOE_TIED)
    assert counts.total == 6928
    assert counts.active == 5392
    assert counts.non_embedding == 5328
    assert counts.active_non_embedding == 3792


def test_shared_experts_hand_count():
    counts = count_params(MOE_SHARED)
    assert counts.total == 7696
    assert counts.active == 6160 == 1600 + 2 * (1024 + 64 + 384 + 2 * 384 + 32) + 16
    assert counts.active_non_embedding == 6160 - 1600
    # d_shared null: each shared expert is as wide as a routed one (3*16*8 = 384 each).
    one_wide = dataclasses.replace(MOE_TIED, moe=MoEConfig(num_experts=4, top_k=2, d_expert=8,
                                                           num_shared_experts=1))
    assert count_params(one_wide).total == 6928 + 2 * 384
    assert count_params(one_wide).active == 5392 + 2 * 384


def test_fine_grained_experts_keep_expert_params_and_grow_the_router():
    # Granularity 2: E=8 experts of d_expert 4, k=4. Experts 8 * 3*16*4 = 1536 per layer as
    # before, active routed 4 * 192 = 768 as before; the router is 16*8 = 128 (+64 per layer).
    split = dataclasses.replace(MOE_TIED, moe=MOE_TIED.moe.fine_grained(2))
    assert (split.moe.num_experts, split.moe.top_k, split.moe.d_expert) == (8, 4, 4)
    counts = count_params(split)
    assert counts.total == 6928 + 2 * 64
    assert counts.active == 5392 + 2 * 64
    # Shared experts keep their width (d_shared resolved from the old d_expert).
    shared = MoEConfig(num_experts=4, top_k=2, d_expert=8, num_shared_experts=1)
    assert shared.fine_grained(4).shared_hidden == 8
    with pytest.raises(ConfigError, match="granularity=3 is invalid: must be a positive "
                                          "integer dividing d_expert"):
        MOE_TIED.moe.fine_grained(3)


def test_match_dense_counts_the_shared_experts():
    # Active target 6160: dense per layer 1024 + 48 d_ff + 32, so 2 * (1056 + 48 d_ff) + 1616
    # = 6160 at d_ff = 25.33; step 1 gives 25 (nearest). Total 7696: 3728 + 96 d_ff, d_ff = 41.33 -> 41.
    assert match_dense(MOE_SHARED, "active", step=1).config.d_ff == 25
    assert match_dense(MOE_SHARED, "total", step=1).config.d_ff == 41


def test_flops_hand_count():
    flops = flops_per_token(MOE_TIED)
    assert flops.six_n == 6 * 5392
    # 6 * active non-embedding + attention 6 * L * n_ctx * d + unembedding 6 * d * V
    assert flops.kaplan == 6 * 3792 + 6 * 2 * 32 * 16 + 6 * 16 * 100
    assert flops_per_token(MOE_TIED, seq_len=64).kaplan == flops.kaplan + 6 * 2 * 32 * 16


def test_palm_count_is_eq_9s_attention_by_hand():
    # Per token and layer, forward: QK^T is n_ctx dot products of length d (2 n_ctx d FLOPs) and
    # AV another 2 n_ctx d; x 3 for forward + backward = 12 n_ctx d per layer, the PaLM count
    # Abnar et al.'s eq. 9 uses. MOE_TIED: L = 2, n_ctx = 32, d = 16, V = 100, active
    # non-embedding 3792: 22752 + 12288 + 9600 = 44640.
    flops = flops_per_token(MOE_TIED)
    assert flops.palm == 6 * 3792 + 12 * 2 * 32 * 16 + 6 * 16 * 100 == 44_640
    assert flops.palm - flops.kaplan == 6 * 2 * 32 * 16  # only the attention term differs
    assert flops_per_token(MOE_TIED, seq_len=64).palm == flops.palm + 12 * 2 * 32 * 16
    # The budget count is neither: 6 N_active with embeddings, no attention over the context.
    assert flops.six_n == 6 * 5392


def test_dense_model_flop_counts_by_hand():
    # A dense model of d 8, 1 layer, d_ff 16, vocab 10, context 4, tied embeddings, 2 heads:
    # attention 4 * 8 * 8 = 256, FFN 3 * 8 * 16 = 384, norms 2 * 8 + final 8, embedding 80.
    # Non-embedding 256 + 384 + 16 + 8 = 664; total 744.
    cfg = dataclasses.replace(MOE_TIED, moe=None, d_model=8, n_layers=1, n_heads=2, n_kv_heads=2,
                              d_ff=16, vocab_size=10, max_seq_len=4)
    assert count_params(cfg).total == 744
    flops = flops_per_token(cfg)
    assert flops.six_n == 6 * 744
    assert flops.kaplan == 6 * 664 + 6 * 1 * 4 * 8 + 6 * 8 * 10 == 4656
    assert flops.palm == 6 * 664 + 12 * 1 * 4 * 8 + 6 * 8 * 10 == 4848


@pytest.mark.parametrize(
    "cfg",
    [
        DENSE_GQA_UNTIED,
        MOE_TIED,
        dataclasses.replace(MOE_TIED, tie_embeddings=False, n_kv_heads=1),
        dataclasses.replace(MOE_TIED, moe=MoEConfig(num_experts=8, top_k=1, d_expert=12)),
        MOE_SHARED,
    ],
    ids=["dense-gqa-untied", "moe-tied", "moe-untied-mqa", "moe-e8-top1", "moe-shared"],
)
def test_counts_equal_built_model(cfg):
    from moelab.model import Transformer

    model = Transformer(cfg)
    total = sum(p.numel() for p in model.parameters())
    counts = count_params(cfg)
    assert counts.total == total
    embedding = model.tok_embeddings.weight.numel()
    if not cfg.tie_embeddings:
        embedding += model.output.weight.numel()
    assert counts.embedding == embedding
    if cfg.moe is not None:
        experts = [p for n, p in model.named_parameters() if n.endswith(("w1", "w2", "w3"))
                   and "feed_forward" in n]  # routed only: shared ones end in .weight
        per_expert = sum(p.numel() for p in experts) // (cfg.n_layers * cfg.moe.num_experts)
        skipped = cfg.n_layers * (cfg.moe.num_experts - cfg.moe.top_k) * per_expert
        assert counts.active == total - skipped


@pytest.mark.parametrize("preset", ["demo", "paper"])
@pytest.mark.parametrize("step", [8, 32, 64])
def test_matching_on_flops_gives_the_active_matched_model(preset, step):
    # Why a study has no dense_flops arm: FLOPs/token are 6 x active params + FFN-independent
    # terms, so the two criteria rank every d_ff alike.
    moe = load_config(preset).model
    assert match_dense(moe, "flops", step).config == match_dense(moe, "active", step).config


def test_match_cli_says_which_matched_models_coincide(capsys):
    from moelab.cli import main

    assert main(["match", "demo", "--json"]) == 0
    arms = json.loads(capsys.readouterr().out)
    assert arms["dense_flops"]["same_model_as"] == "dense_active"
    assert arms["dense_flops"]["model"] == arms["dense_active"]["model"]
    assert "same_model_as" not in arms["dense_total"] and "same_model_as" not in arms["dense_active"]
    # --json's keys, in order: the MoE has no criterion or mismatch, a dense arm has both
    assert list(arms["moe"]) == ["model", "counts", "training"]
    assert list(arms["dense_flops"]) == ["model", "counts", "training", "criterion", "mismatch",
                                         "same_model_as"]
    assert list(arms["moe"]["training"]) == ["tokens", "training_flops_6n",
                                             "training_flops_kaplan", "training_flops_palm"]


@pytest.mark.parametrize("criterion", ["active", "total", "flops"])
@pytest.mark.parametrize("step", [8, 32])
def test_match_dense_is_nearest_multiple(criterion, step):
    moe = load_config("demo").model
    matched = match_dense(moe, criterion, step=step)
    target = criterion_value(moe, criterion)
    # Brute force over every multiple of step up to 64x the expert width.
    best = min(
        range(step, 64 * moe.moe.d_expert, step),
        key=lambda d_ff: (abs(criterion_value(dataclasses.replace(moe, moe=None, d_ff=d_ff),
                                              criterion) - target), d_ff),
    )
    assert matched.config.d_ff == best
    assert matched.config.moe is None
    assert dataclasses.replace(matched.config, d_ff=moe.d_ff, moe=moe.moe) == moe
    assert matched.target == target
    assert matched.mismatch == pytest.approx((matched.achieved - target) / target)


def test_paper_preset_counts_by_hand_and_against_the_paper(capsys):
    from moelab.cli import main

    # vocab 4096 tied, d_model 512, 6 layers, 8 heads = 8 kv heads, 4 experts of 344, top-2.
    per_layer = 4 * 512 * 512 + 2 * 512 + 512 * 4 + 4 * 3 * 512 * 344  # attn, norms, router, experts
    total = 4096 * 512 + 6 * per_layer + 512  # + embedding, final norm
    active = total - 6 * 2 * 3 * 512 * 344  # two of four experts idle per token
    assert main(["params", "paper", "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert (counts["total_params"], counts["active_params"]) == (total, active)
    # The paper's numbers (DESIGN.md): ~14.77M active, ~21.06M total.
    assert active == pytest.approx(14.77e6, rel=2e-3) and total == pytest.approx(21.06e6, rel=2e-3)
    # The matched dense arms the README quotes.
    paper = load_config("paper").model
    assert match_dense(paper, "active").config.d_ff == 704
    assert match_dense(paper, "total").config.d_ff == 1376


def test_match_dense_rejects_dense_and_bad_criterion():
    with pytest.raises(ConfigError, match="model.moe=null"):
        match_dense(DENSE_GQA_UNTIED, "active")
    with pytest.raises(ConfigError, match="criterion='params'"):
        match_dense(MOE_TIED, "params")
