"""The demo study (``make demo``) on three CPUs: each CPU's two seed sets pooled into one design.

The demo was run on seeds 0-5 and 617-622 on each of three CPUs (``studies/demo-seeds0-5.json``,
``demo-seeds617-622.json`` and their ``-cpu2``/``-cpu3`` copies). The two seed sets are one
design, so each CPU's pair is pooled by ``moelab pool``'s own code (``moelab.study.pooling``:
the paired test over the 12 seeds, Holm over the 2 criteria), and that pooled test is the one
with a verdict. Each seed set's own gaps are shown as halves of that estimate (interval and
power, no verdict), and whether the halves differ is tested (Welch's t on their per-seed
differences, Holm over each CPU's 2 criteria). The files do not record which CPU ran them: the
descriptions are the ones written down when they ran. The CPUs re-ran the same seeds, so their
rows are one sample of seeds measured three times, not three replications, and the page says so
when the seed lists agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from moelab.findings.source import ResultsRoot, arm_losses
from moelab.report import format_mean_std, markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.intervals import summarize
from moelab.stats.multiple import holm
from moelab.stats.t_tests import welch_test
from moelab.stats.verdicts import Difference, Verdict, difference_verdict
from moelab.study.gaps import compare
from moelab.study.pooling import pool, read_source

ARMS = ("moe", "dense_active", "dense_total")
CRITERIA = {"matched active": "dense_active", "matched total": "dense_total"}
SEED_SETS = ("demo-seeds0-5", "demo-seeds617-622")
CPUS = {"first": ("", "not recorded"),
        "second": ("-cpu2", "AMD EPYC, family 26, AVX-512"),
        "third": ("-cpu3", "AMD EPYC, family 25, AVX2 only")}
"""CPU name: (file suffix, the CPU as written down when it ran)."""
FAMILY = "Holm over the CPU's 2 criteria"


@dataclass(frozen=True)
class ArmRow:
    arm: str
    active_params: int
    total_params: int
    n: int
    loss: tuple[float, float]
    """Mean and seed sd of the best validation loss."""
    bpb: tuple[float, float]
    """Mean and seed sd of the best validation bits per byte."""


@dataclass(frozen=True)
class HalfGap:
    """One seed set's own gap (descriptive: half of the pooled estimate)."""

    criterion: str
    gap: float
    ci: tuple[float, float]
    p: float
    welch_p: float
    min_detectable_gap: float


@dataclass(frozen=True)
class Routing:
    """The MoE arm's routing at the final evaluation, as the study's results hold it."""

    experts: int
    busiest_fraction: float
    """Mean over seeds and layers of the busiest expert's share of the slots."""
    max_busiest_fraction: float
    effective_experts: float
    collapsed_runs: int


@dataclass(frozen=True)
class SeedSet:
    file: str
    seeds: list[int]
    arms: list[ArmRow]
    gaps: list[HalfGap]
    routing: Routing


@dataclass(frozen=True)
class PooledGap:
    criterion: str
    n: int
    gap: float
    ci: tuple[float, float]
    p: float
    p_holm: float
    min_detectable_gap: float
    verdict: Verdict


@dataclass(frozen=True)
class SetsApart:
    """Seeds 0-5's mean per-seed gap minus seeds 617-622's (Welch), Holm over the 2 criteria."""

    criterion: str
    difference: float
    ci: tuple[float, float]
    p: float
    p_holm: float
    verdict: Verdict


@dataclass(frozen=True)
class Cpu:
    name: str
    description: str
    sets: list[SeedSet]
    pooled: list[PooledGap]
    apart: list[SetsApart]
    dense_agreement: dict[str, float]
    """arm: the largest |loss here − loss on the first CPU| over the 12 seeds (first CPU: 0)."""


def _seed_set(results: ResultsRoot, file: str) -> SeedSet:
    arms = results.json(file)["arms"]
    rows, losses = [], {}
    for arm in ARMS:
        runs = arms[arm]["runs"]
        losses[arm] = arm_losses(arms, arm)
        loss, bpb = (summarize([float(r[key]) for r in runs])
                     for key in ("best_val_loss", "best_val_bpb"))
        rows.append(ArmRow(arm, int(arms[arm]["active_params"]), int(arms[arm]["total_params"]),
                           loss.n, (loss.mean, loss.std), (bpb.mean, bpb.std)))
    gaps = [compare(name, "moe", dense, losses["moe"], losses[dense])
            for name, dense in CRITERIA.items()]
    moe = arms["moe"]
    routing = Routing(int(moe["model"]["moe"]["num_experts"]),
                      float(moe["routing"]["busiest_fraction"]),
                      float(moe["routing"]["max_busiest_fraction"]),
                      float(moe["routing"]["effective_experts"]), int(moe["collapsed_runs"]))
    return SeedSet(file, sorted(losses["moe"]), rows,
                   [HalfGap(g.criterion, g.gap, (g.ci_low, g.ci_high), g.p_value,
                            g.welch.p_value, g.min_detectable_gap) for g in gaps], routing)


