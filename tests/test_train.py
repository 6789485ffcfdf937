"""The training engine: schedule, budget, checkpoints, a tiny run end to end, guards, CLI errors.

References are independent of the code under test: hand-computed learning rates, hand counts
of steps and tokens, ``numel`` of the loaded model, the optimizer's own state dict, and the
metrics file checked against the summary.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from moelab.cli import main
from moelab.codec import to_json
from moelab.config import load_config
from moelab.errors import MoelabError
from moelab.train import Schedule, generate_text, load_run, train
from moelab.train.checkpoint import _flatten_optimizer, _unflatten_optimizer
from moelab.train.step import StepPlan
from moelab.train.run_folder import RunFolder
from tiny_overrides import TINY_MOE_RUN

TINY = TINY_MOE_RUN + ["train.max_tokens=5120", "train.eval_interval=10", "train.sample_tokens=8"]


def tiny_config(*overrides: str):
    return load_config(None, TINY + list(overrides))


# --------------------------------------------------------------------------------------------
# Pure pieces
# --------------------------------------------------------------------------------------------


def test_lr_schedule_matches_hand_values():
    # 10 steps, 2 warmup steps, peak 1.0, floor 0.1: warmup 0.5, 1.0; then cosine over 7 steps.
    lrs = [Schedule(10, 2, 1.0, 0.1).lr_at(step) for step in range(10)]
    assert lrs[0] == pytest.approx(0.5) and lrs[1] == pytest.approx(1.0)
    assert lrs[2] == pytest.approx(1.0)  # cosine starts at the peak
    assert lrs[9] == pytest.approx(0.1)  # and ends at the floor on the last step
    midpoint = 2 + 3.5  # half way through the 7 decay intervals: cos(pi/2) = 0
    assert Schedule(10, 2, 1.0, 0.1).lr_at(midpoint) == pytest.approx(0.55)
    assert all(a >= b for a, b in zip(lrs[1:], lrs[2:]))
    assert Schedule(10, 0, 2.0, 0.0).lr_at(0) == pytest.approx(2.0)  # no warmup
    # Warmup over all steps but the last: the last one is still the floor, not the peak.
    assert [Schedule(2, 1, 1.0, 0.1).lr_at(step) for step in range(2)] == pytest.approx([1.0, 0.1])
    assert Schedule(1, 0, 1.0, 0.1).lr_at(0) == pytest.approx(0.1)  # a one-step run: its last step


def test_wsd_lr_matches_hand_values_for_both_decay_shapes():
    # 11 steps, 2 warmup, the last 5 in the decay (steps 6-10, t = 0, 1/4, 1/2, 3/4, 1),
    # peak 1.0, floor 0.1: lr = 0.1 + 0.9 * (1 - t) or 0.1 + 0.9 * (1 - sqrt(t)).
    def wsd(step, shape):
        return Schedule(11, 2, 1.0, 0.1, "wsd", decay_steps=5, decay_shape=shape).lr_at(step)

    for shape in ("linear", "sqrt"):
        assert wsd(0, shape) == pytest.approx(0.5)  # warmup as with cosine
        assert wsd(1, shape) == pytest.approx(1.0)  # end of warmup
        assert [wsd(s, shape) for s in (2, 3.5, 5)] == pytest.approx([1.0] * 3)  # stable
        assert wsd(6, shape) == pytest.approx(1.0)  # the decay starts at the peak
        assert wsd(10, shape) == pytest.approx(0.1)  # and ends on the floor at the last step
    assert [wsd(s, "linear") for s in (7, 8, 9)] == pytest.approx([0.775, 0.55, 0.325])
    # 1 - sqrt(1/4) = 0.5; 1 - sqrt(1/2) = 0.29289; 1 - sqrt(3/4) = 0.13397
    assert [wsd(s, "sqrt") for s in (7, 8, 9)] == pytest.approx([0.55, 0.363604, 0.220577],
                                                                abs=1e-6)
    # A decay shorter than two steps leaves only the last step on the floor.
    assert [Schedule(4, 1, 1.0, 0.1, "wsd", decay_steps=0).lr_at(s) for s in range(4)] == \
        pytest.approx([1.0, 1.0, 1.0, 0.1])


def test_cosine_is_unchanged_by_the_wsd_options():
    """The old cosine, written out here, equals the Schedule bit for bit whatever the wsd
    arguments."""
    def old_cosine(step, total, warmup, peak, ratio):
        if step < warmup:
            return peak * (step + 1) / warmup
        floor = ratio * peak
        progress = min((step - warmup) / (total - 1 - warmup), 1.0)
        return floor + 0.5 * (1.0 + math.cos(math.pi * progress)) * (peak - floor)

    for step in range(50):
        expected = old_cosine(step, 50, 5, 3e-3, 0.1)
        assert Schedule(50, 5, 3e-3, 0.1).lr_at(step) == expected
        assert Schedule(50, 5, 3e-3, 0.1, "cosine", decay_steps=10,
                        decay_shape="linear").lr_at(step) == expected
    assert StepPlan.from_config(tiny_config(), 1).decay_steps == 0  # cosine is the default
    wsd_plan = StepPlan.from_config(tiny_config("train.schedule=wsd"), 1)
    assert wsd_plan.decay_steps == int(0.2 * wsd_plan.total_steps)


@pytest.mark.parametrize("override, message", [
    ("train.schedule=linear", "train.schedule='linear' is invalid: allowed cosine, wsd"),
    ("train.decay_shape=cosine", "train.decay_shape='cosine' is invalid: allowed linear, sqrt"),
    ("train.decay_fraction=0", r"train.decay_fraction=0.0 is invalid: allowed \(0, 1\]"),
    ("train.decay_fraction=1.5", r"train.decay_fraction=1.5 is invalid: allowed \(0, 1\]"),
])
def test_bad_schedule_values_are_one_line_errors(override, message):
    with pytest.raises(MoelabError, match=message):
        tiny_config(override).validate()


def test_wsd_decay_and_warmup_must_fit_in_the_run():
    tiny_config("train.warmup_fraction=0.8", "train.decay_fraction=0.2").validate()  # cosine
    tiny_config("train.schedule=wsd", "train.warmup_fraction=0.8",
                "train.decay_fraction=0.2").validate()
    with pytest.raises(MoelabError, match="decay_fraction=0.3 is invalid with wsd"):
        tiny_config("train.schedule=wsd", "train.warmup_fraction=0.8",
                    "train.decay_fraction=0.3").validate()


def test_token_budget_rounds_down_to_whole_steps():
    config = tiny_config("train.max_tokens=1000", "train.batch_size=2", "train.micro_batch_size=1")
    plan = StepPlan.from_config(config, world_size=1)
    assert plan.tokens_per_step == 2 * 32
    assert plan.total_steps == 15  # 1000 // 64
    assert plan.accumulation_steps == 2
    with pytest.raises(MoelabError, match="max_tokens=63"):
        StepPlan.from_config(tiny_config("train.max_tokens=63", "train.batch_size=2"), 1)
    with pytest.raises(MoelabError, match="divisible by the number of processes"):
        StepPlan.from_config(tiny_config("train.batch_size=3"), 2)
    with pytest.raises(MoelabError, match="micro_batch_size=3"):
        StepPlan.from_config(tiny_config("train.micro_batch_size=3"), 1)


def test_optimizer_state_survives_the_safetensors_round_trip():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, betas=(0.8, 0.9))
    for _ in range(3):
        model(torch.randn(5, 4)).square().sum().backward()
        optimizer.step()
    original = optimizer.state_dict()
    tensors, structure = _flatten_optimizer(optimizer)
    structure = json.loads(json.dumps(structure))  # it must survive JSON
    restored = _unflatten_optimizer(tensors, structure)
    assert restored["param_groups"] == original["param_groups"]
    assert restored["state"].keys() == original["state"].keys()
    for index, state in original["state"].items():
        for name, value in state.items():
            assert torch.equal(restored["state"][index][name], value)


def test_metrics_truncation_drops_events_after_the_checkpoint(tmp_path):
    run = RunFolder(tmp_path)
    for step in (1, 2, 3, 4):
        run.append_metrics({"kind": "train", "step": step})
    with open(run.metrics_path, "a") as f:
        f.write('{"kind": "train", "st')  # the torn line of a killed run
    run.truncate_metrics(2)
    assert [e["step"] for e in run.read_metrics()] == [1, 2]


# --------------------------------------------------------------------------------------------
# A tiny run end to end from the CLI
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One MoE run of 20 steps through ``moelab train`` (shared by the tests below)."""
    folder = tmp_path_factory.mktemp("tiny") / "run"
    sets = [arg for item in TINY + ["train.checkpoint_interval=10"] for arg in ("--set", item)]
    config_file = folder.parent / "tiny.yaml"
    config_file.write_text("{}\n")
    with pytest.MonkeyPatch.context() as patch:  # the session's cache, as conftest sets it
        patch.setenv("MOELAB_CACHE", str(tmp_path_factory.getbasetemp() / "moelab-cache"))
        assert main(["train", str(config_file), "--out", str(folder), *sets]) == 0
    return folder


