"""Config validation, path helpers and input/params functions shared by the rules.

Wildcards:
    dataset  a key of config["datasets"]; its HDF5 is results/data/<dataset>/structures.h5,
             shared by every run that trains on it.
    run      a key of config["runs"]; everything of the run lives under results/<run>/.
    member   one trained model of a run: "<run>" for the first seed, "<run>/seed<N>" for the
             other seeds of a committee; stage outputs are results/<member>/stage{1,2}/.
"""

import glob
import re
import shlex

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from nepcore.workflow import flags, train_flags

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
#: nep.in keywords that are training settings: the workflow takes them from the config
NEP_IN_TRAINING_KEYS = {
    "lambda_e": "lambda_e",
    "lambda_f": "lambda_f",
    "lambda_v": "lambda_v",
    "lambda_1": "lambda_1",
    "lambda_2": "lambda_2",
    "batch": "batch",
    "generation": "epochs",
}


def validate_config(config: dict) -> None:
    """Validate ``config`` against the JSON schema (filling in defaults) and cross-check it.

    Raises a WorkflowError whose first line names the offending key, e.g.
    ``invalid config at runs.demo.stage2: Additional properties are not allowed ('lrr' ...)``.
    """
    try:
        validate(config, schema="../schemas/config.schema.yaml")
    except WorkflowError as e:
        err = e.__context__  # the jsonschema ValidationError validate() caught
        if not hasattr(err, "json_path"):
            raise
        where = err.json_path.removeprefix("$.").removeprefix("$") or "top level"
        raise WorkflowError(f"invalid config at {where}: {err.message}") from None
    for name, run in config["runs"].items():
        if run["dataset"] not in config["datasets"]:
            raise WorkflowError(
                f"invalid config at runs.{name}.dataset: unknown dataset {run['dataset']!r}; "
                f"known: {sorted(config['datasets'])}"
            )
        if ("model" in run) == (run["nep_in"] is not None):
            raise WorkflowError(
                f"invalid config at runs.{name}: give exactly one of model and nep_in"
            )
        if run["nep_in"] is not None:
            warn_nep_in_training_keys(name, run["nep_in"])
    for name, ds in config["datasets"].items():
        if bool(ds["valid"]) != bool(ds["test"]):
            raise WorkflowError(
                f"invalid config at datasets.{name}: give both valid and test files, or neither"
            )
        for key in ("files", "valid", "test"):
            expand_files(ds[key], f"datasets.{name}.{key}")


def warn_nep_in_training_keys(run: str, path: str) -> None:
    """Warn about nep.in keywords that are training settings, which this workflow takes
    from the config (runs.<run>.stage1/stage2) rather than from the nep.in file."""
    try:
        with open(path) as f:
            words = [line.split() for line in f]
        keys = {w[0].lower() for w in words if w and not w[0].startswith("#")}
    except OSError:
        return  # a missing file is reported by snakemake as a missing input
    for key in sorted(keys & NEP_IN_TRAINING_KEYS.keys()):
        logger.warning(
            f"runs.{run}.nep_in: {path} sets '{key}', a training setting; the workflow uses "
            f"runs.{run}.stage1/stage2.{NEP_IN_TRAINING_KEYS[key]} from the config instead"
        )


def expand_files(patterns: list, where: str) -> list:
    """Expand glob patterns (sorted per pattern); a pattern that matches nothing is an error."""
    files = []
    for pattern in patterns:
        found = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not found:
            raise WorkflowError(f"invalid config at {where}: {pattern!r} matches no file")
        files.extend(found)
    return files


def alternatives(names) -> str:
    """A regex matching exactly one of ``names`` (for wildcard_constraints)."""
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


validate_config(config)

RUNS = list(config["runs"])
DATASETS = list(config["datasets"])


def members(run: str) -> list:
    """The trained models of ``run``: ``run`` for its first seed, ``run/seed<N>`` after."""
    seeds = config["runs"][run]["seeds"]
    return [run] + [f"{run}/seed{seed}" for seed in seeds[1:]]


MEMBER_SEED = {m: s for r in RUNS for m, s in zip(members(r), config["runs"][r]["seeds"])}
MEMBER_RUN = {m: r for r in RUNS for m in members(r)}


wildcard_constraints:
    dataset=alternatives(DATASETS),
    run=alternatives(RUNS),
    member=alternatives(MEMBER_RUN),


def all_outputs() -> list:
    """Every final artifact: the exported model, evaluation and stage outputs of each run."""
    out = []
    for run in RUNS:
        out.append(f"results/{run}/nep.txt")
        out += [f"results/{run}/eval/{f}" for f in EVAL_FILES]
        for member in members(run):
            out += [f"results/{member}/stage{s}/{f}" for s in (1, 2) for f in STAGE_FILES]
    return out


# NB: params functions that carry config values take only ``wildcards``. Snakemake leaves
# params functions with an ``input``/``output``/``threads``/``resources`` argument out of its
# params-changed rerun trigger, so a config change would not rerun the step.


# ---- data -------------------------------------------------------------------------------


def dataset_config(wildcards) -> dict:
    return config["datasets"][wildcards.dataset]