def _per_seed_gaps(results: ResultsRoot, file: str, dense: str) -> list[float]:
    arms = results.json(file)["arms"]
    moe = arm_losses(arms, "moe")
    return [float(r["best_val_loss"]) - moe[int(r["seed"])] for r in arms[dense]["runs"]]


def _sets_apart(results: ResultsRoot, files: list[str]) -> list[SetsApart]:
    # welch_test(second, first) is mean(first) − mean(second): seeds 0-5 minus 617-622.
    tests = [welch_test(_per_seed_gaps(results, files[1], dense),
                        _per_seed_gaps(results, files[0], dense)) for dense in CRITERIA.values()]
    adjusted = holm([t.p_value for t in tests])
    return [SetsApart(name, t.gap, (t.ci_low, t.ci_high), t.p_value, p_holm,
                      difference_verdict(Difference(t.gap, (t.ci_low, t.ci_high), p_holm, FAMILY),
                                         ahead="seeds 0-5 larger", behind="seeds 617-622 larger"))
            for name, t, p_holm in zip(CRITERIA, tests, adjusted)]


def _pooled(results: ResultsRoot, files: list[str]) -> list[PooledGap]:
    pooled = pool([read_source(results.root / file) for file in files])
    gaps = pooled.gaps[None]
    rows = []
    for name, dense in CRITERIA.items():
        g = next(g for g in gaps.values() if g.dense_arm == dense)
        rows.append(PooledGap(name, g.n_moe, g.gap, (g.ci_low, g.ci_high), g.p_value,
                              g.p_adjusted, g.min_detectable_gap,
                              difference_verdict(Difference(g.gap, (g.ci_low, g.ci_high),
                                                            g.p_adjusted, FAMILY),
                                                 ahead="MoE ahead", behind="dense ahead")))
    return rows


def _losses(results: ResultsRoot, files: list[str], arm: str) -> dict[int, float]:
    return {seed: loss for file in files
            for seed, loss in arm_losses(results.json(file)["arms"], arm).items()}


def compute(results: ResultsRoot, findings: Findings) -> list[Cpu]:
    cpus = []
    first = [f"studies/{s}.json" for s in SEED_SETS]
    for name, (suffix, description) in CPUS.items():
        files = [f"studies/{s}{suffix}.json" for s in SEED_SETS]
        agreement = {}
        for arm in ARMS:
            here, there = _losses(results, files, arm), _losses(results, first, arm)
            agreement[arm] = max(abs(here[s] - there[s]) for s in here)
        cpus.append(Cpu(name, description, [_seed_set(results, f) for f in files],
                        _pooled(results, files), _sets_apart(results, files), agreement))
    return cpus


def _ci(ci: tuple[float, float]) -> str:
    return f"[{ci[0]:+.4f}, {ci[1]:+.4f}]"


def _params(count: int) -> str:
    return f"{count / 1e3:.2f}K"


def _arms_table(cpus: list[Cpu]) -> str:
    rows = [[cpu.name, f"{s.seeds[0]}-{s.seeds[-1]}", f"`{a.arm}`", _params(a.active_params),
             _params(a.total_params), str(a.n), format_mean_std(*a.loss), format_mean_std(*a.bpb)]
            for cpu in cpus for s in cpu.sets for a in s.arms]
    return markdown_table(["CPU", "seeds", "arm", "active", "total", "n", "best val loss",
                           "bits/byte"], rows, "lllrrrrr")


def _pooled_table(cpus: list[Cpu]) -> str:
    rows = [[cpu.name, g.criterion, str(g.n), f"{g.gap:+.4f}", _ci(g.ci), f"{g.p:.2g}",
             f"{g.p_holm:.2g}", f"{g.min_detectable_gap:.4f}", f"**{g.verdict.word}**"]
            for cpu in cpus for g in cpu.pooled]
    return markdown_table(["CPU", "criterion", "n", "gap", "95 % CI", "p", "p (Holm)",
                           "min. detectable gap", "verdict"], rows, "llrrrrrrl")


