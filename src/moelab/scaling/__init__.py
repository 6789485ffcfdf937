"""Sparsity scaling laws: law fits with bootstrap intervals, IsoFLOP analysis, optimal sparsity,
and sparsity sweeps (plan, run through the training engine, fit, report).

The fitting half stands alone (``moelab fit`` on any CSV); see docs/scaling.md.
"""

from moelab.scaling.fitting import FitResult, bootstrap, fit_law
from moelab.scaling.laws import CHINCHILLA, LAWS, SPARSITY, Law, get_law
from moelab.scaling.optimal import Optimum, compute_optimal, optimal_sparsity_at_params
from moelab.scaling.summary import fit_columns, load_fit
from moelab.scaling.table import read_fit_table

__all__ = [
    "CHINCHILLA", "LAWS", "SPARSITY", "FitResult", "Law", "Optimum", "bootstrap",
    "compute_optimal", "fit_columns", "fit_law", "get_law", "load_fit", "optimal_sparsity_at_params",
    "read_fit_table",
]
