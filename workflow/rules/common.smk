"""Config validation, wildcards and the input/params functions of the rules.

The logic lives in nepcore.workflow (pure functions, unit-tested without Snakemake); this
file binds it to ``config`` and to the wildcards.

Wildcards:
    dataset  a key of config["datasets"]; its HDF5 is results/data/<dataset>/structures.h5,
             shared by every run that trains on it.
    run      a key of config["runs"]; everything of the run lives under results/<run>/.
    member   one trained model of a run: "<run>" for the first seed, "<run>/seed<N>" for the
             other seeds of a committee; stage outputs are results/<member>/stage{1,2}/.
"""

import os
import re

import yaml
from snakemake.exceptions import WorkflowError

from nepcore import workflow as wf


def alternatives(names) -> str:
    """A regex matching exactly one of ``names`` (for wildcard_constraints); none: no name."""
    names = sorted(names, key=len, reverse=True)
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


try:
    with open(workflow.source_path("../schemas/config.schema.yaml")) as schema_file:
        wf.validate_config(config, yaml.safe_load(schema_file))
    for warning in wf.check_config(config):
        logger.warning(warning)
except wf.ConfigError as err:
    raise WorkflowError(str(err)) from None
# every rule's nepcore (both stages, committee members, evaluate) compiles into one cache
# (update() rather than item assignment: this SETS a variable for the jobs, and `snakemake
# --lint` reads every os.environ[...] as a variable the workflow requires from the user)
if config["compile_cache"]:
    os.environ.update(NEPCORE_COMPILE_CACHE=os.path.abspath(config["compile_cache"]))

RUNS = list(config["runs"])
DATASETS = list(config["datasets"])
#: runs with several seeds: their evaluation also writes committee.csv (rule evaluate_committee)
COMMITTEE_RUNS = [r for r in RUNS if len(config["runs"][r]["seeds"]) > 1]
SINGLE_RUNS = [r for r in RUNS if r not in COMMITTEE_RUNS]
MEMBERS = [m for r in RUNS for m in wf.members(r, config["runs"][r])]
MEMBER_RUN = {m: r for r in RUNS for m in wf.members(r, config["runs"][r])}
MEMBER_SEED = {
    m: s for r in RUNS for m, s in zip(wf.members(r, config["runs"][r]), config["runs"][r]["seeds"])
}


wildcard_constraints:
    dataset=alternatives(DATASETS),
    run=alternatives(RUNS),
    member=alternatives(MEMBER_RUN),


# NB: params functions that carry config values take only ``wildcards``. Snakemake leaves
# params functions with an ``input``/``output``/``threads``/``resources`` argument out of its
# params-changed rerun trigger, so a config change would not rerun the step.


def run_of(wildcards) -> str:
    """The run of the run or member in ``wildcards``."""
    return wildcards.run if hasattr(wildcards, "run") else MEMBER_RUN[wildcards.member]


def run_config(wildcards) -> dict:
    return config["runs"][run_of(wildcards)]


# ---- data -------------------------------------------------------------------------------


def dataset_config(wildcards) -> dict:
    return config["datasets"][wildcards.dataset]


def demo_args(wildcards) -> str:
    return wf.demo_flags(dataset_config(wildcards))


def convert_inputs(wildcards) -> dict:
    """Raw files of a dataset: the configured files (globs expanded) or the demo extxyz."""
    ds, where = dataset_config(wildcards), f"datasets.{wildcards.dataset}"
    files = wf.expand_files(ds["files"], f"{where}.files")
    return {
        "files": files or [f"results/data/{wildcards.dataset}/demo.xyz"],
        "valid": wf.expand_files(ds["valid"], f"{where}.valid"),
        "test": wf.expand_files(ds["test"], f"{where}.test"),
    }


def convert_args(wildcards) -> str:
    held_out = convert_inputs(wildcards)
    return wf.convert_flags(dataset_config(wildcards), held_out["valid"], held_out["test"])


def structures(wildcards) -> str:
    """The converted HDF5 dataset of the run (or member) in ``wildcards``."""
    return f"results/data/{run_config(wildcards)['dataset']}/structures.h5"


# ---- model and training -----------------------------------------------------------------


def nep_in_input(wildcards) -> list:
    """The run's GPUMD nep.in as an input (so editing it reruns qscaler), or nothing."""
    path = run_config(wildcards)["nep_in"]
    return [path] if path else []


def qscaler_args(wildcards) -> str:
    return wf.qscaler_flags(run_config(wildcards))


def qscaler_of_member(wildcards) -> str:
    return f"results/{run_of(wildcards)}/model/qscaler.json"


def finetune_input(wildcards) -> list:
    """The model stage 1 starts from (runs.<run>.finetune_from), or nothing."""
    path = run_config(wildcards)["finetune_from"]
    return [path] if path else []


def train_gpus(wildcards) -> int:
    """GPUs (DDP processes) of a member's training jobs: runs.<run>.gpus."""
    return run_config(wildcards)["gpus"]


def train_launcher(wildcards) -> str:
    """``nepcore``, or torchrun starting one DDP process per GPU when runs.<run>.gpus > 1."""
    n = train_gpus(wildcards)
    return "nepcore" if n == 1 else f"torchrun --standalone --nproc_per_node={n} -m nepcore"


def stage_args(stage: int):
    """A params function: the flags of ``nepcore train --stage <stage>`` for a member."""

    def args(wildcards) -> str:
        return wf.train_flags(run_config(wildcards), stage, MEMBER_SEED[wildcards.member])

    return args


# ---- evaluation -------------------------------------------------------------------------


def chosen_model(wildcards) -> str:
    return wf.final_model(wildcards.run, run_config(wildcards))


def committee_models(wildcards) -> list:
    return wf.committee_models(wildcards.run, run_config(wildcards))


def committee_args(wildcards) -> str:
    return wf.committee_flags(committee_models(wildcards))
