"""The codec against hand-written dicts: key order, nesting, optional keys, reading back; and its
two reading modes on one record class (a stored file leniently, a user's input strictly)."""

import json
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pytest

from moelab.codec import from_dict, from_json, to_json
from moelab.errors import ConfigError


@dataclass
class Interval:
    low: float
    high: float


@dataclass
class Minimum:
    budget: float
    s_star: Optional[float]
    interval: Optional[Interval]
    sizes: list[str]
    by_seed: dict[str, float]
    corner: tuple[int, str]
    c_star: float = field(default=0.0, metadata={"json_key": "C*"})
    note: Optional[str] = field(default=None, metadata={"omit_none": True})

    JSON_EXTRA = ("bounded",)

    @property
    def bounded(self) -> bool:
        return self.s_star is not None


def example() -> Minimum:
    return Minimum(budget=3.6e11, s_star=np.float64(0.75), interval=Interval(0.5, 0.875),
                   sizes=["s0", "s1"], by_seed={"0": 0.75}, corner=(1, "a"), c_star=2.0)


def test_writes_fields_in_order_with_keys_and_extras_as_a_hand_written_dict():
    expected = {"budget": 3.6e11, "s_star": 0.75, "interval": {"low": 0.5, "high": 0.875},
                "sizes": ["s0", "s1"], "by_seed": {"0": 0.75}, "corner": [1, "a"], "C*": 2.0,
                "bounded": True}
    written = to_json(example())
    assert written == expected
    assert list(written) == list(expected)
    assert type(written["s_star"]) is float  # numpy scalars become JSON numbers
    json.dumps(written)


def test_reads_back_what_it_wrote_through_json_text():
    record = example()
    assert from_json(Minimum, json.loads(json.dumps(to_json(record)))) == record
    with_note = Minimum(**{**record.__dict__, "note": "edge"})
    assert to_json(with_note)["note"] == "edge"
    assert from_json(Minimum, to_json(with_note)).note == "edge"


@dataclass
class FormCheck:
    law: str
    skipped: Optional[str] = field(default=None, metadata={"omit_none": True})
    ss: Optional[float] = field(default=None, metadata={"omit_none": True})
    lack_of_fit: Optional[float] = field(default=None, metadata={"omit_with": "ss"})


def test_a_key_that_goes_with_another_is_written_null_included_only_beside_it():
    assert to_json(FormCheck("a", skipped="too few points")) == {"law": "a",
                                                                  "skipped": "too few points"}
    assert list(to_json(FormCheck("b", ss=0.5))) == ["law", "ss", "lack_of_fit"]
    assert to_json(FormCheck("b", ss=0.5))["lack_of_fit"] is None
    assert from_json(FormCheck, {"law": "b", "ss": 0.5, "lack_of_fit": 2}).lack_of_fit == 2.0


def test_reading_tolerates_unknown_keys_fills_defaults_and_names_a_missing_key():
    data = {"budget": 1, "s_star": None, "interval": None, "sizes": [], "by_seed": {},
            "corner": [2, "b"], "later_key": 3}
    record = from_json(Minimum, data)
    assert record.budget == 1.0 and isinstance(record.budget, float)
    assert record.c_star == 0.0 and record.note is None and record.corner == (2, "b")
    del data["sizes"]
    with pytest.raises(ValueError, match="Minimum: the key 'sizes' is missing"):
        from_json(Minimum, data)


@dataclass
class Budget:
    tokens: Optional[int] = field(default=None, metadata={"omit_none": True})
    arms: dict[str, float] = field(default_factory=dict)
    rungs: list[int] = field(default_factory=list, metadata={"omit_empty": True})
    tasks: dict[str, float] = field(default_factory=dict, metadata={"omit_empty": True})


def test_empty_lists_and_dicts_are_left_out_only_where_the_field_says_so():
    assert to_json(Budget()) == {"arms": {}}
    full = Budget(tokens=5, arms={"moe": 1.5}, rungs=[0], tasks={"a": 0.25})
    assert list(to_json(full)) == ["tokens", "arms", "rungs", "tasks"]
    assert from_json(Budget, {"arms": {}}) == Budget()
    assert from_json(Budget, to_json(full)) == full


