"""environment.yml (conda users) and pyproject.toml (pip, CI) list the same packages."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONDA_TO_PIP = {"pytorch": "torch"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~ \[]", requirement.strip(), maxsplit=1)[0].lower()


def test_environment_yml_matches_pyproject():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pip_names = {_name(r) for r in pyproject["project"]["dependencies"]}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    conda_names = {CONDA_TO_PIP.get(_name(d), _name(d)) for d in conda} - {"python", "pip"}
    assert conda_names == pip_names
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "-e ." in pip_section


def test_console_script_declared():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["nepcore"] == "nepcore.cli:main"