@pytest.mark.slow
def test_tiny_run_learns_and_its_files_agree(tiny_run):
    run = RunFolder(tiny_run)
    summary = run.read_summary()
    events = run.read_metrics()
    train_events = [e for e in events if e["kind"] == "train"]
    eval_events = [e for e in events if e["kind"] == "eval"]

    # Budget: 5120 tokens / (8 sequences x 32 tokens) = 20 steps, logged every step.
    assert summary["status"] == "complete"
    assert summary["steps"] == 20 and summary["tokens"] == 20 * 8 * 32
    assert [e["step"] for e in train_events] == list(range(1, 21))
    assert [e["tokens"] for e in train_events] == [256 * s for s in range(1, 21)]
    assert [e["step"] for e in eval_events] == [10, 20]

    # It learns: from about ln(512) = 6.24 at the start to clearly lower.
    assert train_events[0]["ce_loss"] == pytest.approx(math.log(512), abs=0.15)
    assert eval_events[-1]["val_loss"] < train_events[0]["ce_loss"] - 0.5

    # The objective is ce + 0.01 lb + 0.001 z (the config's default coefficients).
    for e in train_events:
        assert e["loss"] == pytest.approx(e["ce_loss"] + 0.01 * e["lb_loss"] + 0.001 * e["z_loss"],
                                          rel=1e-5)

    # Summary vs metrics.
    best = min(eval_events, key=lambda e: e["val_loss"])
    assert summary["best_val_loss"] == best["val_loss"]
    assert summary["best_val_step"] == best["step"]
    assert summary["final_val_loss"] == eval_events[-1]["val_loss"]
    assert summary["final_val_bpb"] == eval_events[-1]["val_bpb"]
    assert summary["routing"] == eval_events[-1]["routing"] and len(summary["routing"]) == 2
    assert summary["collapse"] is (max(l["busiest_fraction"] for l in summary["routing"]) > 0.9)

    # Parameter counts vs the loaded model's tensors (4 experts, 2 of them active per token).
    model, tokenizer = load_run(tiny_run)
    assert summary["total_params"] == sum(p.numel() for p in model.parameters())
    expert_params = sum(p.numel() for n, p in model.named_parameters() if n.endswith(("w1", "w2", "w3")))
    assert summary["active_params"] == summary["total_params"] - expert_params // 2

    # Bits per byte: nats -> bits, tokens -> bytes of the validation split.
    data_bytes_per_token = summary["final_val_loss"] / math.log(2) / summary["final_val_bpb"]
    assert 1.0 < data_bytes_per_token < 8.0

    # FLOPs per token, by hand: 6N over the active parameters, and the kaplan count (6N without
    # the tied embedding, plus attention over the 32-token context of 2 layers of width 32 and
    # the 32 x 512 output matmul). The logged FLOP/s use the kaplan count.
    embedding = model.tok_embeddings.weight.numel()
    assert "flops_per_token" not in summary  # the old, ambiguous name
    assert summary["flops_per_token_6n"] == 6 * summary["active_params"]
    assert "flops_per_token_full" not in summary  # renamed in schema version 2
    assert summary["flops_per_token_kaplan"] == (6 * (summary["active_params"] - embedding)
                                                 + 6 * 2 * 32 * 32 + 6 * 32 * 512)
    flops_full = summary["flops_per_token_kaplan"]
    for e in train_events:
        assert e["flops_per_s"] == pytest.approx(e["tokens_per_s"] * flops_full, rel=1e-12)

    # Files: config, tokenizer copy, samples, one checkpoint (the final one).
    assert run.read_config().train.max_tokens == 5120
    assert tokenizer.vocab_size == 512
    assert "Once upon a time" in run.samples_path.read_text()
    assert json.loads((run.checkpoints_dir / "latest.json").read_text())["step"] == 20
    assert [p.name for p in run.checkpoints_dir.glob("step_*")] == ["step_00000020"]


