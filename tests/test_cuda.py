"""The GPU path: the grouped experts on CUDA, no host sync in a training step, compiled equals
eager, DDP over NCCL; and the CUDA settings, which a CPU can check.

The ``cuda`` tests are skipped without a GPU; ``benchmarks/gpu_check.sh`` runs them first on a
GPU machine (``pytest -m cuda``). The first few tests need no GPU.
"""

from __future__ import annotations

import pytest
import torch

from moelab.config import ModelConfig, MoEConfig, TrainConfig
from moelab.model import Transformer
from moelab.moe.experts import reference_experts_forward
from moelab.moe.grouped import grouped_experts_forward
from moelab.train.cuda import configure_cuda
from moelab.train.optim import build_optimizer

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def tiny_moe_config(num_experts=8) -> ModelConfig:
    return ModelConfig(vocab_size=256, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128,
                       max_seq_len=64, moe=MoEConfig(num_experts=num_experts, top_k=2, d_expert=48))


@pytest.fixture
def restore_backend_flags():
    saved = (torch.get_float32_matmul_precision(), torch.backends.cuda.flash_sdp_enabled(),
             torch.backends.cuda.mem_efficient_sdp_enabled())
    yield
    torch.set_float32_matmul_precision(saved[0])
    torch.backends.cuda.enable_flash_sdp(saved[1])
    torch.backends.cuda.enable_mem_efficient_sdp(saved[2])


def test_configure_cuda_turns_on_tf32_and_flash_attention(restore_backend_flags):
    # The flags are process-wide settings a CPU build holds too: set them as a GPU run would.
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.enable_flash_sdp(False)
    configure_cuda(torch.device("cuda", 0))
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    assert torch.backends.cuda.flash_sdp_enabled()
    assert torch.backends.cuda.mem_efficient_sdp_enabled()


def test_after_configure_cuda_every_precision_getter_still_answers(restore_backend_flags):
    # Once the per-backend fp32_precision setters are used, these raise ("a mix of the legacy and
    # new APIs"); inductor reads the first under max-autotune.
    configure_cuda(torch.device("cuda", 0))
    assert torch.get_float32_matmul_precision() == "high"
    assert torch.backends.cuda.matmul.allow_tf32
    assert torch.backends.cudnn.allow_tf32  # convolutions: torch's default, TF32


def test_configure_cuda_leaves_a_cpu_run_alone(restore_backend_flags):
    torch.set_float32_matmul_precision("highest")
    configure_cuda(torch.device("cpu"))
    assert torch.get_float32_matmul_precision() == "highest"


def test_the_optimizer_is_fused_adamw():
    # One kernel for all parameters (CUDA, and CPU in recent torch).
    optimizer = build_optimizer(Transformer(tiny_moe_config()), TrainConfig())
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults["fused"]


# ---------------------------------------------------------------------------------------------
# On a GPU
# ---------------------------------------------------------------------------------------------


def _expert_tensors(device, dtype, tokens=301, num_experts=8, top_k=2, d_model=64, hidden=48,
                    idle=(0, 5)):
    gen = torch.Generator().manual_seed(0)
    allowed = torch.tensor([e for e in range(num_experts) if e not in idle])
    experts_TK = torch.stack([allowed[torch.randperm(len(allowed), generator=gen)[:top_k]]
                              for _ in range(tokens)])
    tensors = [torch.randn(tokens, d_model, generator=gen), torch.rand(tokens, top_k, generator=gen),
               torch.randn(num_experts, hidden, d_model, generator=gen) / d_model ** 0.5,
               torch.randn(num_experts, d_model, hidden, generator=gen) / hidden ** 0.5,
               torch.randn(num_experts, hidden, d_model, generator=gen) / d_model ** 0.5]
    return experts_TK.to(device), [t.to(device, dtype).requires_grad_() for t in tensors]


def _run(forward, experts_TK, tensors, upstream_TD):
    x, weights, w1, w2, w3 = tensors
    out = forward(x, weights, experts_TK, w1, w2, w3)
    (out.float() * upstream_TD).sum().backward()
    return [out.float()] + [t.grad.float() for t in tensors]


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_grouped_experts_on_cuda_equal_the_reference_loop(dtype, tolerance):
    torch.set_float32_matmul_precision("highest")  # fp32 compared without TF32 rounding
    try:
        experts_TK, fast = _expert_tensors("cuda", dtype)
        _, slow = _expert_tensors("cuda", torch.float64)
        upstream_TD = torch.randn(fast[0].shape, device="cuda")
        got = _run(grouped_experts_forward, experts_TK, fast, upstream_TD)
        expected = _run(reference_experts_forward, experts_TK, slow, upstream_TD.double())
    finally:
        configure_cuda(torch.device("cuda"))
    for name, a, b in zip(("out", "x", "weights", "w1", "w2", "w3"), got, expected):
        scale = b.abs().max().item()
        torch.testing.assert_close(a, b.float(), rtol=tolerance, atol=tolerance * scale,
                                   msg=lambda m, name=name: f"{name}: {m}")
    for grad in got[3:]:
        assert grad[[0, 5]].abs().max() == 0  # idle experts: exactly zero gradient


