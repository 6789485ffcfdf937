"""moelab: controlled dense-vs-sparse (Mixture-of-Experts) pretraining studies."""

__version__ = "0.1.0"