@pytest.mark.slow
def test_bits_per_byte_divide_by_the_bytes_of_the_scored_target_tokens(tiny_run):
    """The reference decodes the scored targets (every window but its first token) back to text
    and counts its UTF-8 bytes, a separator counting as its line "\\n<|endoftext|>\\n" of the
    text layout; nothing of moelab's byte accounting is used."""
    from moelab.data import EOT_TEXT, prepare_data, validation_windows

    config = RunFolder(tiny_run).read_config()
    data = prepare_data(config.data, config.tokenizer_vocab_size, progress=False)
    windows_NT = validation_windows(data.valid.tokens, 32, 8)
    target_bytes = 0
    for targets_T in windows_NT[:, 1:]:
        text = data.tokenizer.decode(targets_T.tolist())
        assert "\ufffd" not in text  # no character cut by a window edge: the count is exact
        separators = text.count(EOT_TEXT)
        target_bytes += (len(text.encode("utf-8")) - separators * len(EOT_TEXT)
                         + separators * len(f"\n{EOT_TEXT}\n"))
    bytes_per_target = target_bytes / windows_NT[:, 1:].numel()

    summary = RunFolder(tiny_run).read_summary()
    assert summary["final_val_bpb"] == pytest.approx(
        summary["final_val_loss"] / math.log(2) / bytes_per_target, rel=1e-12)
    for event in RunFolder(tiny_run).read_metrics():
        if event["kind"] == "eval":
            assert event["val_bpb"] == pytest.approx(
                event["val_loss"] / math.log(2) / bytes_per_target, rel=1e-12)


