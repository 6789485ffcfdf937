"""Statistics that need neither torch nor the rest of moelab: the sequential procedure that adds
seeds until a comparison is resolved (``sequential``)."""
