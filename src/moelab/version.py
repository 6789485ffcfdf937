"""moelab's version: one place, read by the package, by summary.json and by the build
(pyproject.toml's dynamic version), importable from any layer without importing the package's
engines."""

__version__ = "0.1.0"
