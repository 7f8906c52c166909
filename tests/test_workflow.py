"""The Snakemake workflow, driven through its command line as users run it.

Format, lint, dry runs, config validation as a user meets it, the SLURM profile, the rerun
scope with a stand-in ``nepcore`` and an end-to-end run with the real nepcore commands. Every
test runs a subprocess, so the whole module is marked ``slow`` (``pytest -m "not slow"`` is the
quick loop; CI runs everything). The config logic itself is unit-tested without Snakemake in
test_workflow_functions.py.

Every snakemake call runs in a fresh ``tmp_path`` working directory (``--directory``) so that
nothing lands in the repository and no two tests share a Snakemake lock.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.workflow import (
    ROOT,
    TINY_CONFIG,
    default_config_with,
    env_with_this_python,
    job_blocks,
    job_stats,
    output_of,
    snakemake,
    write_config,
)

pytestmark = pytest.mark.slow

RULES = ["demo_data", "convert", "qscaler", "train_stage1", "train_stage2", "evaluate", "export"]
STAGE_FILES = ["checkpoint.pt", "nep.txt", "nep_best.txt", "loss.out", "status.json"]
EVAL_FILES = [
    "metrics.json",
    "energy_test.out",
    "force_test.out",
    "virial_test.out",
    "stress_test.out",
    "parity.png",
    "loss.png",
]
COMMAND_MODULES = ["convert", "qscaler", "train", "evaluate", "export", "demo_data"]

# ---- static checks ------------------------------------------------------------------------


def test_snakefmt_clean() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "snakefmt", "--check", "--diff", "Snakefile", "workflow"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, output_of(proc)


def test_lint_clean(tmp_path: Path) -> None:
    proc = snakemake(tmp_path, "--lint")
    assert proc.returncode == 0, output_of(proc)
    assert "Congratulations" in output_of(proc)


# ---- dry runs -----------------------------------------------------------------------------


def test_dry_run_lists_every_rule(tmp_path: Path) -> None:
    proc = snakemake(tmp_path, "-n", "-F", "--cores", "1", "--resources", "gpu=1")
    assert proc.returncode == 0, output_of(proc)
    assert job_stats(output_of(proc)) == {rule: 1 for rule in RULES + ["all"]}


def test_runs_share_the_dataset_and_seeds_form_a_committee(tmp_path: Path) -> None:
    config = default_config_with(
        {
            "runs": {
                "committee": {
                    "dataset": "demo",
                    "seeds": [1, 2, 3],
                    "model": {"type": ["Cu", "Pd", "Ni"]},
                    "stage2": {"lr": 0.002},
                }
            }
        }
    )
    cfg = write_config(tmp_path / "two_runs.yaml", config)
    proc = snakemake(tmp_path, "-n", "-p", "--cores", "2", "--resources", "gpu=1", configfile=cfg)
    assert proc.returncode == 0, output_of(proc)
    text = output_of(proc)
    assert job_stats(text) == {
        "demo_data": 1,
        "convert": 1,
        "qscaler": 2,
        "train_stage1": 4,
        "train_stage2": 4,
        "evaluate": 1,
        "evaluate_committee": 1,
        "export": 2,
        "all": 1,
    }
    shells = [job["shell"] for job in job_blocks(text)]
    evaluate = {s.split("--out-dir ")[1].split()[0]: s for s in shells if "nepcore evaluate" in s}
    committee = evaluate["results/committee/eval"].split("--committee ")[1].split(" >")[0].split()
    assert committee == [
        "results/committee/stage2/nep_best.txt",
        "results/committee/seed2/stage2/nep_best.txt",
        "results/committee/seed3/stage2/nep_best.txt",
    ]
    assert "--committee" not in evaluate["results/demo/eval"]
    # committee.csv is a declared output of the committee's evaluation (and only of it)
    rules_of = {job["shell"].split("--out-dir ")[1].split()[0]: job["rule"] for job in job_blocks(text)
                if "nepcore evaluate" in job["shell"]}  # fmt: skip
    assert rules_of == {"results/committee/eval": "evaluate_committee", "results/demo/eval": "evaluate"}
    assert "results/committee/eval/committee.csv" in text and "results/demo/eval/committee.csv" not in text
    seeds = sorted(re.search(r"--seed (\d+)", s).group(1) for s in shells if "--stage 1" in s)
    assert seeds == ["0", "1", "2", "3"]
    # the committee's stage-2 setting reaches only its own stage-2 jobs
    stage2 = [s for s in shells if "--stage 2" in s]
    assert sum("--lr 0.002 " in s for s in stage2) == 3


def test_multi_gpu_run_launches_torchrun(tmp_path: Path) -> None:
    """runs.<run>.gpus: N > 1 requests gpu=N and starts one DDP process per GPU."""
    cfg = write_config(tmp_path / "ddp.yaml", default_config_with({"runs": {"demo": {"gpus": 2}}}))
    proc = snakemake(tmp_path, "-n", "-p", "--cores", "2", "--resources", "gpu=2", configfile=cfg)
    assert proc.returncode == 0, output_of(proc)
    training = [j for j in job_blocks(output_of(proc)) if j["rule"].startswith("train_stage")]
    assert len(training) == 2
    for job in training:
        assert job["shell"].startswith("torchrun --standalone --nproc_per_node=2 -m nepcore train ")
        assert "gpu=2" in job["resources"]


def test_user_files_replace_the_demo_data(tmp_path: Path) -> None:
    from nepcore.data.demo import write_demo_dataset

    for name in ("a", "b", "valid", "test"):
        write_demo_dataset(tmp_path / "raw" / f"{name}.xyz", seed=len(name), n_frames=10)
    (tmp_path / "nep.in").write_text("type 2 Cu Pd\ncutoff 5 4\nlambda_e 1.0\ngeneration 1000\n")
    config = {
        "datasets": {
            "mine": {
                "files": ["raw/[ab].xyz"],
                "valid": ["raw/valid.xyz"],
                "test": ["raw/test.xyz"],
                "types": ["Cu", "Pd", "Ni"],
            }
        },
        "runs": {"fromnepin": {"dataset": "mine", "nep_in": "nep.in"}},
    }
    cfg = write_config(tmp_path / "mine.yaml", config)
    proc = snakemake(tmp_path, "-n", "-p", "--cores", "1", configfile=cfg)
    text = output_of(proc)
    assert proc.returncode == 0, text
    stats = job_stats(text)
    assert "demo_data" not in stats and stats["convert"] == 1
    shells = {job["rule"]: job["shell"] for job in job_blocks(text)}
    assert shells["convert"].startswith("nepcore convert raw/a.xyz raw/b.xyz -o ")
    assert "--valid raw/valid.xyz --test raw/test.xyz" in shells["convert"]
    assert "--split" not in shells["convert"] and "--types Cu Pd Ni" in shells["convert"]
    assert "--nep-in nep.in" in shells["qscaler"] and "--type " not in shells["qscaler"]
    # nep.in training keys are not silently dropped: the workflow says where they come from
    assert "sets 'lambda_e'" in text and "sets 'generation'" in text


@pytest.mark.parametrize(
    "override, expected",
    [
        ({"runs": {"demo": {"stage2": {"lrr": 0.1}}}}, ["runs.demo.stage2", "'lrr'"]),
        (
            {"runs": {"demo": {"stage1": {"epochs": "many"}}}},
            ["runs.demo.stage1.epochs", "'many' does not match '^auto$'"],
        ),
        ({"runs": {"demo": {"model": {"neuron": 2.5}}}}, ["runs.demo.model.neuron"]),
        ({"datasets": {"demo": {"file": ["x.xyz"]}}}, ["datasets.demo", "'file'"]),
        ({"runz": {}}, ["top level", "'runz'"]),
        ({"runs": {"demo": {"dataset": "nope"}}}, ["runs.demo.dataset", "unknown dataset 'nope'"]),
        (
            {"runs": {"demo": {"nep_in": "nep.in"}}},
            ["runs.demo", "exactly one of model and nep_in"],
        ),
        (
            {"datasets": {"demo": {"valid": ["v.xyz"]}}},
            ["datasets.demo", "give both valid and test files"],
        ),
        (
            {"datasets": {"demo": {"files": ["no/such/*.xyz"]}}},
            ["datasets.demo.files", "matches no file"],
        ),
    ],
)
def test_bad_config_fails_naming_the_key(tmp_path: Path, override: dict, expected: list) -> None:
    cfg = write_config(tmp_path / "bad.yaml", default_config_with(override))
    proc = snakemake(tmp_path, "-n", "--cores", "1", configfile=cfg)
    text = output_of(proc)
    assert proc.returncode != 0
    assert "invalid config at " in text, text
    for piece in expected:
        assert piece in text, text


def test_schema_fills_in_defaults_and_stage2_differs(tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path / "minimal.yaml",
        {"datasets": {"d": {}}, "runs": {"r": {"dataset": "d", "model": {"type": ["Cu"]}}}},
    )
    proc = snakemake(tmp_path, "-n", "-p", "-F", "--cores", "1", configfile=cfg)
    assert proc.returncode == 0, output_of(proc)
    shells = {job["rule"]: job["shell"] for job in job_blocks(output_of(proc))}
    assert "--n-frames 60" in shells["demo_data"]
    assert "--epochs 600 " in shells["train_stage1"] and "--lr 0.01 " in shells["train_stage1"]
    assert "--epochs auto --patience auto " in shells["train_stage2"] and "--lr 0.001 " in shells["train_stage2"]
    assert "--optimizer adam " in shells["train_stage1"] and "--optimizer auto " in shells["train_stage2"]
    assert "--init results/r/stage1/checkpoint.pt" in shells["train_stage2"]


# ---- SLURM profile ------------------------------------------------------------------------


SLURM_PROFILE = str(ROOT / "profiles" / "slurm")


@pytest.mark.parametrize(
    "how",
    [
        ("--workflow-profile", SLURM_PROFILE),
        ("--profile", SLURM_PROFILE),
        ("--executor", "slurm", "--jobs", "4"),
    ],
    ids=["workflow-profile", "profile", "executor"],
)
def test_slurm_dry_run_requests_gpus_for_training(tmp_path: Path, how: tuple[str, ...]) -> None:
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    proc = snakemake(tmp_path, *how, "-n", "-F")
    text = output_of(proc)
    assert proc.returncode == 0, text
    jobs = {job["rule"]: job["resources"] for job in job_blocks(text)}
    assert set(jobs) == set(RULES) | {"all"}
    with_profile = how[1] == SLURM_PROFILE
    for rule in RULES:
        resources = dict(item.split("=", 1) for item in jobs[rule].split(", "))
        job = type("Job", (), {"resources": _Resources(resources)})()
        if rule.startswith("train_stage"):
            assert resources["gpu"] == "1", jobs[rule]
            assert set_gres_string(job).strip() == "--gpus=1"  # what sbatch gets
            if with_profile:
                assert resources["slurm_partition"] == "gpu", jobs[rule]
                assert resources["runtime"] == "720" and resources["cpus_per_gpu"] == "8"
        else:
            assert "gpu" not in resources, jobs[rule]
            assert set_gres_string(job) == ""
            if with_profile:
                assert resources["slurm_partition"] == "cpu", jobs[rule]


class _Resources(dict):
    """Attribute access over a resources dict, as the slurm plugin reads job.resources."""

    def __getattr__(self, name: str) -> str:
        return self[name]


# ---- rerun scope, with a stand-in nepcore ---------------------------------------------------

STUB_NEPCORE = '''\
#!{python}
"""Stand-in for nepcore: writes every output a rule expects, with content that depends on the
command line (so changed settings change the outputs), and plots through matplotlib."""
import hashlib, json, os, shutil, sys
argv = sys.argv[1:]
def opt(name):
    return argv[argv.index(name) + 1]
digest = hashlib.sha256(" ".join(argv).encode()).hexdigest()
if argv[0] in ("demo-data", "convert", "qscaler"):
    open(opt("-o"), "w").write(digest)
elif argv[0] == "train":
    for name in {stage_files}:
        open(os.path.join(opt("--out-dir"), name), "w").write(digest)
elif argv[0] == "evaluate":
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for name in {eval_files}:
        path = os.path.join(opt("--out-dir"), name)
        if name.endswith(".png"):
            plt.plot([0, 1]); plt.savefig(path); plt.close()
        else:
            open(path, "w").write(json.dumps({{"args": digest}}))
elif argv[0] == "export":
    shutil.copy(opt("--model"), opt("-o"))
'''


def test_changed_stage2_setting_reruns_only_stage2_and_after(tmp_path: Path) -> None:
    """Params carry each step's config values: a stage-2 change reruns train_stage2,
    evaluate and export, never demo_data/convert/qscaler/stage 1 (stand-in nepcore)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "nepcore"
    stub.write_text(STUB_NEPCORE.format(python=sys.executable, stage_files=STAGE_FILES, eval_files=EVAL_FILES))
    stub.chmod(0o755)
    env = env_with_this_python(bin_dir)
    config = json.loads(json.dumps(TINY_CONFIG))
    cfg = write_config(tmp_path / "config.yaml", config)
    run = ("--cores", "1", "--resources", "gpu=1")

    first = snakemake(tmp_path, *run, configfile=cfg, env=env)
    assert first.returncode == 0, output_of(first)
    assert job_stats(output_of(first)) == {rule: 1 for rule in RULES + ["all"]}
    assert (tmp_path / "results/tiny/nep.txt").is_file()

    config["runs"]["tiny"]["stage2"]["lr"] = 0.0005
    write_config(cfg, config)
    dry = snakemake(tmp_path, "-n", "--cores", "1", configfile=cfg, env=env)
    assert job_stats(output_of(dry)) == {"train_stage2": 1, "evaluate": 1, "export": 1, "all": 1}
    assert "Params have changed" in output_of(dry)
    second = snakemake(tmp_path, *run, configfile=cfg, env=env)
    assert second.returncode == 0, output_of(second)
    assert job_stats(output_of(second)) == {"train_stage2": 1, "evaluate": 1, "export": 1, "all": 1}
    # the same for a model setting: everything from qscaler on, but not the shared dataset
    config["runs"]["tiny"]["model"]["neuron"] = 6
    write_config(cfg, config)
    dry = snakemake(tmp_path, "-n", "--cores", "1", configfile=cfg, env=env)
    assert set(job_stats(output_of(dry))) == set(RULES[2:]) | {"all"}
    # one stage alone: -R train_stage2 -U train_stage2 (separate rules, see SNAKEMAKE_NOTES)
    config["runs"]["tiny"]["model"]["neuron"] = 8
    write_config(cfg, config)
    only = snakemake(
        tmp_path,
        "-n",
        "-R",
        "train_stage2",
        "-U",
        "train_stage2",
        "--cores",
        "1",
        configfile=cfg,
        env=env,
    )
    assert job_stats(output_of(only)) == {"train_stage2": 1}

    report = snakemake(tmp_path, "--report", "report.html", configfile=cfg, env=env)
    assert report.returncode == 0, output_of(report)
    html = (tmp_path / "report.html").read_text()
    assert "parity.png" in html and "loss.png" in html and "metrics.json" in html
    assert "2 epochs max, patience auto, optimizer auto" in html  # the run's settings, auto as configured


