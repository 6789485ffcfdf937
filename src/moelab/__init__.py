"""moelab: controlled dense-vs-sparse (Mixture-of-Experts) pretraining studies."""

from moelab.version import __version__

__all__ = ["__version__", "load_run"]


def __getattr__(name: str):
    # ``moelab.load_run`` without importing torch and the training engine on ``import moelab``:
    # imported on first use, so the package imports nothing above it at import time.
    if name == "load_run":
        from moelab.train.trained_run import load_run

        return load_run
    raise AttributeError(f"module 'moelab' has no attribute {name!r}")
