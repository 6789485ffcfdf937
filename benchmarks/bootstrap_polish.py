"""Bootstrap replicates that stop short of their own optimum, before and after polishing: each
stored sweep's law refitted with R bootstrap replicates (seed 0), once with the batched end
points alone and once with every replicate polished (``moelab.scaling.fitting.bootstrap``), and
the share a further tight polish lowers by more than 1e-6 relative
(``replicates_short_of_optimum``), with the CPU seconds of each bootstrap.

    .venv/bin/python benchmarks/bootstrap_polish.py [--replicates 200]

Writes benchmarks/results/bootstrap_polish.json. The seconds are the shared machine's: read
their ratio.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from moelab.fileio import atomic_write_json
from common import add_output_arguments, parse_checked

from moelab.scaling.fitting import bootstrap, fit_law, replicates_short_of_optimum
from moelab.scaling.laws import get_law
from moelab.scaling.table import read_fit_table

ROOT = Path(__file__).resolve().parents[1]
CASES = (("cpu", "sparsity-effective-size"), ("cpu", "sparsity"),
         ("cpu-isoflop", "sparsity-effective-size"))
"""(stored sweep, law): the CPU sweep's chosen form and the full law, and the IsoFLOP sweep's."""


def measure(sweep: str, law_name: str, replicates: int) -> dict:
    columns = read_fit_table(ROOT / "experiments" / "results" / "sweeps" / sweep / "results.csv",
                             True)
    law = get_law(law_name)
    result: dict = {"sweep": sweep, "law": law_name, "replicates": replicates, "seed": 0}
    for polish in (False, True):
        fit = fit_law(law, columns)
        start = time.process_time()
        bootstrap(fit, columns, replicates, seed=0, polish=polish)
        label = "polished" if polish else "batched"
        result[f"cpu_seconds_{label}"] = round(time.process_time() - start, 2)
        result[f"short_share_{label}"] = replicates_short_of_optimum(fit, columns, seed=0)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=200)
    add_output_arguments(parser, "bootstrap_polish")
    args = parse_checked(parser)
    cases, replicates = (CASES[:1], 4) if args.smoke else (CASES, args.replicates)
    results = [measure(sweep, law, replicates) for sweep, law in cases]
    for row in results:
        print(row)
    atomic_write_json(args.out,
                      {"command": "benchmarks/bootstrap_polish.py", "cases": results})


if __name__ == "__main__":
    main()
