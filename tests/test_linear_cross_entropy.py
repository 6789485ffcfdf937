"""The fused, chunked head + cross-entropy against the plain one: ``F.cross_entropy`` of the
materialised logits, its loss and its gradients, on shapes that make several chunks and a
ragged last one, inside the model (tied and untied heads), without gradients and under bf16."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import moelab.linear_cross_entropy as lce
from moelab.config import ModelConfig, MoEConfig
from moelab.linear_cross_entropy import linear_cross_entropy
from moelab.model import Transformer


@pytest.fixture
def small_chunks(monkeypatch):
    """64-row chunks whatever the vocabulary, so 150 rows make chunks of 64, 64 and 22."""
    monkeypatch.setattr(lce, "CHUNK_LOGITS", 1)


def inputs(rows=150, d=24, vocab=97, seed=0):
    generator = torch.Generator().manual_seed(seed)
    h_ND = torch.randn(rows, d, generator=generator, requires_grad=True)
    weight_VD = (0.3 * torch.randn(vocab, d, generator=generator)).requires_grad_()
    targets_N = torch.randint(0, vocab, (rows,), generator=generator)
    return h_ND, weight_VD, targets_N


def loss_and_grads(loss_fn, h_ND, weight_VD, targets_N, scale=1.0):
    h_ND, weight_VD = (t.detach().clone().requires_grad_() for t in (h_ND, weight_VD))
    loss = loss_fn(h_ND, weight_VD, targets_N)
    (scale * loss).backward()
    return loss.detach(), h_ND.grad, weight_VD.grad


def plain(h_ND, weight_VD, targets_N):
    return F.cross_entropy(F.linear(h_ND, weight_VD).float(), targets_N)


@pytest.mark.parametrize("scale", [1.0, 3.5])
def test_loss_and_gradients_equal_the_plain_head(small_chunks, scale):
    assert lce.rows_per_chunk(97) == 64
    args = inputs()
    expected = loss_and_grads(plain, *args, scale=scale)
    got = loss_and_grads(linear_cross_entropy, *args, scale=scale)
    for name, want, have in zip(("loss", "grad h", "grad W"), expected, got):
        torch.testing.assert_close(have, want, rtol=1e-5, atol=1e-6, msg=name)


def test_one_chunk_and_many_chunks_agree(small_chunks, monkeypatch):
    args = inputs(rows=200)
    many = loss_and_grads(linear_cross_entropy, *args)
    monkeypatch.setattr(lce, "CHUNK_LOGITS", 10**9)
    one = loss_and_grads(linear_cross_entropy, *args)
    for want, have in zip(one, many):
        torch.testing.assert_close(have, want, rtol=1e-5, atol=1e-7)


def test_without_gradients_only_the_loss_is_computed(small_chunks):
    h_ND, weight_VD, targets_N = inputs()
    with torch.no_grad():
        loss = linear_cross_entropy(h_ND, weight_VD, targets_N)
    assert loss.grad_fn is None
    torch.testing.assert_close(loss, plain(h_ND, weight_VD, targets_N).detach(), rtol=1e-6, atol=1e-6)


def test_bf16_autocast_matches_the_plain_head_under_autocast(small_chunks):
    args = inputs(d=64, vocab=300)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = loss_and_grads(plain, *args)
        got = loss_and_grads(linear_cross_entropy, *args)
    assert got[1].dtype == got[2].dtype == torch.float32  # grads come back in the inputs' dtype
    torch.testing.assert_close(got[0], expected[0], rtol=2e-2, atol=2e-2)
    for want, have in zip(expected[1:], got[1:]):
        assert (have - want).norm() <= 2e-2 * want.norm()


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("moe", [None, MoEConfig(num_experts=4, top_k=2, d_expert=24)])
def test_model_gradients_equal_those_of_the_materialised_logits(small_chunks, tie, moe):
    # The tied head's weight is also the embedding: both gradients must add up as before.
    cfg = ModelConfig(vocab_size=200, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48,
                      max_seq_len=16, tie_embeddings=tie, moe=moe)
    torch.manual_seed(0)
    model = Transformer(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (5, 16))  # 75 rows: chunks of 64 and 11
    x_BT, y_BT = tokens[:, :-1], tokens[:, 1:]
    grads = []
    for fused in (False, True):
        model.zero_grad(set_to_none=True)
        if fused:
            out = model(x_BT, y_BT)
            loss = out.loss
        else:
            out = model(x_BT)
            ce = F.cross_entropy(out.logits.flatten(0, 1), y_BT.flatten())
            loss = ce + (moe.lb_coef * out.lb_loss + moe.z_coef * out.z_loss if moe else 0)
        loss.backward()
        grads.append({name: p.grad.clone() for name, p in model.named_parameters()})
        if fused:
            torch.testing.assert_close(out.ce_loss, ce, rtol=1e-6, atol=1e-6)
    plain_grads, fused_grads = grads
    assert plain_grads.keys() == fused_grads.keys()
    for name in plain_grads:
        torch.testing.assert_close(fused_grads[name], plain_grads[name], rtol=1e-4, atol=1e-7, msg=name)
