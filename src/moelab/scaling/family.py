"""The architecture family the laws' optima range over: how many of a model's N total
parameters one token uses at sparsity S.

    N_active = N * (shared_fraction + (1 - shared_fraction) * (1 - S)),

where ``shared_fraction`` is the share of parameters outside the experts (attention,
embeddings, norms, router). The optima (``optimal``), the IsoFLOP analysis and the throughput
model (``throughput``) all map N to N_active this one way.
"""

from __future__ import annotations

import numpy as np


def active_params(total_params, sparsity, shared_fraction: float):
    """N_active of the architecture family (see the module docstring)."""
    return total_params * (shared_fraction + (1.0 - shared_fraction) * (1.0 - sparsity))


def estimate_shared_fraction(total_params: np.ndarray, active: np.ndarray,
                             sparsity: np.ndarray) -> float | None:
    """Least-squares shared_fraction phi from points of one family: N_act/N = phi + (1-phi)(1-S).

    None when no point is sparse: at S = 0 every phi fits, so the points say nothing about it.
    """
    ratio = np.asarray(active, dtype=np.float64) / np.asarray(total_params, dtype=np.float64)
    sparse = np.asarray(sparsity) > 0
    if not sparse.any():
        return None
    # ratio - (1 - S) = phi * S
    s = np.asarray(sparsity, dtype=np.float64)[sparse]
    phi = float(np.sum((ratio[sparse] - (1.0 - s)) * s) / np.sum(s * s))
    return min(max(phi, 0.0), 1.0)
