"""The MoE law forms beyond Abnar et al. against what their papers publish, as far as it could be
read (tests/fixtures/moe_laws_published.json says what was searched and found for each).

Clark et al. 2022 and Krajewski et al. 2024: no published coefficient was reachable, so there is
no fixture; the test checks that the fixture says so, so that a later reader does not take the
recovery tests (tests/test_scaling_moe_laws.py) for a check against the paper. Ludziejewski et
al. 2025: a third-party transcription whose exponent signs are unreliable; at E = 1 every Ê term
is 1 whatever its sign, so moelab's joint law there must be the dense law the transcribed a,
alpha, b, beta, c give, written out here with numpy.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from moelab.scaling.laws import JOINT

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "moe_laws_published.json").read_text())


@pytest.mark.parametrize("form", ["clark", "granularity"])
def test_forms_without_reachable_coefficients_say_so(form):
    entry = FIXTURE[form]
    assert entry["status"] == "not reachable" and "transcribed" not in entry
    assert entry["searched_for"] and "fixture" in entry["found"]


def test_the_joint_law_at_one_expert_is_the_transcribed_dense_law():
    entry = FIXTURE["joint"]
    assert entry["status"] == "third-party transcription only"
    p = entry["transcribed"]
    active = np.geomspace(1e7, 3e9, 7)
    tokens = np.geomspace(1e9, 1e12, 7)
    dense = p["a"] * active ** -p["alpha"] + p["b"] * tokens ** -p["beta"] + p["c"]
    # Any value of the Ê exponents: at E = 1, Ê = 1 and ln Ê = 0 remove them.
    for delta, omega, gamma, zeta in ((0.2285, -0.5529, -0.0098, 0.0259), (-0.3, 0.4, 0.02, -0.01)):
        params = {"a": p["a"], "b": p["b"], "c": p["c"], "alpha": p["alpha"], "beta": p["beta"],
                  "delta": delta, "omega": omega, "gamma": gamma, "zeta": zeta}
        law = JOINT.predict_loss(params, N_active=active, D=tokens, E=np.ones_like(active))
        np.testing.assert_allclose(law, dense, rtol=1e-12)
    # The transcribed dense law falls with size and data toward c, as a loss must.
    assert np.all(np.diff(dense) < 0) and dense[-1] > p["c"]