def _tiny_step_setup(seed=0, compile_model=False):
    torch.manual_seed(seed)
    model = Transformer(tiny_moe_config()).cuda()
    optimizer = build_optimizer(model, TrainConfig(lr=1e-3))
    return model, (torch.compile(model) if compile_model else model), optimizer


def _train_step(model, train_model, optimizer, tokens_BT):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = train_model(tokens_BT[:, :-1], tokens_BT[:, 1:], collect_routing=False)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return out.loss.detach()


def _batches(steps, batch=4, seq=65, vocab=256):
    """Counting sequences from random starts: the next token is learnable, so loss falls."""
    gen = torch.Generator().manual_seed(1)
    starts = torch.randint(0, vocab, (steps, batch, 1), generator=gen)
    return list(((starts + torch.arange(seq)) % vocab).cuda())


@pytest.mark.slow
@pytest.mark.cuda
@needs_cuda
def test_a_bf16_training_step_never_waits_for_the_host():
    # 'auto' runs the grouped experts here (an sm90 or sm100 GPU in bf16); under sync debug
    # mode "error" any device-to-host copy, .item() or nonzero in forward, backward, clipping
    # or the fused AdamW step raises. 64 x 64 tokens: above the 3,072 indices past which
    # torch's own embedding backward sorts them and syncs (moelab.model.embed_tokens).
    configure_cuda(torch.device("cuda"))
    model, train_model, optimizer = _tiny_step_setup()
    layer = model.layers[0].feed_forward
    with torch.autocast("cuda", dtype=torch.bfloat16):
        probe_TD = torch.zeros(4, 64, device="cuda")
        assert layer.experts_forward_for(probe_TD) is grouped_experts_forward
    batches = _batches(3, batch=64)
    for tokens_BT in batches[:2]:  # warm-up: lazy initialisation may sync
        _train_step(model, train_model, optimizer, tokens_BT)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        _train_step(model, train_model, optimizer, batches[2])
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.slow
@pytest.mark.cuda
@needs_cuda
def test_compiled_training_equals_eager_within_bf16_over_20_steps():
    configure_cuda(torch.device("cuda"))
    batches = _batches(20)
    losses = {}
    for compiled in (False, True):
        model, train_model, optimizer = _tiny_step_setup(compile_model=compiled)
        losses[compiled] = torch.stack([_train_step(model, train_model, optimizer, tokens_BT)
                                        for tokens_BT in batches]).float().cpu()
    torch.testing.assert_close(losses[True], losses[False], rtol=3e-2, atol=0)
    assert losses[False][-1] < losses[False][0] - 0.1  # and it trains


@pytest.mark.slow
@pytest.mark.cuda
@needs_cuda
def test_one_process_nccl_ddp_matches_the_plain_model(tmp_path):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    configure_cuda(torch.device("cuda"))
    batches = _batches(5)
    model, _, optimizer = _tiny_step_setup()
    plain = [_train_step(model, model, optimizer, b) for b in batches]
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1, device_id=torch.device("cuda", torch.cuda.current_device()))
    try:
        model, _, optimizer = _tiny_step_setup()
        ddp_model = DistributedDataParallel(model)
        ddp = [_train_step(model, ddp_model, optimizer, b) for b in batches]
    finally:
        dist.destroy_process_group()
    torch.testing.assert_close(torch.stack(ddp), torch.stack(plain), rtol=1e-5, atol=0)


@pytest.mark.slow
@pytest.mark.cuda
@needs_cuda
def test_cuda_training_run_end_to_end(tmp_path):
    # The real loop on the GPU: bf16, the grouped experts, TF32 (compiled training is the test
    # above; compiling again here would not fit the GPU check's time limit).
    from moelab.config import load_config
    from moelab.train import train

    config = load_config(None, [
        "model.vocab_size=512", "model.d_model=64", "model.n_layers=2", "model.n_heads=4",
        "model.n_kv_heads=2", "model.d_ff=128", "model.max_seq_len=64",
        "model.moe={num_experts: 8, top_k: 2, d_expert: 48}", "data.source=sample",
        "data.max_train_stories=300", "train.batch_size=8", "train.max_tokens=10240",
        "train.eval_interval=10", "train.eval_windows=8", "train.log_interval=5",
        "train.logging.progress=false", "train.sample_tokens=0", "train.device=cuda",
        "train.dtype=bfloat16",
    ])
    summary = train(config, tmp_path / "run")
    assert summary.device.startswith("cuda")
    assert summary.final_val_loss < 6.0


def test_cuda_marker_is_registered(pytestconfig):
    assert any(m.startswith("cuda:") for m in pytestconfig.getini("markers"))

