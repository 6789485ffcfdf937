"""Statistics that need neither torch nor the rest of moelab, the one home of every interval,
test and power calculation the study and the sweep report: ``intervals`` (t intervals of a mean
or an estimate, Wilson's for a proportion, the seed summary), ``t_tests`` (paired and Welch),
``power`` (exact noncentral-t power, the minimum detectable gap, seeds needed), ``multiple``
(Holm), ``regression`` (least squares, ordinary and cluster-robust) and ``sequential`` (seeds
added until a comparison is resolved)."""
