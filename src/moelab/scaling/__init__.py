"""Scaling-law maths, torch-free: law forms and their fits with bootstrap intervals, IsoFLOP
analysis, optimal sparsity under parameters, FLOPs and seconds, and the throughput cost model.

It imports nothing of the training engine or of the studies above it (a test checks), so
``moelab fit`` runs on any CSV; the sparsity sweep that feeds it is ``moelab.sweep``. See
docs/explanation/laws.md.
"""

from moelab.scaling.fitting import FitResult, bootstrap, fit_law
from moelab.scaling.laws import CHINCHILLA, LAWS, SPARSITY, Law, get_law
from moelab.scaling.optimal import Optimum, compute_optimal, optimal_sparsity_at_params
from moelab.scaling.fit_record import FitFile, LawFit, fit_columns, load_fit
from moelab.scaling.table import read_fit_table

__all__ = [
    "CHINCHILLA", "LAWS", "SPARSITY", "FitFile", "FitResult", "Law", "LawFit", "Optimum", "bootstrap",
    "compute_optimal", "fit_columns", "fit_law", "get_law", "load_fit", "optimal_sparsity_at_params",
    "read_fit_table",
]
