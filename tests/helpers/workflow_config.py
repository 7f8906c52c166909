"""Workflow configs for the tests: the repository's config/config.yaml with overrides."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def deep_merge(base: dict, extra: dict) -> dict:
    """``extra`` merged into ``base`` (in place, nested dicts merged), as Snakemake merges a
    ``--configfile`` over the workflow's config."""
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            deep_merge(base[key], value)
        else:
            base[key] = value
    return base


def default_config_with(override: dict) -> dict:
    """A copy of config/config.yaml deep-merged with ``override``."""
    return deep_merge(copy.deepcopy(DEFAULT_CONFIG), override)
