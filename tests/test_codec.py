"""The JSON codec against hand-written dicts: key order, nesting, optional keys, reading back."""

import json
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pytest

from moelab.codec import from_json, to_json


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
