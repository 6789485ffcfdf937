"""``moelab export-hf``: the folder loads in ``transformers`` (Llama for dense, Mixtral for MoE)
and gives the same logits, tokens and greedy continuation as moelab."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from moelab.cli import main  # noqa: E402
from moelab.config import load_config  # noqa: E402
from moelab.train import generate_text, load_run, train  # noqa: E402

TINY = [
    "model.vocab_size=512", "model.d_model=32", "model.n_layers=2", "model.n_heads=4",
    "model.n_kv_heads=2", "model.d_ff=64", "model.max_seq_len=32",
    "data.source=sample", "data.max_train_stories=300",
    "train.batch_size=8", "train.max_tokens=1024", "train.lr=0.01", "train.eval_windows=4",
    "train.logging.progress=false", "train.sample_tokens=0",
]
ARMS = {
    "dense": ("LlamaForCausalLM", ["model.tie_embeddings=false"]),
    "moe": ("MixtralForCausalLM", ["model.moe={num_experts: 4, top_k: 2, d_expert: 32}"]),
    # T5's tied head: Hugging Face has no logit multiplier, so export folds it into the norm.
    "moe_scaled_logits": ("MixtralForCausalLM", ["model.moe={num_experts: 4, top_k: 2, d_expert: 32}",
                                                 "model.embedding_init_std=1.0",
                                                 "model.logit_scale=0.17677669529663687"]),
    # A RoPE base no transformers default has: a reader that missed it would compute other logits.
    "moe_rope_theta": ("MixtralForCausalLM", ["model.moe={num_experts: 4, top_k: 2, d_expert: 32}",
                                              "model.rope_theta=50000.0"]),
    # Aux-loss-free balancing whose bias stayed zero routes as Mixtral does: the buffer is dropped.
    "moe_zero_bias": ("MixtralForCausalLM", ["model.moe={num_experts: 4, top_k: 2, d_expert: 32, "
                                             "balance: both, bias_update_rate: 0.0}"]),
}
TEXT = "Once upon a time, there was a little girl named Lily. She liked to play outside."


@pytest.mark.slow
@pytest.mark.parametrize("arm", sorted(ARMS))
def test_exported_model_matches_moelab(tmp_path, arm):
    hf_class, overrides = ARMS[arm]
    config = load_config(None, TINY + overrides)
    run_dir, out = tmp_path / "run", tmp_path / "hf"
    train(config, run_dir)  # 4 steps: weights away from their init, GQA and (un)tied heads
    assert main(["export-hf", str(run_dir), str(out)]) == 0

    # Every transformers reader finds the RoPE base: 4.x reads rope_theta, 5.x rope_parameters.
    written = json.loads((out / "config.json").read_text())
    assert written["rope_theta"] == config.model.rope_theta
    if "rope_parameters" in written:
        assert written["rope_parameters"]["rope_theta"] == config.model.rope_theta
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    model, tokenizer = load_run(run_dir)
    assert type(hf_model).__name__ == hf_class

    ids = tokenizer.encode(TEXT)
    assert hf_tokenizer(TEXT)["input_ids"] == ids
    assert hf_tokenizer.decode(ids) == TEXT
    tokens_1T = torch.tensor([ids[:32]])
    with torch.no_grad():
        ours, theirs = model(tokens_1T).logits, hf_model(tokens_1T).logits
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-5)

    # Greedy decoding agrees with transformers' own generate().
    prompt_ids = [tokenizer.eot_id] + tokenizer.encode("Once upon a time")
    ours_text = generate_text(model, tokenizer, "Once upon a time", max_new_tokens=8, temperature=0)
    with torch.no_grad():
        hf_ids = hf_model.generate(torch.tensor([prompt_ids]), max_new_tokens=8, do_sample=False,
                                   min_new_tokens=8, pad_token_id=tokenizer.eot_id)
    assert hf_tokenizer.decode(hf_ids[0, 1:].tolist()) == ours_text


def test_export_refuses_a_non_empty_folder(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    assert main(["export-hf", str(tmp_path), str(tmp_path / "out")]) == 2
    assert "not an empty folder" in capsys.readouterr().err
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"


@pytest.mark.slow
def test_export_refuses_a_router_mixtral_cannot_hold(tmp_path, capsys):
    # Top-1 keeps the raw router probability by default (Switch); Mixtral would weight by 1.
    config = load_config(None, TINY + ["model.moe={num_experts: 4, top_k: 1, d_expert: 32}",
                                       "train.max_tokens=256"])
    train(config, tmp_path / "run")
    assert main(["export-hf", str(tmp_path / "run"), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert "model.moe.norm_topk_prob=null (top_k=1) cannot be exported" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "hf").exists() and not list(tmp_path.glob(".hf.*"))


@pytest.mark.slow
def test_export_refuses_shared_experts(tmp_path, capsys):
    # Mixtral has no always-on expert (Qwen2-MoE's shared expert is gated by a sigmoid: not
    # these semantics).
    config = load_config(None, TINY + ["model.moe={num_experts: 4, top_k: 2, d_expert: 32, "
                                       "num_shared_experts: 1, d_shared: 16}",
                                       "train.max_tokens=256"])
    train(config, tmp_path / "run")
    assert main(["export-hf", str(tmp_path / "run"), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert "model.moe.num_shared_experts=1 cannot be exported: Mixtral has no shared" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "hf").exists() and not list(tmp_path.glob(".hf.*"))


@pytest.mark.slow
def test_export_refuses_a_nonzero_expert_bias(tmp_path, capsys):
    # Mixtral picks the top-k by the probabilities it weights with: a bias on the choice alone
    # has no Hugging Face form.
    config = load_config(None, TINY + ["model.moe={num_experts: 4, top_k: 2, d_expert: 32, "
                                       "balance: bias, bias_update_rate: 0.01}",
                                       "train.max_tokens=256"])
    train(config, tmp_path / "run")
    model, _ = load_run(tmp_path / "run")
    assert model.layers[0].feed_forward.expert_bias.abs().max() == pytest.approx(0.01)
    assert main(["export-hf", str(tmp_path / "run"), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert "model.moe.balance with a nonzero expert bias (layer 0" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "hf").exists() and not list(tmp_path.glob(".hf.*"))