@dataclass
class Selection:
    means: dict[float, Optional[float]] = field(default_factory=dict,
                                                metadata={"json_key": "mean_loss",
                                                          "key_format": "g"})


def test_key_format_writes_dict_keys_through_the_format_spec():
    # The hand-written form: {f"{lr:g}": mean}; 1.0 is "1" there, not json's "1.0".
    written = to_json(Selection({0.01: 3.5, 1.0: None, 2.5e-05: 4.0}))
    assert written == {"mean_loss": {"0.01": 3.5, "1": None, "2.5e-05": 4.0}}
    assert json.dumps(written) == '{"mean_loss": {"0.01": 3.5, "1": null, "2.5e-05": 4.0}}'


@dataclass
class Parabola:
    flops: float
    parabola: list[float]


@dataclass
class Surface:
    flops: float
    surface: list[float]
    at_edge: bool = False


@dataclass
class Budgets:
    rows: list[Parabola | Surface]
    by_sparsity: dict[float, Interval]


def test_a_union_of_records_reads_each_object_as_the_record_whose_keys_it_has():
    data = {"rows": [{"flops": 1e9, "surface": [1, 2]}, {"flops": 2e9, "parabola": [3.0]}],
            "by_sparsity": {"0.5": {"low": 0.0, "high": 1.0}, "0.875": {"low": 1.0, "high": 2.0}}}
    record = from_json(Budgets, json.loads(json.dumps(data)))
    assert record.rows == [Surface(1e9, [1.0, 2.0]), Parabola(2e9, [3.0])]
    assert record.by_sparsity == {0.5: Interval(0.0, 1.0), 0.875: Interval(1.0, 2.0)}
    # Float keys are written as json writes them ("0.5"), so the text round-trips.
    assert json.dumps(to_json(record)) == json.dumps(
        {"rows": [{"flops": 1e9, "surface": [1.0, 2.0], "at_edge": False},
                  {"flops": 2e9, "parabola": [3.0]}], "by_sparsity": data["by_sparsity"]})
    with pytest.raises(ValueError, match="Parabola or Surface"):
        from_json(Budgets, {"rows": [{"flops": 1.0}], "by_sparsity": {}})


@dataclass
class Bookkept:
    p: float
    standard_error: float = field(default=0.0, metadata={"json": False})


def test_a_field_marked_json_false_is_never_written_and_reads_back_as_its_default():
    assert to_json(Bookkept(0.5, standard_error=0.1)) == {"p": 0.5}
    assert from_json(Bookkept, {"p": 0.5, "standard_error": 9.0}) == Bookkept(0.5)


def test_one_record_class_reads_a_stored_file_leniently_and_a_users_input_strictly():
    data = {"flops": 1, "parabola": [2], "later_key": 3}
    assert from_json(Parabola, data) == Parabola(1.0, [2.0])  # a newer file's key: ignored
    with pytest.raises(ConfigError) as info:
        from_dict(Parabola, data, "p")
    assert str(info.value) == "p.later_key is not a known key: allowed flops, parabola"
    # Strict mode reads a user's notation: YAML 1.1's "1e9" string, --set's "1, 2" list.
    assert from_dict(Parabola, {"flops": "1e9", "parabola": "1, 2"}) == Parabola(1e9, [1.0, 2.0])
    with pytest.raises(ConfigError) as info:
        from_dict(Parabola, {"flops": True, "parabola": []}, "p")
    assert str(info.value) == "p.flops=True is invalid: expected a number"
    with pytest.raises(ConfigError) as info:
        from_dict(Parabola, {"flops": 1.0})
    assert str(info.value) == "parabola is missing: required keys are flops, parabola"
    with pytest.raises(ValueError, match="Parabola: the key 'parabola' is missing"):
        from_json(Parabola, {"flops": 1.0})
