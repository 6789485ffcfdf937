"""Validation before allocation: a config must fit the machine before its model is built.

The estimate is a floor, computed from the config alone (``moelab.accounting.count_params``):

- training keeps 16 bytes per parameter: fp32 weights, gradients and AdamW's two moments;
- a backward pass keeps at least the inputs of every layer's matmuls: per token and layer,
  four d_model-wide vectors (the normed input, q, the attention output, the normed FFN input)
  and three FFN-hidden-wide ones (SwiGLU's gate, up and their product, k of them for an MoE),
  2 bytes each (bf16; fp32 doubles it);
- using a run (eval, generate, export) keeps 4 bytes per parameter.

A config whose floor exceeds the device's memory (RAM for a CPU, the GPU's memory for CUDA) or
the sanity cap is refused on one line before anything is allocated; one that passes may still
run out, since the real footprint is higher. The floor only stops a typo (10^9 layers, a batch
of 10^20) from allocating until the machine gives up.
"""

from __future__ import annotations

import os
import resource
import sys

import torch

from moelab.accounting import count_params
from moelab.config import Config, ModelConfig
from moelab.errors import MoelabError

TRAINING_BYTES_PER_PARAM = 16
WEIGHT_BYTES_PER_PARAM = 4
ACTIVATION_BYTES = 2
SANITY_CAP_BYTES = 1 << 50
"""1 PiB: no single process has that, whatever the machine reports."""


def training_bytes_floor(config: Config, micro_batch_size: int) -> int:
    """A lower bound on the memory one process needs to train ``config`` (see the module doc)."""
    model = config.model
    tokens = micro_batch_size * model.max_seq_len
    ffn_hidden = model.moe.top_k * model.moe.d_expert if model.moe else model.d_ff
    per_token_layer = 4 * model.d_model + 3 * ffn_hidden
    activations = ACTIVATION_BYTES * tokens * model.n_layers * per_token_layer
    return TRAINING_BYTES_PER_PARAM * count_params(model).total + activations


def device_memory_bytes(device: torch.device) -> int:
    """The device's total memory (a GPU's, or the machine's RAM), at most the sanity cap."""
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
    else:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):  # not exposed here (Windows)
            total = SANITY_CAP_BYTES
    return min(total, SANITY_CAP_BYTES)


def check_training_fits(config: Config, micro_batch_size: int, device: torch.device,
                        processes_on_device: int = 1) -> None:
    need = training_bytes_floor(config, micro_batch_size) * processes_on_device
    have = device_memory_bytes(device)
    if need > have:
        params = count_params(config.model).total
        raise MoelabError(
            f"the config needs at least {format_bytes(need)} to train ({params:,} parameters x "
            f"{TRAINING_BYTES_PER_PARAM} bytes for weights, gradients and AdamW moments, plus the "
            f"activations of micro batches of {micro_batch_size} x {config.model.max_seq_len} "
            f"tokens), more than the {format_bytes(have)} of {device}: make model.n_layers, "
            f"d_model, d_ff, the experts or train.micro_batch_size smaller"
        )


def check_weights_fit(model: ModelConfig, device: torch.device, where: str) -> None:
    """Loading a run: its weights alone must fit."""
    params = count_params(model).total
    need, have = WEIGHT_BYTES_PER_PARAM * params, device_memory_bytes(device)
    if need > have:
        raise MoelabError(f"the model of {where} has {params:,} parameters, "
                          f"{format_bytes(need)} of weights, more than the {format_bytes(have)} "
                          f"of {device}")


def format_bytes(count: int) -> str:
    for unit, size in (("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if count >= size:
            return f"{count / size:,.1f} {unit}" if count < (1 << 60) else f"~2^{count.bit_length()} bytes"
    return f"{count:,} bytes"


def peak_memory_bytes(device: torch.device) -> int:
    """The peak memory this process has used: on CUDA the tensors' peak on ``device`` (since the
    last ``torch.cuda.reset_peak_memory_stats``), on a CPU the process's peak resident set.

    The CPU figure cannot be reset, so runs trained one after another in one process (a sweep
    with ``--jobs 1``) each report the largest peak so far.
    """
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # bytes on macOS, KiB on Linux
