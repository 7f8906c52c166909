"""Running the workflow in tests: configs (config/config.yaml with overrides, the tiny end-to-end
config), ``python -m snakemake`` in a fresh folder, and readers of what it printed."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SNAKEFILE = ROOT / "Snakefile"
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


#: the tiny model and schedule of the end-to-end runs (a few seconds of training on a CPU)
TINY_CONFIG = {
    "datasets": {"tiny": {"demo": {"seed": 0, "n_frames": 20}}},
    "runs": {
        "tiny": {
            "dataset": "tiny",
            "model": {
                "type": ["Cu", "Pd", "Ni"],
                "cutoff": [4.0, 3.0],
                "n_max": [2, 2],
                "basis_size": [4, 4],
                "l_max": [2, 0, 0],
                "neuron": 8,
            },
            "stage1": {"epochs": 3, "batch": 8, "checkpoint_every": 1},
            "stage2": {"epochs": 2, "batch": 8, "checkpoint_every": 1},
        }
    },
}


def env_with_this_python(extra_path: Path | None = None) -> dict[str, str]:
    """The environment for subprocesses: this interpreter's bin first on PATH, so the rules'
    ``nepcore`` is the one installed next to the snakemake under test."""
    env = dict(os.environ)
    paths = [str(Path(sys.executable).parent), env.get("PATH", "")]
    if extra_path is not None:
        paths.insert(0, str(extra_path))
    env["PATH"] = os.pathsep.join(paths)
    return env


def snakemake(
    workdir: Path, *args: str, configfile: Path | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run ``python -m snakemake`` on the repository's Snakefile in ``workdir``.

    With ``configfile=None`` the repository's config/config.yaml is used."""
    configfile = configfile or ROOT / "config" / "config.yaml"
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(SNAKEFILE),
        "--directory",
        str(workdir),
        "--configfile",
        str(configfile),
        *args,
    ]
    return subprocess.run(
        cmd,
        cwd=workdir,
        env=env or env_with_this_python(),
        capture_output=True,
        text=True,
        timeout=900,
    )


def output_of(proc: subprocess.CompletedProcess) -> str:
    """Snakemake 9 prints its errors on stdout: look at both streams."""
    return proc.stdout + proc.stderr


def job_stats(text: str) -> dict[str, int]:
    """The first 'Job stats' table snakemake printed: {rule: count}, without the total."""
    match = re.search(r"Job stats:\njob\s+count\n[- ]+\n((?:\S+\s+\d+\n)+)", text)
    assert match, f"no job stats table in:\n{text[-3000:]}"
    rows = dict((name, int(n)) for name, n in (line.split() for line in match.group(1).splitlines()))
    rows.pop("total")
    return rows


def job_blocks(text: str) -> list[dict[str, str]]:
    """Each job a (dry) run printed: {'rule': name, 'resources': '...', 'shell': '...'}."""
    jobs = []
    for block in re.split(r"\n(?=\[[^\n]*\]\n(?:local)?rule )", text):
        rule = re.search(r"^(?:local)?rule (\w+):", block, re.M)
        if not rule:
            continue
        resources = re.search(r"^\s+resources: (.*)$", block, re.M)
        shell = re.search(r"^\s*(?:Shell command: )?((?:nepcore|torchrun) .*)$", block, re.M)
        jobs.append(
            {
                "rule": rule.group(1),
                "resources": resources.group(1) if resources else "",
                "shell": shell.group(1) if shell else "",
            }
        )
    return jobs


def write_config(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
