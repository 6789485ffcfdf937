"""experiments/recipe.py --rescore: the spreads docs/recipe.md quotes, against hand counts."""

import importlib.util
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("recipe", REPO_ROOT / "experiments" / "recipe.py")
recipe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(recipe)


def rescore_entry(losses_by_arm, seeds=(0, 1, 2)):
    arms = {arm: {"seeds": list(seeds), "val_loss": {"128": losses}, "std": {"128": 0.0}}
            for arm, losses in losses_by_arm.items()}
    return {"setting": "study", "arms": arms}


def test_print_rescore_gives_the_hand_counted_paired_spread(capsys):
    # dense_active - moe: +0.05, 0, +0.10, std 0.05; dense_total - moe: +0.01, +0.02, +0.03, std 0.01.
    recipe.print_rescore(rescore_entry({"moe": [3.0, 3.1, 3.2], "dense_active": [3.05, 3.1, 3.3],
                                        "dense_total": [3.01, 3.12, 3.23]}))
    out = capsys.readouterr().out
    assert "paired spread dense_active - moe: 128 windows 0.0500" in out
    assert "paired spread dense_total - moe: 128 windows 0.0100" in out


def test_print_rescore_pairs_only_arms_with_the_moes_seeds(capsys):
    entry = rescore_entry({"moe": [3.0, 3.1, 3.2], "dense_active": [3.05, 3.1, 3.3]})
    entry["arms"]["dense_active"]["seeds"] = [0, 1, 5]
    recipe.print_rescore(entry)
    assert "paired spread" not in capsys.readouterr().out
