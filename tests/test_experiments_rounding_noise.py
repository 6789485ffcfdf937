"""experiments/rounding_noise.py: the seed std, perturbation differences and their rms that
docs/findings/study-by-hand.md ("Rounding noise beside the seed spread") quotes, against hand counts."""

import importlib.util
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location(
    "rounding_noise", REPO_ROOT / "experiments" / "rounding_noise.py")
rounding_noise = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rounding_noise)

ARMS = {
    "moe": {"reference": {"0": 4.0, "1": 4.2, "2": 4.1},
            "mkl_cnr_avx2": {"0": 4.03}, "torch_default_kernels": {"0": 3.96},
            "mkl_compatible": {"0": 4.0}, "two_threads": {"0": 4.0}},
    "dense": {"reference": {"0": 3.0, "1": 3.1}, "mkl_cnr_avx2": {"0": 3.0}},
}


def test_summary_gives_hand_counted_std_differences_and_rms():
    summary = rounding_noise.summarize(ARMS, 0)
    moe = summary["moe"]
    # Seeds 4.0, 4.2, 4.1: mean 4.1, squares 0.01 + 0.01 + 0 over 2: std 0.1.
    assert abs(moe["seed_std"] - 0.1) < 1e-12 and moe["seeds"] == 3
    assert {name: round(d, 9) for name, d in moe["differences"].items()} == {
        "torch_default_kernels": -0.04, "mkl_cnr_avx2": 0.03, "two_threads": 0.0,
        "mkl_compatible": 0.0}
    # rms of +0.03, -0.04, 0, 0: sqrt(0.0025 / 4) = 0.025.
    assert abs(moe["rounding_rms"] - 0.025) < 1e-12
    dense = summary["dense"]  # only one perturbation run: the others are absent, not zero
    assert list(dense["differences"]) == ["mkl_cnr_avx2"] and dense["rounding_rms"] == 0.0


def test_render_marks_what_was_not_run_and_gives_the_ratio():
    record = {"steps": 100, "seeds": [0, 1, 2], "cpu": "Some CPU",
              "summary": rounding_noise.summarize(ARMS, 0)}
    text = rounding_noise.render(record)
    assert "`experiments/rounding_noise.py --steps 100 --seeds 0,1,2`" in text
    assert "| moe | 0.1000 (n=3) | -0.04000 | +0.03000 | 0 (identical) | 0 (identical) | 0.02500 |" in text
    assert "| dense | 0.0707 (n=2) | not run | 0 (identical) | not run | not run | 0.00000 |" in text
    assert "\nRounding rms over seed std: moe 0.25, dense 0.00.\n" in text


def test_the_moe_is_perturbed_first_so_a_stopped_experiment_has_its_row():
    plan = rounding_noise.perturbation_plan(["moe", "dense_active"], 0)
    assert plan[:4] == [("moe", 0, "torch_default_kernels"), ("moe", 0, "mkl_cnr_avx2"),
                        ("moe", 0, "two_threads"), ("moe", 0, "mkl_compatible")]
    assert len(plan) == 8 and all(name != "reference" for _, _, name in plan)
