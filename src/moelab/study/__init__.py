"""Dense-vs-MoE studies: arms x seeds (x token budgets), the routing ladder, statistics, report.

    config, settings = load_study("demo")                       # moelab.study.settings
    results = run_study("study", config, settings, "out/demo")  # moelab.study.commands; or "ablation"
    write_outputs("out/demo")                                   # moelab.study.report: rebuild from runs

Modules: ``commands`` (the study commands as functions), ``arms`` (derive the arms), ``runner``
(plan and resumable execution), ``results`` (read run folders, aggregate), ``stats`` (paired
and Welch t-tests, power), ``figures`` and ``report`` (outputs), ``settings`` (the ``study:``
section of presets). Token counts (40.5M) are ``moelab.runs.tokens``.
See docs/study.md.
"""