def _halves_table(cpus: list[Cpu]) -> str:
    rows = [[cpu.name, f"{s.seeds[0]}-{s.seeds[-1]}", g.criterion, f"{g.gap:+.4f}", _ci(g.ci),
             f"{g.p:.2g}", f"{g.welch_p:.2g}", f"{g.min_detectable_gap:.4f}"]
            for cpu in cpus for s in cpu.sets for g in s.gaps]
    return markdown_table(["CPU", "seeds", "criterion", "gap", "95 % CI (paired)", "paired p",
                           "Welch p", "min. detectable gap"], rows, "lllrrrrr")


def _apart_table(cpus: list[Cpu]) -> str:
    rows = [[cpu.name, a.criterion, f"{a.difference:+.4f}", _ci(a.ci), f"{a.p:.2g}",
             f"{a.p_holm:.2g}", f"**{a.verdict.word}**"] for cpu in cpus for a in cpu.apart]
    return markdown_table(["CPU", "criterion", "seeds 0-5 − 617-622", "95 % CI (Welch)", "p",
                           "p (Holm)", "verdict"], rows, "llrrrrl")


def _routing_table(cpus: list[Cpu]) -> str:
    rows = [[cpu.name, f"{s.seeds[0]}-{s.seeds[-1]}", f"{s.routing.busiest_fraction:.3f}",
             f"{s.routing.max_busiest_fraction:.3f}",
             f"{s.routing.effective_experts:.2f} of {s.routing.experts}",
             str(s.routing.collapsed_runs)] for cpu in cpus for s in cpu.sets]
    return markdown_table(["CPU", "seeds", "busiest fraction (mean)",
                           "busiest fraction (worst layer, any seed)",
                           "effective experts", "runs flagged collapsed"], rows, "llrrrr")


def render(cpus: list[Cpu] | None, results: ResultsRoot, findings: Findings) -> str:
    if not cpus:
        return ""
    experts = cpus[0].sets[0].routing.experts
    described = "; ".join(f"{cpu.name}: {cpu.description}" for cpu in cpus)
    largest_sd = max(a.loss[1] for cpu in cpus for s in cpu.sets for a in s.arms)
    dense_within = max(value for cpu in cpus[1:] for arm, value in cpu.dense_agreement.items()
                       if arm != "moe")
    seed_lists = {tuple(s for seed_set in cpu.sets for s in seed_set.seeds) for cpu in cpus}
    same_seeds = (f"The {len(cpus)} CPUs ran the same {len(next(iter(seed_lists)))} seeds: "
                  f"the {len(cpus)} rows of each criterion are one sample of seeds re-run on "
                  f"{len(cpus)} CPUs (their dense arms agree within {dense_within:.4f}), not "
                  f"{len(cpus)} replications.\n\n") if len(seed_lists) == 1 else ""
    agreement = "; ".join(f"{cpu.name} CPU " + ", ".join(
        f"`{arm}` {value:.4f}" for arm, value in cpu.dense_agreement.items())
        for cpu in cpus[1:])
    return ("## The demo on three CPUs, its two seed sets pooled\n\n"
            f"`moelab study demo` on seeds 0-5 and 617-622 on three CPUs ({described}). Best "
            "validation loss and bits per byte, mean ± seed sd:\n\n" + _arms_table(cpus)
            + f"\nThe largest seed sd of any arm in the six studies: {largest_sd:.4f}. The "
              "largest per-seed difference from the first CPU's run of the same seed, over the "
              f"12 seeds: {agreement}.\n\n"
              "Dense − MoE over each CPU's 12 seeds, paired by seed (`moelab pool` on the "
              "CPU's two files; positive: the MoE is lower); p adjusted by Holm over the 2 "
              "criteria; the verdict by rule (docs/verdicts.md):\n\n" + _pooled_table(cpus)
            + "\n" + same_seeds
            + "Each seed set alone, the two halves of the pooled estimate (descriptive: its "
              "interval, raw p and power, no verdict; Welch's p treats the arms as independent "
              "samples):\n\n" + _halves_table(cpus)
            + "\nDo the halves differ? Seeds 0-5's mean per-seed gap minus seeds 617-622's "
              f"(Welch's t on the per-seed gaps; {FAMILY}):\n\n" + _apart_table(cpus)
            + "\nThe MoE's routing at the final evaluation (the busiest expert's share of a "
              f"layer's slots, mean over layers and seeds, and the worst layer of any seed; 1/{experts} is a "
              "perfect balance; top-2 fills two slots per token):\n\n" + _routing_table(cpus))


ANALYSIS: Analysis[ResultsRoot, list[Cpu]] = Analysis("demo_cpus", compute, render)
