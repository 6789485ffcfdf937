"""The sparsity sweep: train a model size x sparsity x budget grid, fit the sparsity law to the
runs, and report the optimal sparsity under parameters, FLOPs and wall-clock seconds.

A study of its own beside ``moelab.study``, on the same run folders (``moelab.runs``) and the
torch-free law maths below both (``moelab.scaling``):

    grid.py       SweepGrid: the grid YAML (presets in moelab/presets/sweeps/), its checks and
                  ``--set`` pairs
    plan.py       every point as a config (the base config with its size, experts and budget),
                  the folder's grid.json, plan.json and configs/
    tabulate.py   results.csv, rebuilt from the run folders alone; results_csv.py reads it
                  back once, as typed rows (ResultRow)
    cost.py       the dry run's cost (runs, tokens, FLOPs, time from measured speeds);
                  merging.py ``moelab merge``: sweeps of one grid that differ in sparsities
    commands.py   run_sweep (plan, train, tabulate, analyse, report) and the report of a folder
    folder.py     reading a sweep folder's files, each problem a one-line error
    analysis.py   the law's form, fit and held-out check, IsoFLOP curves, throughput and optima
                  from grid.json and results.csv, written as JSON files (SweepAnalysis, its
                  typed records in analysis_records.py)
    zero_shot.py  accuracy against S; finetune.py the fine-tuned loss and gain against S (a
                  grid with ``finetune``: each run fine-tuned by one recipe, runs/finetune/)
    report.py     report.md from those files alone; run_tables.py its sections on the runs,
                  figures.py its figures
    timing.py     ``moelab throughput``: a tokens/s table of the grid's shapes, without training

See docs/scaling.md.
"""
