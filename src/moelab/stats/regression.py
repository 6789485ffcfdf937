"""Least squares with standard errors: ordinary (homoscedastic, independent errors) and
cluster-robust (errors correlated within clusters, independent between them).

The cluster-robust covariance is the CR1 sandwich ``(X'X)^-1 (sum_g s_g s_g') (X'X)^-1 x
G / (G - 1) x (n - 1) / (n - k)``, s_g = X_g' e_g the score of cluster g, with t of G - 1
degrees of freedom for its intervals (Cameron & Miller 2015, "A practitioner's guide to
cluster-robust inference", J. Human Resources 50:317-372, sections IIC and VIC).

numpy and scipy only: no torch, nothing else of moelab.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Sequence

import numpy as np


@dataclass(frozen=True)
class Coefficients:
    """Fitted coefficients with their standard errors and the t degrees of freedom."""

    values: np.ndarray
    standard_errors: np.ndarray
    df: int


def least_squares(design_NK: np.ndarray, y_N: np.ndarray) -> Coefficients:
    """Ordinary least squares, standard errors from the residual variance (n - k df)."""
    coefficients, *_ = np.linalg.lstsq(design_NK, y_N, rcond=None)
    df = len(y_N) - design_NK.shape[1]
    residual = y_N - design_NK @ coefficients
    variance = float(residual @ residual) / df
    errors = np.sqrt(np.diag(variance * np.linalg.inv(design_NK.T @ design_NK)))
    return Coefficients(coefficients, errors, df)


def clustered_least_squares(design_NK: np.ndarray, y_N: np.ndarray,
                            clusters: Sequence[Any]) -> Coefficients:
    """Least squares with CR1 cluster-robust standard errors, df = clusters - 1. ``clusters``
    labels each row (sortable labels: the scores are summed in sorted order)."""
    bread = np.linalg.inv(design_NK.T @ design_NK)
    coefficients = bread @ design_NK.T @ y_N
    residual = y_N - design_NK @ coefficients
    groups = sorted(set(clusters))
    meat = np.zeros((design_NK.shape[1],) * 2)
    for group in groups:
        members = [i for i, label in enumerate(clusters) if label == group]
        score = design_NK[members].T @ residual[members]
        meat += np.outer(score, score)
    n, k, g = len(y_N), design_NK.shape[1], len(groups)
    covariance = bread @ meat @ bread * g / (g - 1) * (n - 1) / (n - k)
    return Coefficients(coefficients, np.sqrt(np.diag(covariance)), g - 1)
