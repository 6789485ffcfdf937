"""The output head and the cross-entropy in one pass over row chunks, never holding all logits.

``linear_cross_entropy(h, W, targets)`` equals ``F.cross_entropy(h @ W.T, targets)`` (mean over
rows, logits in fp32) and its gradients. Computed naively, the (N, V) logits, their log-softmax
and its gradient are three tensors each V / D times the size of the hidden states they come
from (N = 2,048 rows and V = 1,024 are 8 MB each, 16 times the (N, 64) hidden states of the
demo model), and each pass over them misses the cache; on a CPU the head and the loss took a
sixth of a demo train step. Here the rows go through in chunks (on a CPU, about a million
logits, of the order of a core's L2 cache; on a GPU, chunks large enough to keep its matmuls
big): each chunk's logits are made, turned into the loss and into ``softmax - onehot`` (the
gradient of the loss with respect to the logits), and multiplied back into the gradients of
``h`` and ``W`` while they are still warm in the caches. The forward pass thus does the
backward's work too (as Liger Kernel's fused linear cross-entropy does); backward only scales
the stored gradients by the incoming one.
Without gradients (evaluation) only the loss is computed, chunk by chunk.
"""

from __future__ import annotations

import torch

from moelab.precision import autocast_off, compute_dtype

CHUNK_LOGITS = 2**20
"""Logits per chunk on a CPU: 4 MB in fp32, of the order of a core's L2 cache (2 MB on the
machine this was tuned on; 2 MB and 8 MB chunks measured the same speed on the demo head)."""
ACCELERATOR_CHUNK_LOGITS = 2**26
"""Logits per chunk elsewhere (256 MB in fp32): a GPU needs big matmuls and few launches more
than it needs cache; chunking there only bounds the memory."""


def rows_per_chunk(vocab_size: int, device_type: str = "cpu") -> int:
    """Rows of hidden states per chunk: the chunk's logits fill the budget, at least 64 rows."""
    budget = CHUNK_LOGITS if device_type == "cpu" else ACCELERATOR_CHUNK_LOGITS
    return max(64, budget // vocab_size)


def linear_cross_entropy(h_ND: torch.Tensor, weight_VD: torch.Tensor,
                         targets_N: torch.Tensor) -> torch.Tensor:
    """Mean over the N rows of the cross-entropy of ``h_ND @ weight_VD.T`` against ``targets_N``."""
    if torch.is_grad_enabled() and (h_ND.requires_grad or weight_VD.requires_grad):
        return _LinearCrossEntropy.apply(h_ND, weight_VD, targets_N)
    loss_sum, _, _ = _chunked(h_ND, weight_VD, targets_N, with_grads=False)
    return loss_sum / h_ND.shape[0]


def _chunked(h_ND, weight_VD, targets_N, with_grads: bool):
    """(summed loss, d loss_sum / d h or None, d loss_sum / d W in fp32 or None)."""
    dtype = compute_dtype(h_ND)  # the head is a linear layer: autocast's dtype when it is on
    with autocast_off(h_ND):
        h_ND, weight_VD = h_ND.to(dtype), weight_VD.to(dtype)
        chunk = rows_per_chunk(weight_VD.shape[0], h_ND.device.type)
        loss_sum = h_ND.new_zeros((), dtype=torch.float32)
        grad_h_chunks, grad_w_VD = [], None
        for start in range(0, h_ND.shape[0], chunk):
            h_CD, targets_C = h_ND[start:start + chunk], targets_N[start:start + chunk]
            logits_CV = (h_CD @ weight_VD.T).float()
            log_z_C = torch.logsumexp(logits_CV, dim=-1)
            target_logit_C = logits_CV.gather(1, targets_C.unsqueeze(1)).squeeze(1)
            loss_sum = loss_sum + (log_z_C - target_logit_C).sum()
            if not with_grads:
                continue
            # d CE / d logits = softmax - onehot(target), made in place in the logits' buffer.
            grad_logits_CV = logits_CV.sub_(log_z_C.unsqueeze(1)).exp_()
            grad_logits_CV.scatter_add_(1, targets_C.unsqueeze(1),
                                        grad_logits_CV.new_full((targets_C.shape[0], 1), -1.0))
            grad_logits_CV = grad_logits_CV.to(dtype)
            grad_h_chunks.append(grad_logits_CV @ weight_VD)
            grad_w_chunk_VD = (grad_logits_CV.T @ h_CD).float()
            grad_w_VD = grad_w_chunk_VD if grad_w_VD is None else grad_w_VD + grad_w_chunk_VD
    if not with_grads:
        return loss_sum, None, None
    return loss_sum, torch.cat(grad_h_chunks), grad_w_VD


class _LinearCrossEntropy(torch.autograd.Function):
    """Loss in forward, with the gradients of the summed loss computed alongside and kept;
    backward scales them by ``grad_output / N``."""

    @staticmethod
    def forward(ctx, h_ND, weight_VD, targets_N):
        loss_sum, grad_h_ND, grad_w_VD = _chunked(h_ND, weight_VD, targets_N, with_grads=True)
        ctx.save_for_backward(grad_h_ND, grad_w_VD)
        ctx.dtypes = (h_ND.dtype, weight_VD.dtype)
        ctx.num_rows = h_ND.shape[0]
        return loss_sum / ctx.num_rows

    @staticmethod
    def backward(ctx, grad_loss):
        grad_h_ND, grad_w_VD = ctx.saved_tensors
        scale = grad_loss / ctx.num_rows
        h_dtype, w_dtype = ctx.dtypes
        return (grad_h_ND * scale.to(grad_h_ND.dtype)).to(h_dtype), (grad_w_VD * scale).to(w_dtype), None
