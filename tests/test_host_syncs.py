"""No host sync in a GPU training step, checked without a GPU.

A CUDA step that waits for the host (``.item()``, ``.cpu()``, ``.tolist()``, ``nonzero``, a
kernel that reads a count back) stalls the GPU every step. On the ``meta`` device, tensors have
no data, so any host read raises; and a dispatch mode sees every aten op, so the ops that sync
inside their CUDA kernel (the sort-based embedding backward above 3,072 indices, ``unique``,
``masked_select``...) are caught by name. ``tests/test_cuda.py`` checks the same on a real GPU
with ``torch.cuda.set_sync_debug_mode("error")``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from moelab.config import ModelConfig, MoEConfig
from moelab.model import Transformer, _SyncFreeEmbedding, embed_tokens
from moelab.train.cuda import host_to_device

SYNCING_OPS = {
    "aten::_local_scalar_dense",  # .item(), bool(), int()
    "aten::nonzero", "aten::masked_select", "aten::unique_dim", "aten::_unique2",
    "aten::embedding_dense_backward",  # CUDA: sorts and reads back above 3,072 indices
}


class RecordOps(TorchDispatchMode):
    """The ops of SYNCING_OPS run inside, in order."""

    def __init__(self):
        super().__init__()
        self.syncing: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.name in SYNCING_OPS:
            self.syncing.append(func._schema.name)
        return func(*args, **(kwargs or {}))


def _config(num_experts=8) -> ModelConfig:
    return ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                       d_ff=64, max_seq_len=2048,
                       moe=MoEConfig(num_experts=num_experts, top_k=2, d_expert=24))


def _meta_model_step(experts: str) -> list[str]:
    """Forward and backward of the model body on meta, 2 x 2048 tokens (above the embedding's
    3,072-index threshold); the syncing ops it ran."""
    model = Transformer(_config(), experts).to(device="meta", dtype=torch.bfloat16)
    tokens_BT = torch.zeros(2, 2048, dtype=torch.long, device="meta")
    with RecordOps() as record:
        h_BTD, moe_aux = model._blocks(tokens_BT, collect_routing=False)
        (h_BTD.float().sum() + sum(aux.lb_loss + aux.z_loss for aux in moe_aux)).backward()
    assert model.tok_embeddings.weight.grad is not None
    return record.syncing


def test_the_gpu_path_of_a_model_step_runs_no_op_that_syncs():
    assert _meta_model_step("grouped") == []


def test_the_check_catches_the_sort_based_embedding_backward():
    # What nn.Embedding runs: the op the model avoids off a CPU (the check can fail).
    weight_VD = torch.empty(64, 32, device="meta", requires_grad=True)
    with RecordOps() as record:
        F.embedding(torch.zeros(4096, dtype=torch.long, device="meta"), weight_VD).sum().backward()
    assert record.syncing == ["aten::embedding_dense_backward"]


def test_the_check_catches_a_host_read():
    # The sorted experts read their row counts on the host: a sync per MoE layer on a GPU.
    with pytest.raises((NotImplementedError, RuntimeError), match="meta"):
        _meta_model_step("sorted")


def test_the_check_catches_a_copy_to_the_host():
    with pytest.raises(NotImplementedError, match="meta"):
        torch.ones(3, device="meta").cpu()


def _embedding_grads(embed, dtype):
    """Output and weight gradient of 5000 indices into 50 rows (each row ~100 times, in random
    order), and the upstream gradient."""
    gen = torch.Generator().manual_seed(0)
    tokens_BT = torch.randint(0, 50, (5, 1000), generator=gen)
    weight_VD = torch.randn(50, 16, generator=gen).to(dtype).requires_grad_()
    upstream_BTD = torch.randn(5, 1000, 16, generator=gen).to(dtype)
    out_BTD = embed(tokens_BT, weight_VD)
    out_BTD.backward(upstream_BTD)
    return out_BTD.detach(), weight_VD.grad, (tokens_BT, upstream_BTD)


def test_the_sync_free_embedding_equals_f_embedding_bit_for_bit_in_fp32():
    # fp32: the weights' dtype in training (bf16 autocast leaves the embedding in fp32).
    (out, grad, _), (ref_out, ref_grad, _) = (_embedding_grads(embed, torch.float32)
                                              for embed in (_SyncFreeEmbedding.apply, F.embedding))
    assert torch.equal(out, ref_out) and torch.equal(grad, ref_grad)


def test_the_sync_free_embedding_sums_bf16_gradients_in_fp32():
    # ~100 terms a row: summed in bf16 they would drift by several bf16 steps; summed in fp32
    # they are the exact (fp64) sum rounded once.
    _, grad, (tokens_BT, upstream_BTD) = _embedding_grads(_SyncFreeEmbedding.apply, torch.bfloat16)
    exact = torch.zeros(50, 16, dtype=torch.float64).index_add_(
        0, tokens_BT.reshape(-1), upstream_BTD.reshape(-1, 16).double())
    torch.testing.assert_close(grad.double(), exact, rtol=2 ** -8, atol=1e-6)


def test_a_cpu_keeps_f_embedding():
    weight_VD = torch.randn(8, 4, requires_grad=True)
    out_BTD = embed_tokens(torch.tensor([[1, 2]]), weight_VD)
    assert out_BTD.grad_fn.name() == "EmbeddingBackward0"


def test_host_to_device_pins_then_copies_without_blocking(monkeypatch):
    # What it asks of torch for a GPU, recorded on a CPU build (which can neither pin nor copy
    # to a GPU): a copy from pageable memory would block the host, non_blocking or not.
    calls = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: calls.append("pin") or self)
    monkeypatch.setattr(torch.Tensor, "to", lambda self, *args, **kwargs:
                        calls.append(("to", args, kwargs)) or self)
    host_to_device(torch.arange(3), torch.device("cuda"))
    assert calls == ["pin", ("to", (torch.device("cuda"),), {"non_blocking": True})]


def test_host_to_device_on_a_cpu_is_a_plain_copy():
    tokens = torch.arange(6)
    assert torch.equal(host_to_device(tokens, torch.device("cpu")), tokens)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_host_to_device_copies_from_pinned_memory_without_waiting():
    tokens = torch.arange(1 << 20)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        on_gpu = host_to_device(tokens, torch.device("cuda"))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert on_gpu.is_cuda and torch.equal(on_gpu.cpu(), tokens)
