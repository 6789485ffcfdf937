"""Dense-vs-MoE studies: arms x seeds (x token budgets), the routing ladder, statistics, report.

    config, settings = load_study("demo")                       # moelab.study.settings
    results = run_study("study", config, settings, "out/demo")  # moelab.study.commands; or "ablation"
    write_outputs(StudyFolder.read("out/demo"))                 # moelab.study.report: rebuild from runs

Modules: ``commands`` (the study commands as functions), ``settings`` (the ``study:`` section
of presets), ``arms`` (derive the arms), ``plan`` (every run and the folder's plan files),
``folder`` (a study folder read once: its complete runs, plan, failures, lr choices),
``aggregate`` (their statistics), ``results`` (what results.json holds, as dataclasses),
``gaps`` (the dense-vs-MoE gap of one criterion and its verdict, on the tests, power and Holm of
``moelab.stats``), ``zero_shot`` (task accuracies), ``rungs`` (the ladder's adjacent rungs),
``tuning`` (``--tune-lr``), ``rounds`` (``--until-resolved``), ``pooling`` (studies of one
design as one), ``analyses`` (one module per section of the report, listed in ``ANALYSES``) and
``report`` (the outputs). Token counts (40.5M) are ``moelab.runs.tokens``.
See docs/study.md.
"""
