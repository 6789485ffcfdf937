"""The sparsity sweep: train a model size x sparsity x budget grid, fit the sparsity law to the
runs, and report the optimal sparsity under parameters, FLOPs and wall-clock seconds.

A study of its own beside ``moelab.study``, on the same run folders (``moelab.runs``) and the
torch-free law maths below both (``moelab.scaling``):

    grid.py       SweepGrid: the grid YAML (presets in moelab/presets/sweeps/), its checks and
                  ``--set`` pairs
    plan.py       every point as a config (the base config with its size, experts and budget),
                  the folder's grid.json, plan.json and configs/
    tabulate.py   results.csv, rebuilt from the run folders alone; results_csv.py's ResultRow
                  is its schema (the columns written) and its reader (typed rows)
    cost.py       the dry run's cost (runs, tokens, FLOPs, time from measured speeds);
                  merging.py ``moelab merge``: sweeps of one grid that differ in sparsities
    commands.py   run_sweep (plan, train, tabulate, analyse, report) and the report of a folder
    folder.py     SweepFolder: the folder read once (grid.json, plan.json, results.csv,
                  analysis.json, the analyses' records), each problem a one-line error
    analyses/     one module per analysis of the report (its record, compute, text and
                  figure), listed once in ANALYSES in report order
    analysis.py   the registry computed in order, written as JSON files and analysis.json
    report.py     report.md: the registry rendered in order
    timing.py     ``moelab throughput``: a tokens/s table of the grid's shapes, without training

See docs/scaling.md.
"""
