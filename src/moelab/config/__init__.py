"""Typed configuration: dataclasses with defaults, YAML in and out, dotted overrides, validation.

A config has three sections, ``model``, ``data`` and ``train``. A YAML file (or a preset) gives
only the keys it changes; everything else keeps the default documented on the field. Overrides
use dotted paths: ``model.d_model=256``, ``model.moe.top_k=1``, ``model.moe=null`` (dense).

The same parser (``from_dict``, the strict mode of ``moelab.codec``, whose lenient mode reads
stored records) reads the other typed sections of moelab: the ``study:``
section of a study preset (``moelab.study.settings``) and the sparsity-sweep grids
(``moelab.sweep.grid``). A field's type says what it takes: ``int``, ``float``, ``bool``,
``str``, ``Optional[...]`` (null allowed), ``Literal[...]`` (one of the values), ``list[...]``
(a YAML list, or a comma-separated string from ``--set``), a nested dataclass (a mapping), or
``Annotated[T, Parsed(fn)]`` for a value with its own notation (a seed list, ``40.5M`` tokens).
A field without a default is a required key.

Every problem is a ``ConfigError`` whose one-line message names the key, the value (at most
80 characters of it, ``moelab.errors.short_repr``) and what is allowed. YAML, from a file or a
``--set`` value, is read within bounds (``load_yaml``): at most ``MAX_YAML_CHARS``, nested at most
``MAX_YAML_DEPTH`` levels, no key twice and no aliases (``RefusedYAML``).

The package, by concern: ``schema`` (the typed sections and their checks), ``parsing`` (dicts
and dotted overrides into sections), ``files`` (YAML files, presets, ``load_config``);
``checks`` holds the field checks the sections share; ``legacy`` reads the keys older configs
spell otherwise (the flat ``train.progress`` of today's ``train.logging.progress``).
"""

from moelab.codec import Parsed, from_dict
from moelab.config.files import (
    MAX_BASE_DEPTH, deep_merge, dump_config, load_config, preset_names, read_raw, read_with_base,
    read_yaml, save_config,
)
from moelab.config.legacy import (
    LOGGING_KEYS, NUMERICS_OF_OLD_RUNS, spelt_as_today, with_numerics_of_its_day, without_logging,
)
from moelab.config.parsing import (
    MAX_YAML_CHARS, MAX_YAML_DEPTH, RefusedYAML, apply_overrides, build_config, load_yaml,
    override, to_dict, yaml_problem,
)
from moelab.config.schema import (
    DEVICE_CHOICES, DEVICE_NAME, EVAL_TASK_NAMES, MAX_SAMPLE_TOKENS, MAX_SEED, MAX_TOKENS,
    BalanceMode, Config, DataConfig, DecayShape, Dtype, LbScope, LoggingConfig, ModelConfig,
    MoEConfig, ScheduleName, TrainConfig,
)

__all__ = [
    "BalanceMode", "Config", "DEVICE_CHOICES", "DEVICE_NAME", "DataConfig", "DecayShape",
    "Dtype", "EVAL_TASK_NAMES", "LOGGING_KEYS", "LbScope", "LoggingConfig", "MAX_BASE_DEPTH",
    "MAX_SAMPLE_TOKENS", "MAX_SEED", "MAX_TOKENS", "MAX_YAML_CHARS", "MAX_YAML_DEPTH",
    "ModelConfig", "MoEConfig", "Parsed", "RefusedYAML", "ScheduleName", "TrainConfig",
    "apply_overrides", "build_config", "deep_merge", "dump_config", "from_dict", "load_config",
    "load_yaml", "override", "preset_names", "read_raw", "read_with_base", "read_yaml",
    "NUMERICS_OF_OLD_RUNS", "save_config", "spelt_as_today", "to_dict",
    "with_numerics_of_its_day", "without_logging", "yaml_problem",
]