# ---- end to end with the real nepcore -------------------------------------------------------


def missing_commands() -> list[str]:
    return [m for m in COMMAND_MODULES if importlib.util.find_spec(f"nepcore.cli.{m}") is None]


@pytest.mark.slow
@pytest.mark.skipif(
    bool(missing_commands()),
    reason=f"nepcore commands not importable yet: {', '.join(missing_commands())}",
)
@pytest.mark.heavy
def test_tiny_end_to_end_on_cpu(tmp_path: Path) -> None:
    """The whole DAG on CPU with a tiny model: every artifact, the report, a nep.txt calorine
    loads; then a stage-2 change reruns only train_stage2, evaluate and export."""
    config = json.loads(json.dumps(TINY_CONFIG))
    cfg = write_config(tmp_path / "config.yaml", config)
    run = ("--cores", "1", "--resources", "gpu=1")

    first = snakemake(tmp_path, *run, configfile=cfg)
    assert first.returncode == 0, output_of(first)
    assert job_stats(output_of(first)) == {rule: 1 for rule in RULES + ["all"]}
    expected = [f"results/data/tiny/{f}" for f in ("demo.xyz", "structures.h5")]
    expected += ["results/tiny/model/qscaler.json", "results/tiny/nep.txt"]
    expected += [f"results/tiny/stage{s}/{f}" for s in (1, 2) for f in STAGE_FILES]
    expected += [f"results/tiny/eval/{f}" for f in EVAL_FILES]
    expected += [f"logs/{rule}/tiny.log" for rule in RULES]
    expected += [f"logs/benchmarks/{rule}/tiny.tsv" for rule in RULES if rule not in ("demo_data", "export")]
    missing = [p for p in expected if not (tmp_path / p).is_file() or (tmp_path / p).stat().st_size == 0]
    assert not missing, f"missing or empty: {missing}"
    metrics = json.loads((tmp_path / "results/tiny/eval/metrics.json").read_text())
    assert metrics, "metrics.json is empty"

    report = snakemake(tmp_path, "--report", "report.html", configfile=cfg)
    assert report.returncode == 0, output_of(report)
    html = (tmp_path / "report.html").read_text()
    assert "parity.png" in html and "loss.png" in html

    calorine = pytest.importorskip("calorine.calculators", reason="calorine not installed")
    from ase.io import read

    atoms = read(tmp_path / "results/data/tiny/demo.xyz", index=0)
    atoms.calc = calorine.CPUNEP(str(tmp_path / "results/tiny/nep.txt"))
    assert abs(atoms.get_potential_energy()) < 1e6
    assert atoms.get_forces().shape == (len(atoms), 3)

    stage1 = (tmp_path / "results/tiny/stage1/checkpoint.pt").stat().st_mtime_ns
    h5 = (tmp_path / "results/data/tiny/structures.h5").stat().st_mtime_ns
    config["runs"]["tiny"]["stage2"]["lr"] = 0.0005
    write_config(cfg, config)
    second = snakemake(tmp_path, *run, configfile=cfg)
    assert second.returncode == 0, output_of(second)
    assert job_stats(output_of(second)) == {"train_stage2": 1, "evaluate": 1, "export": 1, "all": 1}
    assert (tmp_path / "results/tiny/stage1/checkpoint.pt").stat().st_mtime_ns == stage1
    assert (tmp_path / "results/data/tiny/structures.h5").stat().st_mtime_ns == h5
