"""The oldest torch and transformers pyproject.toml declares are the ones `make test-torch-floor`
installs: a floor raised in one place and not the other would be declared without being tested."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def makefile_variable(name: str) -> str:
    """A variable's value, its continuation lines joined."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    match = re.search(rf"^{name} := (.+)$", text, re.MULTILINE)
    assert match, f"the Makefile sets no {name}"
    return " ".join(match.group(1).split())


def declared_floors(package: str) -> set[Version]:
    """The lower bound of every requirement on ``package`` in pyproject.toml, extras included."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"],
                    *(r for extra in project["optional-dependencies"].values() for r in extra)]
    floors = set()
    for text in requirements:
        requirement = Requirement(text)
        if requirement.name == package:
            floors |= {Version(s.version) for s in requirement.specifier if s.operator == ">="}
    return floors


def test_the_declared_torch_floor_is_the_one_the_floor_venv_installs():
    assert declared_floors("torch") == {Version(makefile_variable("TORCH_FLOOR"))}


def test_every_declared_transformers_floor_is_the_one_the_floor_venv_installs():
    installed = Version(makefile_variable("TRANSFORMERS_FLOOR"))
    assert declared_floors("transformers") == {installed}
    # the floor venv runs the tests that compare against the transformers models
    floor_tests = makefile_variable("FLOOR_TESTS").split()
    assert {"tests/test_model.py", "tests/test_train_export.py"} <= set(floor_tests)