@pytest.mark.slow
def test_final_val_loss_is_the_mean_cross_entropy_of_every_validation_target(tmp_path):
    """The reference scores the run's final weights (``moelab.load_run``, the top-level lazy
    import) on windows cut by hand, all in one batch, with one plain F.cross_entropy. The run
    evaluates 7 windows in batches of its micro batch, 4 and 3, so unequal batches must be
    weighted by their size. Expert loads are counted by hand from the router logits."""
    import numpy as np
    import torch.nn.functional as F

    import moelab
    from moelab.data import prepare_data

    config = tiny_config("train.micro_batch_size=4", "train.eval_windows=7",
                         "train.max_tokens=768", "train.sample_tokens=0")
    summary = train(config, tmp_path / "run")
    model, _ = moelab.load_run(tmp_path / "run")

    # Window i: the 33 tokens from i * (len // 7) of the validation stream, as documented.
    valid = prepare_data(config.data, config.tokenizer_vocab_size, progress=False).valid.tokens
    stride = len(valid) // 7
    windows_NW = torch.from_numpy(
        np.stack([valid[i * stride : i * stride + 33] for i in range(7)]).astype(np.int64))
    router_inputs = []  # each MoE layer's router sees its ffn_norm output
    hooks = [layer.ffn_norm.register_forward_hook(lambda mod, args, out: router_inputs.append(out))
             for layer in model.layers]
    with torch.no_grad():
        logits_NTV = model(windows_NW[:, :-1]).logits
    for hook in hooks:
        hook.remove()
    val_loss = F.cross_entropy(logits_NTV.flatten(0, 1).float(), windows_NW[:, 1:].flatten())
    assert summary.final_val_loss == pytest.approx(float(val_loss), rel=1e-5)

    # Top-2 of 4 experts for each of 7 * 32 tokens: 448 slots per layer.
    slots = 7 * 32 * 2
    assert len(summary.routing) == len(router_inputs) == 2
    for layer, h_NTD, stats in zip(model.layers, router_inputs, summary.routing):
        with torch.no_grad():
            experts_TK = (h_NTD.flatten(0, 1) @ layer.feed_forward.router.weight.T).topk(2).indices
        expected_load = (torch.bincount(experts_TK.flatten(), minlength=4) / slots).tolist()
        assert sum(stats["expert_load"]) == pytest.approx(1.0, abs=1e-12)
        # One slot of slack: batched and unbatched router matmuls may round a near tie apart.
        assert stats["expert_load"] == pytest.approx(expected_load, abs=1.01 / slots)


