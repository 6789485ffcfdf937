"""moelab: controlled dense-vs-sparse (Mixture-of-Experts) pretraining studies."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # ``moelab.load_run`` without importing torch and the training engine on ``import moelab``.
    if name == "load_run":
        from moelab.train.runs import load_run

        return load_run
    raise AttributeError(f"module 'moelab' has no attribute {name!r}")
