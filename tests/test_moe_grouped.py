"""The ``grouped`` experts (moelab.moe.grouped) on a CPU, and how ``auto`` picks an implementation.

torch's CPU ``torch._grouped_mm`` takes bf16 and fp32, forward and backward, so the GPU path's
code runs here against the reference loop. That it never waits on the host is tested on the
``meta`` device, whose tensors have no data: any ``.cpu()``, ``.item()``, ``.tolist()`` or
data-dependent shape (``nonzero``) raises there (the ``sorted`` experts, which read their row
counts on the host, fail the same test).
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from moelab.config import ModelConfig, MoEConfig
from moelab.errors import MoelabError
from moelab.model import Transformer
from moelab.moe import MoEFeedForward
from moelab.moe import experts as experts_module
from moelab.moe.experts import (
    EXPERTS_IMPLEMENTATIONS,
    auto_experts_implementation,
    grouped_problem,
    reference_experts_forward,
    warn_once,
)
from moelab.moe.grouped import ROW_ALIGN, grouped_experts_forward, padded_layout, padded_rows
from moelab.moe.kernels import sorted_experts_forward

NAMES = ("x_TD", "weights_TK", "w1_EHD", "w2_EDH", "w3_EHD")


def expert_inputs(tokens=37, num_experts=8, top_k=2, d_model=16, hidden=24, idle=(0, 5, 7),
                  seed=0):
    """fp64 inputs and a routing that never picks the experts in ``idle``."""
    gen = torch.Generator().manual_seed(seed)
    allowed = torch.tensor([e for e in range(num_experts) if e not in idle])
    experts_TK = torch.stack([allowed[torch.randperm(len(allowed), generator=gen)[:top_k]]
                              for _ in range(tokens)])
    tensors = dict(
        x_TD=torch.randn(tokens, d_model, generator=gen),
        weights_TK=torch.rand(tokens, top_k, generator=gen),
        w1_EHD=torch.randn(num_experts, hidden, d_model, generator=gen) / d_model ** 0.5,
        w2_EDH=torch.randn(num_experts, d_model, hidden, generator=gen) / hidden ** 0.5,
        w3_EHD=torch.randn(num_experts, hidden, d_model, generator=gen) / d_model ** 0.5,
    )
    return experts_TK, {k: v.double() for k, v in tensors.items()}


def forward_backward(forward, experts_TK, tensors, dtype, upstream_TD):
    """Output and gradients (fp64) of ``forward`` run on ``tensors`` cast to ``dtype``."""
    leaves = {k: v.to(dtype).requires_grad_() for k, v in tensors.items()}
    out_TD = forward(*(leaves[n] for n in NAMES[:2]), experts_TK, *(leaves[n] for n in NAMES[2:]))
    (out_TD.double() * upstream_TD).sum().backward()
    return out_TD.double(), {k: v.grad.double() for k, v in leaves.items()}


@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 2e-5), (torch.bfloat16, 3e-2)])
def test_grouped_experts_equal_the_reference_loop_forward_and_backward(dtype, tolerance,
                                                                       monkeypatch):
    # The reference runs in fp64 on the same (dtype-rounded) numbers; the grouped experts in
    # dtype through the real torch._grouped_mm (counted: not the masked fallback).
    experts_TK, tensors = expert_inputs()
    tensors = {k: v.to(dtype).double() for k, v in tensors.items()}
    upstream_TD = torch.randn(experts_TK.shape[0], tensors["x_TD"].shape[1], dtype=torch.float64)
    calls = []
    real = torch._grouped_mm
    monkeypatch.setattr(torch, "_grouped_mm", lambda *a, **k: calls.append(1) or real(*a, **k))
    out, grads = forward_backward(grouped_experts_forward, experts_TK, tensors, dtype, upstream_TD)
    assert len(calls) >= 3  # forward: w1, w3, w2 (backward: grouped_mm's own, also counted)
    monkeypatch.undo()
    out_ref, grads_ref = forward_backward(reference_experts_forward, experts_TK, tensors,
                                          torch.float64, upstream_TD)
    _assert_close_relative(out, out_ref, tolerance, "output")
    for name in NAMES:
        _assert_close_relative(grads[name], grads_ref[name], tolerance, name)
    for expert in (0, 5, 7):  # idle experts: exactly zero weight gradients
        for name in ("w1_EHD", "w2_EDH", "w3_EHD"):
            assert grads[name][expert].abs().max() == 0, (name, expert)


def _assert_close_relative(actual, expected, tolerance, name):
    """Every entry within tolerance of the largest entry (bf16 rounds each product to ~3
    significant digits; sums of them are off by a share of the largest, not of each entry)."""
    scale = expected.abs().max().item()
    torch.testing.assert_close(actual, expected, rtol=tolerance, atol=tolerance * scale,
                               msg=lambda m: f"{name}: {m}")


def test_grouped_experts_under_bf16_autocast_equal_them_in_bf16():
    # Autocast is honoured explicitly (as the sorted experts do): fp32 weights under bf16
    # autocast give exactly what bf16 weights give.
    experts_TK, tensors = expert_inputs()
    fp32 = {k: v.float() for k, v in tensors.items()}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out_autocast = grouped_experts_forward(*(fp32[n] for n in NAMES[:2]), experts_TK,
                                               *(fp32[n] for n in NAMES[2:]))
    bf16 = {k: v.bfloat16() for k, v in tensors.items()}
    out_bf16 = grouped_experts_forward(*(bf16[n] for n in NAMES[:2]), experts_TK,
                                       *(bf16[n] for n in NAMES[2:]))
    assert out_autocast.dtype == torch.bfloat16
    assert torch.equal(out_autocast, out_bf16)


def test_padded_layout_equals_a_hand_count():
    # 3 tokens, top-2, 5 experts: token 0 -> (0, 2), token 1 -> (2, 0), token 2 -> (2, 3).
    # Slots s = 2t + j: expert 0 has slots 0, 3; expert 2 slots 1, 2, 4; expert 3 slot 5.
    # Blocks of 8 rows: expert 0 rows 0..7, expert 1 none, expert 2 rows 8..15, expert 3 from
    # 16 to the end of the 6 + 5 * 7 = 41-row buffer (expert 4 idle, after it: none).
    layout = padded_layout(torch.tensor([[0, 2], [2, 0], [2, 3]]), 5, align=8)
    assert layout.rows == 41 == padded_rows(6, 5, align=8)
    assert layout.row_of_slot_S.tolist() == [0, 8, 9, 1, 10, 16]
    assert layout.group_end_E.tolist() == [8, 8, 16, 24, 41]
    assert layout.group_end_E.dtype == torch.int32


@pytest.mark.parametrize("num_experts,top_k,align", [(8, 2, ROW_ALIGN), (16, 3, 4), (4, 1, 16)])
def test_padded_layout_gives_every_slot_its_own_row_in_its_experts_aligned_block(
        num_experts, top_k, align):
    experts_TK, _ = expert_inputs(tokens=53, num_experts=num_experts, top_k=top_k, idle=(1,))
    layout = padded_layout(experts_TK, num_experts, align=align)
    rows = layout.row_of_slot_S.tolist()
    ends = layout.group_end_E.tolist()
    starts = [0] + ends[:-1]
    assert len(set(rows)) == len(rows)  # one row per slot
    assert ends[-1] == layout.rows == padded_rows(experts_TK.numel(), num_experts, align)
    for expert in range(num_experts):
        slots = [s for s, e in enumerate(experts_TK.flatten().tolist()) if e == expert]
        assert starts[expert] % align == 0
        # Its slots, in slot order, on the first rows of its block.
        assert [rows[s] for s in slots] == list(range(starts[expert], starts[expert] + len(slots)))
        if expert < num_experts - 1:  # the last block also takes the buffer's tail
            assert ends[expert] - starts[expert] == -(-len(slots) // align) * align


def _meta_layer_step(forward):
    """Forward and backward of ``forward`` on data-less bf16 ``meta`` tensors (grouped_mm's meta
    kernel checks what its CUDA kernel checks, bf16 included)."""
    experts_TK, tensors = expert_inputs()
    meta = {k: torch.empty(v.shape, dtype=torch.bfloat16, device="meta").requires_grad_()
            for k, v in tensors.items()}
    out_TD = forward(*(meta[n] for n in NAMES[:2]), experts_TK.to("meta"),
                     *(meta[n] for n in NAMES[2:]))
    out_TD.backward(torch.empty_like(out_TD))
    return out_TD, meta


def test_grouped_experts_never_read_data_on_the_host():
    # On meta tensors any host read raises: this passing means no .cpu(), .item(), .tolist(),
    # nonzero or other data-dependent shape on the path, forward or backward.
    out_TD, meta = _meta_layer_step(grouped_experts_forward)
    assert out_TD.shape == meta["x_TD"].shape
    assert all(meta[n].grad.shape == meta[n].shape for n in NAMES)


def test_the_meta_device_catches_a_host_read():
    # The sorted experts copy their row counts to the host (one sync per layer on a GPU), and so
    # fail the test above: it can fail.
    with pytest.raises((NotImplementedError, RuntimeError), match="meta"):
        _meta_layer_step(sorted_experts_forward)


def test_whole_moe_layer_with_grouped_experts_runs_on_meta():
    # Router, top-k, slot counts, balancing and z losses too (the statistics are skipped, as in
    # training).
    layer = MoEFeedForward(_moe_model_config(), "grouped").to(device="meta", dtype=torch.bfloat16)
    x_BTD = torch.empty(2, 8, 32, device="meta", dtype=torch.bfloat16, requires_grad=True)
    y_BTD, aux = layer(x_BTD, collect_routing=False)
    (y_BTD.sum() + aux.lb_loss + aux.z_loss).backward()
    assert layer.w1.grad.shape == layer.w1.shape


def test_whole_model_blocks_with_grouped_experts_run_on_meta():
    # Embedding, attention, norms and every MoE layer, forward and backward: no host read in
    # the model body either (the fused head opens an autocast region, which meta lacks, so the
    # loss here is a plain sum of the blocks' output and the aux losses).
    model = Transformer(_moe_model_config(), "grouped").to(device="meta", dtype=torch.bfloat16)
    tokens_BT = torch.zeros(2, 16, dtype=torch.long, device="meta")
    h_BTD, moe_aux = model._blocks(tokens_BT, collect_routing=False)
    (h_BTD.float().sum() + sum(aux.lb_loss + aux.z_loss for aux in moe_aux)).backward()
    assert all(p.grad is not None for p in model.layers.parameters())


def _moe_model_config(num_experts=8) -> ModelConfig:
    return ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                       d_ff=64, max_seq_len=16,
                       moe=MoEConfig(num_experts=num_experts, top_k=2, d_expert=24))


@pytest.mark.slow
def test_compiled_moe_layer_is_one_graph_whatever_the_routing():
    # Static shapes: torch.compile traces the layer once (fullgraph: no graph break) and a new
    # routing every step recompiles nothing. aot_eager traces forward and backward as inductor
    # would, without its C++ build.
    torch.manual_seed(0)
    layer = MoEFeedForward(_moe_model_config(), "grouped")
    layer.init_weights(0.2, 0.2)
    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True, dynamic=False)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(error_on_recompile=True):
        for step in range(4):
            x_BTD = torch.randn(2, 8, 32, requires_grad=True)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y_BTD, aux = compiled(x_BTD, collect_routing=False)
                y_eager, _ = layer(x_BTD, collect_routing=False)
            y_BTD.float().sum().backward()
            torch.testing.assert_close(y_BTD, y_eager)
            assert layer.w1.grad is not None
            layer.zero_grad(set_to_none=True)
    torch._dynamo.reset()


# ---------------------------------------------------------------------------------------------
# Which implementation "auto" runs
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device_type,dtype,device_problem,expected,warns", [
    ("cpu", torch.float32, None, "sorted", False),
    ("cpu", torch.bfloat16, None, "sorted", False),  # a CPU keeps the measured sorted path
    ("cuda", torch.bfloat16, None, "grouped", False),
    ("cuda", torch.float32, None, "sorted", True),  # grouped_mm's fp32 CUDA path syncs
    ("cuda", torch.bfloat16, "cuda:0 is sm80", "sorted", True),
])
def test_auto_picks_grouped_on_a_capable_gpu_in_bf16_else_sorted(device_type, dtype,
                                                                 device_problem, expected, warns):
    name, warning = auto_experts_implementation(device_type, dtype, device_problem)
    assert name == expected
    assert (warning is not None) == warns
    if warns:
        assert "\n" not in warning and "sorted" in warning
        if device_problem:
            assert device_problem in warning


@pytest.mark.parametrize("capability,has_grouped_mm,sizes,problem", [
    ((9, 0), True, (512, 344), None),  # H100 / H200
    ((10, 0), True, (512, 344), None),  # B200
    ((8, 0), True, (512, 344), "sm80"),  # A100: grouped_mm's loop with a host sync
    ((12, 0), True, (512, 344), "sm120"),  # consumer Blackwell: the same loop
    ((10, 3), True, (512, 344), None),  # B300
    ((9, 0), False, (512, 344), "no torch._grouped_mm"),  # old torch
    ((9, 0), True, (512, 340), "[340]"),  # a stride that is not 16 bytes in bf16
])
def test_grouped_problem_from_an_injected_capability(capability, has_grouped_mm, sizes, problem):
    found = grouped_problem(0, sizes, capability=lambda index: capability,
                            has_grouped_mm=has_grouped_mm)
    if problem is None:
        assert found is None
    else:
        assert problem in found


def test_a_fallback_warning_is_one_line_once(capsys):
    experts_module._WARNED.discard("test: x")
    warn_once("test: x")
    warn_once("test: x")
    assert capsys.readouterr().err == "moelab: warning: test: x\n"


def test_auto_on_a_cpu_is_the_sorted_path_bit_for_bit():
    # The default changed from "sorted" to "auto": on a CPU nothing may move.
    cfg = _moe_model_config()
    tokens_BT = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    losses = {}
    for name in ("auto", "sorted"):
        torch.manual_seed(0)
        model = Transformer(cfg, name)
        out = model(tokens_BT[:, :-1], tokens_BT[:, 1:])
        out.loss.backward()
        losses[name] = (out.loss, model.layers[0].feed_forward.w1.grad)
    assert torch.equal(losses["auto"][0], losses["sorted"][0])
    assert torch.equal(losses["auto"][1], losses["sorted"][1])
    assert Transformer(cfg).layers[0].feed_forward.experts_implementation == "auto"


def test_grouped_is_in_the_registry_and_auto_is_an_allowed_name():
    assert EXPERTS_IMPLEMENTATIONS["grouped"] is grouped_experts_forward
    with pytest.raises(MoelabError, match="allowed auto, sorted, reference, grouped"):
        MoEFeedForward(_moe_model_config(), experts_implementation="fast")


@pytest.mark.slow
def test_compiled_model_with_grouped_experts_is_one_graph_and_equals_eager():
    # The whole model (attention, MoE layers, fused head and loss) as one graph, forward and
    # backward, over steps whose routings differ: no graph break, no recompile.
    torch.manual_seed(0)
    model = Transformer(_moe_model_config(), "grouped")
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True, dynamic=False)
    gen = torch.Generator().manual_seed(1)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(error_on_recompile=True):
        for step in range(3):
            tokens_BT = torch.randint(0, 64, (2, 17), generator=gen)
            losses = []
            for run in (compiled, model):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    out = run(tokens_BT[:, :-1], tokens_BT[:, 1:], collect_routing=False)
                out.loss.backward()
                losses.append((out.loss.detach(), model.layers[1].feed_forward.w2.grad.clone()))
                model.zero_grad(set_to_none=True)
            torch.testing.assert_close(losses[0][0], losses[1][0])
            torch.testing.assert_close(losses[0][1], losses[1][1])
    torch._dynamo.reset()