@pytest.mark.slow
def test_eval_cli_reproduces_the_final_val_loss(tiny_run, capsys):
    assert main(["eval", str(tiny_run), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    summary = RunFolder(tiny_run).read_summary()
    assert result["val_loss"] == pytest.approx(summary["final_val_loss"], rel=1e-6)
    assert result["bits_per_byte"] == pytest.approx(summary["final_val_bpb"], rel=1e-6)


@pytest.mark.slow
def test_eval_cli_windows_scores_that_many_evenly_spaced_windows(tiny_run, capsys):
    """``--windows 11`` against the model's mean cross-entropy on 11 windows cut by hand."""
    import numpy as np
    import torch.nn.functional as F

    from moelab.data import prepare_data

    assert main(["eval", str(tiny_run), "--windows", "11", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    config = RunFolder(tiny_run).read_config()
    valid = prepare_data(config.data, config.tokenizer_vocab_size, progress=False).valid.tokens
    stride, width = len(valid) // 11, config.model.max_seq_len + 1
    windows_NW = torch.from_numpy(
        np.stack([valid[i * stride : i * stride + width] for i in range(11)]).astype(np.int64))
    model, _ = load_run(tiny_run)
    with torch.no_grad():
        logits_NTV = model(windows_NW[:, :-1]).logits
    expected = F.cross_entropy(logits_NTV.flatten(0, 1).float(), windows_NW[:, 1:].flatten())
    assert result["windows"] == 11
    assert result["val_loss"] == pytest.approx(float(expected), rel=1e-5)
    assert result["val_loss"] != pytest.approx(RunFolder(tiny_run).read_summary()["final_val_loss"],
                                               rel=1e-6)


@pytest.mark.slow
def test_eval_cli_refuses_more_windows_than_the_split_holds_naming_the_flag(tiny_run, capsys):
    assert main(["eval", str(tiny_run), "--windows", "100000000"]) == 2
    err = capsys.readouterr().err
    assert "too few for 100000000 windows" in err and "windows (--windows)" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_eval_cli_refuses_a_malformed_device_on_one_line(tiny_run, capsys):
    assert main(["eval", str(tiny_run), "--device", "cuda:x"]) == 2
    err = capsys.readouterr().err
    assert "device='cuda:x' is invalid: allowed auto, cpu, cuda, cuda:N" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_eval_on_a_folder_holding_the_same_validation_text_gives_the_same_loss(
        tiny_run, tmp_path, capsys):
    import lzma

    from moelab.data.text_sources import sample_path

    (tmp_path / "valid.txt").write_bytes(lzma.decompress(sample_path("valid").read_bytes()))
    (tmp_path / "train.txt").write_text("unused\n<|endoftext|>\n")
    assert main(["eval", str(tiny_run), "--data", str(tmp_path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    summary = RunFolder(tiny_run).read_summary()
    assert result["val_loss"] == pytest.approx(summary["final_val_loss"], rel=1e-6)
    assert result["bits_per_byte"] == pytest.approx(summary["final_val_bpb"], rel=1e-6)


@pytest.mark.slow
def test_generate_is_deterministic_for_a_seed(tiny_run, capsys):
    args = ["generate", str(tiny_run), "--prompt", "Once upon a time", "--max-new-tokens", "12",
            "--temperature", "1.0", "--top-k", "20"]
    outputs = []
    for seed in ("1", "1", "2"):
        assert main(args + ["--seed", seed]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    assert outputs[0] != outputs[2]
    assert all(o.startswith("Once upon a time") for o in outputs)


@pytest.mark.slow
def test_temperature_zero_is_greedy(tiny_run):
    from moelab.train.generate import generate_tokens

    model, tokenizer = load_run(tiny_run)
    prompt = [tokenizer.eot_id] + tokenizer.encode("Once upon a time")
    greedy = list(prompt)
    with torch.no_grad():
        for _ in range(6):
            greedy.append(int(model(torch.tensor([greedy[-32:]])).logits[0, -1].argmax()))
    assert generate_tokens(model, prompt, 6, temperature=0.0, seed=1) == greedy
    assert generate_tokens(model, prompt, 6, temperature=0.0, seed=2) == greedy


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [float("nan"), float("inf"), -0.5])
def test_generate_refuses_a_temperature_that_is_not_a_finite_non_negative_number(
        tiny_run, temperature):
    model, tokenizer = load_run(tiny_run)
    with pytest.raises(MoelabError, match=rf"temperature={temperature} is invalid: must be a "
                                          r"finite number >= 0"):
        generate_text(model, tokenizer, "Once", 4, temperature=temperature)


@pytest.mark.slow
def test_resume_of_a_finished_run_returns_its_summary(tiny_run):
    config = RunFolder(tiny_run).read_config()
    assert to_json(train(config, tiny_run, resume=True)) == RunFolder(tiny_run).read_summary()
    with pytest.raises(MoelabError, match="already holds a run"):
        train(config, tiny_run)


@pytest.mark.slow
def test_gradient_accumulation_equals_the_full_batch(tmp_path):
    """A dense model's objective is a mean over tokens: 4 micro batches of 2 sequences give the
    same losses and val loss as one batch of 8, up to float rounding."""
    dense = ["model.moe=null", "train.max_tokens=1536", "train.sample_tokens=0"]
    full = train(tiny_config(*dense), tmp_path / "full")
    accumulated = train(tiny_config(*dense, "train.micro_batch_size=2"), tmp_path / "accumulated")
    losses = {name: [e["loss"] for e in RunFolder(tmp_path / name).read_metrics() if e["kind"] == "train"]
              for name in ("full", "accumulated")}
    assert len(losses["full"]) == 6
    assert losses["accumulated"] == pytest.approx(losses["full"], rel=1e-5)
    assert accumulated.final_val_loss == pytest.approx(full.final_val_loss, rel=1e-5)


@pytest.mark.slow
def test_bfloat16_autocast_trains(tmp_path):
    summary = train(tiny_config("train.dtype=bfloat16", "train.max_tokens=1536"), tmp_path / "run")
    first = RunFolder(tmp_path / "run").read_metrics()[0]
    assert first["ce_loss"] == pytest.approx(math.log(512), abs=0.15)
    assert summary.final_val_loss < first["ce_loss"] - 0.2


# --------------------------------------------------------------------------------------------
# Guards
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_nan_loss_stops_the_run_naming_the_step_and_keeps_the_last_good_checkpoint(
        tmp_path, monkeypatch):
    from moelab.model import Transformer

    forward = Transformer.forward
    calls = {"n": 0}

    def forward_with_nan_at_step_5(self, tokens_BT, targets_BT=None, **kwargs):
        out = forward(self, tokens_BT, targets_BT, **kwargs)
        if self.training:
            calls["n"] += 1
            if calls["n"] == 5:  # one forward per step (no accumulation)
                out.loss = out.loss * float("nan")
        return out

    monkeypatch.setattr(Transformer, "forward", forward_with_nan_at_step_5)
    # Step 5 is an eval step: the check must come before its val loss is logged.
    config = tiny_config("train.checkpoint_interval=2", "train.log_interval=3",
                         "train.eval_interval=5")
    with pytest.raises(MoelabError, match=r"non-finite loss or gradient at step 5\b.*step_00000004"):
        train(config, tmp_path / "run")
    run = RunFolder(tmp_path / "run")
    assert json.loads((run.checkpoints_dir / "latest.json").read_text())["step"] == 4
    assert max(e["step"] for e in run.read_metrics()) == 3  # nothing logged from broken weights
    assert run.read_summary() is None


@pytest.mark.slow
def test_a_full_disk_at_a_checkpoint_is_a_clear_error_and_keeps_the_previous_one(
        tmp_path, monkeypatch):
    from safetensors import SafetensorError

    import moelab.train.checkpoint as checkpoint

    real_save_file, saves = checkpoint.save_file, {"n": 0}

    def save_file_until_the_disk_fills(tensors, path, *args, **kwargs):
        saves["n"] += 1
        if saves["n"] > 1:  # the first checkpoint fits, the second does not
            raise SafetensorError("Error while serializing: I/O error: No space left on device")
        real_save_file(tensors, path, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "save_file", save_file_until_the_disk_fills)
    config = tiny_config("train.checkpoint_interval=2", "train.max_tokens=1536")
    with pytest.raises(MoelabError, match=r"cannot write .*trainer_state.safetensors.*No space left"):
        train(config, tmp_path / "run")
    checkpoints = RunFolder(tmp_path / "run").checkpoints_dir
    assert json.loads((checkpoints / "latest.json").read_text())["step"] == 2
    assert sorted(p.name for p in (checkpoints / "step_00000002").iterdir()) == [
        "config.yaml", "model.safetensors", "trainer_state.json", "trainer_state.safetensors"]
    assert not list((checkpoints / "step_00000004").glob("*.tmp"))  # no half-written file left


@pytest.mark.slow
def test_resume_with_another_config_is_refused(tmp_path):
    config = tiny_config("train.max_tokens=512")
    train(config, tmp_path / "run")
    other = tiny_config("train.max_tokens=512", "train.lr=0.02")
    with pytest.raises(MoelabError, match="differs at train.lr"):
        train(other, tmp_path / "run", resume=True)


def _without_timings(summary: dict) -> dict:
    return {k: v for k, v in summary.items()
            if k not in ("wall_time_s", "train_time_s", "train_cpu_time_s", "tokens_per_s",
                         "tokens_per_cpu_s", "flops_per_s", "step_time_s", "peak_memory_bytes",
                         "mfu", "peak_flops_per_s", "peak_flops_source")}


@pytest.mark.slow
def test_resume_refuses_a_data_cache_whose_tokenizer_is_not_the_runs(tmp_path):
    """A rebuilt cache (here: one of fewer stories, so other BPE merges) maps the same ids to
    other text; continuing the run on it would silently change what it learns."""
    import dataclasses
    import shutil

    from moelab.data import prepare_data

    config = tiny_config("train.max_tokens=768", "train.checkpoint_interval=2",
                         "train.sample_tokens=0")
    train(config, tmp_path / "run")
    run = RunFolder(tmp_path / "run")
    run.summary_path.unlink()  # as if killed after its last checkpoint
    other = prepare_data(dataclasses.replace(config.data, max_train_stories=100), 512,
                         progress=False).tokenizer
    assert other.encode("Once upon a time") != load_run(run.path)[1].encode("Once upon a time")
    shutil.copyfile(other.path, run.tokenizer_path)  # the run was trained with the other one
    run_tokenizer = run.tokenizer_path.read_bytes()

    with pytest.raises(MoelabError, match=r"holds another tokenizer than the one run .* was "
                                          r"trained with .*start a new run"):
        train(config, run.path, resume=True)
    assert run.tokenizer_path.read_bytes() == run_tokenizer  # nothing overwritten
    assert run.read_summary() is None


@pytest.mark.slow
def test_external_loggers_are_closed_when_the_run_ends_and_when_it_fails(tmp_path, monkeypatch):
    import moelab.train.loop as loop

    closed = []

    class RecordingLoggers:
        def __init__(self, config, run, continuing=False):
            pass

        def log(self, event):
            pass

        def summarize(self, summary):
            pass

        def close(self):
            closed.append(True)

    monkeypatch.setattr(loop, "ExternalLoggers", RecordingLoggers)
    config = tiny_config("train.max_tokens=512", "train.sample_tokens=0")
    train(config, tmp_path / "complete")
    assert closed == [True]

    def full_disk(*args, **kwargs):
        raise MoelabError("cannot write step_00000002: No space left on device")

    monkeypatch.setattr(loop, "save_checkpoint", full_disk)
    with pytest.raises(MoelabError, match="No space left"):
        train(config, tmp_path / "failed")
    assert closed == [True, True]


@pytest.mark.slow
def test_a_corrupt_summary_is_a_clear_error_and_resume_writes_it_again(tmp_path):
    config = tiny_config("train.max_tokens=512", "train.sample_tokens=4")
    first = train(config, tmp_path / "run")
    run = RunFolder(tmp_path / "run")
    samples = run.samples_path.read_text()
    for damage in ('{"status": "compl', "[1, 2]"):
        run.summary_path.write_text(damage)
        with pytest.raises(MoelabError, match=r"summary.json is corrupt .*: resume the run"):
            run.read_summary()
        assert not run.is_complete()
        again = train(config, run.path, resume=True)  # from the final checkpoint: no step left
        assert _without_timings(to_json(again)) == _without_timings(to_json(first))
        assert run.read_summary() == to_json(again)
        assert run.samples_path.read_text() == samples


@pytest.mark.parametrize("damaged", ["trainer_state.json", "trainer_state.safetensors",
                                     "model.safetensors"])
def test_a_corrupt_checkpoint_is_a_one_line_error_naming_the_file(tmp_path, capsys, damaged):
    config_file = tmp_path / "tiny.yaml"
    config_file.write_text("{}\n")
    sets = [arg for item in TINY + ["train.max_tokens=512", "train.sample_tokens=0"]
            for arg in ("--set", item)]
    args = ["train", str(config_file), "--out", str(tmp_path / "run"), *sets]
    assert main(args) == 0
    run = RunFolder(tmp_path / "run")
    path = run.checkpoints_dir / "step_00000002" / damaged
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # a torn file
    run.summary_path.unlink()
    capsys.readouterr()

    assert main(args + ["--resume"]) == 2
    err = capsys.readouterr().err
    assert f"step_00000002/{damaged} is corrupt" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args, message", [
    (["train", "no-such-config", "--out", "{tmp}/r"], "neither a file nor a preset"),
    (["train", "demo", "--out", "{tmp}/r", "--set", "train.batch_size=0"], "train.batch_size=0"),
    (["train", "demo", "--out", "{tmp}/r", "--set", "train.max_tokens=100"], "train.max_tokens=100"),
    (["train", "demo", "--out", "{tmp}/file/r"], "cannot create run folder"),
    (["eval", "{tmp}"], "not a run folder"),
    (["generate", "{tmp}", "--prompt", "x", "--top-k", "0"], "--top-k"),
    (["generate", "{tmp}", "--prompt", "x", "--temperature", "nan"], "nan is invalid"),
    (["generate", "{tmp}", "--prompt", "x", "--temperature", "inf"], "inf is invalid"),
    (["generate", "{tmp}", "--prompt", "x", "--temperature", "-1"], "-1 is invalid"),
    (["export-hf", "{tmp}", "{tmp}/hf"], "not a run folder"),
])
def test_bad_cli_input_exits_2_with_one_line(tmp_path, capsys, args, message):
    (tmp_path / "file").write_text("a file, not a folder")
    with pytest.raises(SystemExit) as exit_info:  # argparse errors exit directly
        raise SystemExit(main([a.format(tmp=tmp_path) for a in args]))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("package", ["tensorboard", "wandb"])
def test_asking_for_a_missing_logging_package_is_a_clear_error(tmp_path, package):
    import importlib.util

    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed")
    with pytest.raises(MoelabError,
                       match=f"train.logging.{package}=true needs the {package} package"):
        train(tiny_config(f"train.logging.{package}=true"), tmp_path / "run")