def demo_args(wildcards) -> str:
    """Flags of nepcore demo-data: the dataset's demo settings."""
    demo = dataset_config(wildcards)["demo"]
    return flags({"--seed": demo["seed"], "--n-frames": demo["n_frames"]})


def convert_inputs(wildcards) -> dict:
    """Raw files of a dataset: the configured files (globs expanded) or the demo extxyz."""
    ds = dataset_config(wildcards)
    where = f"datasets.{wildcards.dataset}"
    if not ds["files"]:
        files = [f"results/data/{wildcards.dataset}/demo.xyz"]
    else:
        files = expand_files(ds["files"], f"{where}.files")
    return {
        "files": files,
        "valid": expand_files(ds["valid"], f"{where}.valid"),
        "test": expand_files(ds["test"], f"{where}.test"),
    }


def convert_args(wildcards) -> str:
    """Flags of nepcore convert: species, label keys and the split of the dataset."""
    ds = dataset_config(wildcards)
    held_out = convert_inputs(wildcards)
    options = {
        "--types": ds["types"] or None,
        "--energy-key": ds["energy_key"],
        "--forces-key": ds["forces_key"],
        "--virial-key": ds["virial_key"],
        "--stress-key": ds["stress_key"],
        "--weights-key": ds["weights_key"],
    }
    if held_out["valid"]:
        options.update({"--valid": held_out["valid"], "--test": held_out["test"]})
    else:
        options["--split"] = ds["split"]
    options["--seed"] = ds["seed"]
    return flags(options)


def structures(wildcards) -> str:
    """The converted HDF5 dataset of the run (or member) in ``wildcards``."""
    run = wildcards.run if hasattr(wildcards, "run") else MEMBER_RUN[wildcards.member]
    return f"results/data/{config['runs'][run]['dataset']}/structures.h5"


# ---- model ------------------------------------------------------------------------------


def nep_in_input(wildcards) -> list:
    """The run's GPUMD nep.in as an input (so editing it reruns qscaler), or nothing."""
    path = config["runs"][wildcards.run]["nep_in"]
    return [path] if path else []


def qscaler_args(wildcards) -> str:
    """Flags of nepcore qscaler: the architecture (model keys or --nep-in) and scaling."""
    run = config["runs"][wildcards.run]
    options = {}
    if run["nep_in"]:
        options["--nep-in"] = run["nep_in"]
    else:
        model = run["model"]
        options.update(
            {
                "--type": model["type"],
                "--cutoff": model["cutoff"],
                "--n-max": model["n_max"],
                "--basis-size": model["basis_size"],
                "--l-max": model["l_max"],
                "--neuron": model["neuron"],
                "--zbl": model["zbl"],
                "--use-typewise-cutoff-zbl": model["use_typewise_cutoff_zbl"],
            }
        )
    qs = run["qscaler"]
    options.update({"--mode": qs["mode"], "--seed": qs["seed"], "--batch-size": qs["batch_size"]})
    return flags(options)


# ---- training ---------------------------------------------------------------------------


def qscaler_of_member(wildcards) -> str:
    return f"results/{MEMBER_RUN[wildcards.member]}/model/qscaler.json"


def finetune_input(wildcards) -> list:
    """The model stage 1 starts from (runs.<run>.finetune_from), or nothing."""
    path = config["runs"][MEMBER_RUN[wildcards.member]]["finetune_from"]
    return [path] if path else []


def train_gpus(wildcards) -> int:
    """GPUs (DDP processes) of a member's training jobs: runs.<run>.gpus."""
    return config["runs"][MEMBER_RUN[wildcards.member]]["gpus"]


def train_launcher(wildcards) -> str:
    """``nepcore``, or torchrun starting one DDP process per GPU when runs.<run>.gpus > 1."""
    n = train_gpus(wildcards)
    return "nepcore" if n == 1 else f"torchrun --standalone --nproc_per_node={n} -m nepcore"


def stage_args(stage: int):
    """A params function giving the flags of ``nepcore train --stage <stage>`` for a member:
    the stage's settings, the member's seed and where it starts (nepcore.workflow.train_flags)."""

    def args(wildcards) -> str:
        run = config["runs"][MEMBER_RUN[wildcards.member]]
        return train_flags(run, stage, MEMBER_SEED[wildcards.member])

    return args


# ---- evaluation -------------------------------------------------------------------------


def final_model(run: str, member: str | None = None) -> str:
    """The stage-2 model file of ``member`` (default: the run's first seed) that
    runs.<run>.final_model selects."""
    name = "nep_best.txt" if config["runs"][run]["final_model"] == "best" else "nep.txt"
    return f"results/{member or run}/stage2/{name}"


def chosen_model(wildcards) -> str:
    return final_model(wildcards.run)


def committee_models(wildcards) -> list:
    """Every seed's final model when the run has several seeds (a committee), else nothing."""
    ms = members(wildcards.run)
    return [final_model(wildcards.run, m) for m in ms] if len(ms) > 1 else []


def committee_args(wildcards) -> str:
    return flags({"--committee": committee_models(wildcards) or None})
