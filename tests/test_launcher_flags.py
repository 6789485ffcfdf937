"""An option of one launcher given with another is refused on one line naming the launcher it
belongs to (exit 2, nothing written), never silently ignored; given with its own launcher it
is accepted."""

from __future__ import annotations

import argparse

import pytest

from moelab.cli import build_parser, main

# Which launcher each option belongs to (as docs/cluster.md and each option's help say), with
# a valid value for it (None: a flag).
BELONGS_TO = {
    "--jobs": (("local",), "2"), "--runs-per-gpu": (("local",), "2"),
    "--list-runs": (("commands",), None),
    "--ray-address": (("ray",), "auto"),
    "--cpus-per-run": (("ray", "slurm"), "2"), "--gpus-per-run": (("ray", "slurm"), "1"),
    "--slurm-partition": (("slurm",), "gpu"), "--slurm-time": (("slurm",), "60"),
    "--slurm-account": (("slurm",), "lab"), "--slurm-qos": (("slurm",), "high"),
    "--slurm-mem": (("slurm",), "8G"), "--slurm-max-parallel": (("slurm",), "2"),
    "--slurm-option": (("slurm",), "constraint=a100"), "--slurm-local": (("slurm",), None),
    "--detach": (("slurm",), None),
}
LAUNCHERS = ("local", "ray", "slurm", "commands")


def option_arguments(option: str) -> list[str]:
    value = BELONGS_TO[option][1]
    return [option] if value is None else [option, value]


def launcher_options(command: str) -> set[str]:
    """The options in the 'where runs train' group of ``moelab COMMAND``."""
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    group = next(g for g in subparsers.choices[command]._action_groups
                 if g.title == "where runs train")
    return {a.option_strings[0] for a in group._group_actions} - {"--launcher"}


@pytest.mark.parametrize("command", ["study", "ablate-routing", "sweep-sparsity"])
def test_every_launcher_option_of_every_command_belongs_to_a_launcher(command):
    assert launcher_options(command) == set(BELONGS_TO)


FOREIGN = [(option, launcher) for option, (owners, _) in BELONGS_TO.items()
           for launcher in LAUNCHERS if launcher not in owners]


@pytest.mark.parametrize("option,launcher", FOREIGN)
def test_an_option_of_another_launcher_is_refused_naming_its_launcher(tmp_path, capsys, option,
                                                                      launcher):
    out = tmp_path / "study"
    code = main(["study", "demo", "--out", str(out), "--launcher", launcher,
                 *option_arguments(option)])
    err = capsys.readouterr().err
    owners = " or ".join(BELONGS_TO[option][0])
    assert code == 2
    assert err == (f"moelab: error: {option} is invalid with --launcher {launcher}: it applies "
                   f"to --launcher {owners}\n")
    assert not out.exists()


@pytest.mark.parametrize("argv", [
    ["--list-runs", "--launcher", "ray"],  # the two reported cases
    ["--launcher", "local", "--slurm-partition", "x"],
    ["--list-runs", "--slurm-partition", "x"],  # --list-runs alone is the commands launcher
    ["--jobs", "1", "--launcher", "ray"],  # an option's default, given, is still given
])
@pytest.mark.parametrize("command", [["study", "demo"], ["ablate-routing", "demo"],
                                     ["sweep-sparsity", "micro"]])
def test_the_reported_cases_are_refused_by_every_command(tmp_path, capsys, command, argv):
    out = tmp_path / "folder"
    assert main([*command, "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "it applies to --launcher" in err
    assert not out.exists()


@pytest.mark.slow
def test_a_dry_run_checks_the_options_but_accepts_those_of_its_launcher(tmp_path, capsys):
    slurm = ["--launcher", "slurm", *[arg for option, (owners, _) in BELONGS_TO.items()
                                      if "slurm" in owners for arg in option_arguments(option)]]
    assert main(["sweep-sparsity", "micro", "--dry-run", "--out", str(tmp_path / "s"), *slurm]) == 0
    assert "4 runs" in capsys.readouterr().out.splitlines()  # then the cost lines
    ray = ["--launcher", "ray", "--ray-address", "auto", "--cpus-per-run", "2", "--gpus-per-run", "0.5"]
    assert main(["sweep-sparsity", "micro", "--dry-run", "--out", str(tmp_path / "s"), *ray]) == 0
    assert main(["sweep-sparsity", "micro", "--dry-run", "--out", str(tmp_path / "s"),
                 "--jobs", "2", "--runs-per-gpu", "2"]) == 0
    assert not (tmp_path / "s").exists()


def test_list_runs_goes_with_the_commands_launcher(tmp_path, capsys):
    for argv in (["--list-runs"], ["--launcher", "commands"], ["--list-runs", "--launcher", "commands"]):
        out = tmp_path / "-".join(argv)
        assert main(["sweep-sparsity", "micro", "--out", str(out), *argv]) == 0
        assert len(capsys.readouterr().out.strip().splitlines()) == 4  # one command per run


@pytest.mark.parametrize("argv,message", [
    (["--slurm-option", "time=5"], "'time=5' is invalid: use --slurm-time"),
    (["--slurm-option", "account=x"], "'account=x' is invalid: use --slurm-account"),
    (["--slurm-option", "output=/tmp/x"], "'output=/tmp/x' is invalid: moelab writes --output itself"),
    (["--slurm-option", "constraint=a b"], "the value must be one word"),
    (["--slurm-option", "=a100"], "expected KEY=VALUE"),
    (["--slurm-mem", "5X"], "'5X' is invalid: allowed a size like 64G"),
    (["--slurm-mem", "0G"], "'0G' is invalid"),
    (["--slurm-account", "lab\n#SBATCH --x"], "is invalid: allowed one word"),
    (["--slurm-max-parallel", "0"], "--slurm-max-parallel"),
])
def test_bad_slurm_values_are_one_line(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        main(["study", "demo", "--out", str(tmp_path / "s"), "--launcher", "slurm", *argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()
