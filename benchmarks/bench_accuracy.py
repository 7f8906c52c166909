"""Learning curves of training recipes: held-out test error against CPU seconds, through the real commands.

For each dataset and recipe this runs what a user runs, in a scratch folder outside the repo:
``nepcore convert`` -> ``nepcore qscaler`` -> ``nepcore train --stage 1`` -> ``--stage 2`` ->
``nepcore evaluate``. The training commands write their best-so-far model every few epochs
(``--snapshot-every``) with the process CPU seconds at that moment; afterwards each snapshot is
scored on the test split, which no recipe setting ever sees (early stop, the schedule and the
best model use the validation split only). CPU time is the process CPU time of the training
commands (``resource.getrusage(RUSAGE_CHILDREN)`` for their totals; stage 2's curve starts at
stage 1's total), so it is comparable on a shared machine where wall time is not. Each run also
records its training commands' wall seconds (``train_wall_s``, and ``wall_s`` per stage): what a
user waits for with ``--threads`` N.

    python benchmarks/bench_accuracy.py --datasets demo sweep_k2 --recipes old new \\
        --work /tmp/bench_accuracy --out curves.json --plot curves.png

Datasets (``--datasets``; teacher-labelled ones from ../shared/data): ``demo`` (the EMT demo,
300 frames), ``sweep_k2``, ``sweep_k4``, ``sweep_k8`` (400 frames), ``PdCuNi_medium`` (2000
frames), ``PdCuNi_small`` (120 frames), ``sweep_mix`` (sweep_k2, sweep_k4 and sweep_k8 in one
file, 1200 frames) and ``sweep_k1``, ``sweep_k16`` (400 frames, never used for tuning): split
0.8/0.1/0.1 with seed 0. ``PdCuNi_mid``: 155 of PdCuNi_medium's frames (105
training frames, ~14,400 atoms; 20 validation, 30 test) and ``sweep_k2_half``: 240 of sweep_k2's
(160 training frames, ~15,200 atoms; 40, 40), between the sizes where stage 2's optimisers were
compared before. ``Si_teacher``: 158 silicon frames labelled by a published GPUMD potential
(``teacher_sets.py``; made in the work folder), ``C_teacher``: 160 carbon frames labelled by
another (thirtieth round), ``PdCuNiP_teacher`` and ``CrCoNi_teacher``: 108 metallic-glass and 116
high-entropy-alloy frames labelled by the two gpumd-reference potentials (thirty-first round),
never used for tuning; ``<name>_v20`` of four of these: the same frames split 0.7/0.2/0.1 (the same
test frames, a validation split twice as large). ``PbTe``: 25 DFT frames, 5
folds (``--folds``), each fold's 5 frames are its test split and 2 of the other 20 its
validation split. Recipes (``--recipes``): ``old`` (the settings before issue 10, spelled out;
the engine is today's, whose plateau rule has counted validation forces since the fourth round
and every validation RMSE since the tenth, so its stage 1 now runs longer than the pre-issue
code's did), ``new`` (the current defaults: no flags), ``r18`` (the eighteenth round's defaults:
Adam's beta2 0.999, which every recipe named after an earlier round pins), ``old_seed1``,
``new_seed1`` and ``new_stage1_only_seed1`` (training seed 1; the split stays seed 0's), and the
variants in ``accuracy_recipes.py`` (flags added to the current defaults). Prints and writes JSON: per run the curve
(epoch, CPU s, stage, test E/F/V RMSE), the test RMSEs at ``--at`` CPU seconds (default 60 and
300) and at the end, the stage ends, and the machine load; ``--plot`` draws test force and
energy RMSE against CPU seconds.

Each training command gets at most ``--budget`` CPU seconds (RLIMIT_CPU; default 600); a stage
stopped by the budget ends the run there (its snapshots still count).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import teacher_sets
from accuracy_recipes import RECIPES

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
TEACHER = DATA / "teacher-labelled"

#: The issue-10 user's architecture for the teacher-labelled alloys; the demo's and PbTe's own.
ALLOY_MODEL = "--cutoff 6 4 --n-max 4 4 --basis-size 8 8 --l-max 4 2 0 --neuron 30".split()
DATASETS = {
    "demo": {
        "types": ["Cu", "Pd", "Ni"],
        "snapshot": 5,
        "model": "--cutoff 5 4 --n-max 4 4 --basis-size 6 6 --l-max 4 2 0 --neuron 20".split(),
    },
    "sweep_k2": {"file": TEACHER / "sweep_k2.xyz", "types": ["Cu", "Ni"], "snapshot": 2, "model": ALLOY_MODEL},
    "sweep_k4": {"file": TEACHER / "sweep_k4.xyz", "types": "Cu Ni Pd Ag".split(), "snapshot": 2, "model": ALLOY_MODEL},
    "sweep_k8": {
        "file": TEACHER / "sweep_k8.xyz",
        "types": "Cu Ni Pd Ag Au Pt Al Pb".split(),
        "snapshot": 2,
        "model": ALLOY_MODEL,
    },
    # twenty-first round: a second large set for the batch cap (960 training frames, ~90,000
    # atoms): sweep_k2, sweep_k4 and sweep_k8 in one file ("file" is checked for presence)
    "sweep_mix": {
        "file": TEACHER / "sweep_k8.xyz",
        "make": lambda path: path.write_bytes(b"".join((TEACHER / f"sweep_k{k}.xyz").read_bytes() for k in (2, 4, 8))),
        "types": "Cu Ni Pd Ag Au Pt Al Pb".split(),
        "snapshot": 2,
        "model": ALLOY_MODEL,
    },
    # never used for tuning (fifth round): one element, and sixteen
    "sweep_k1": {"file": TEACHER / "sweep_k1.xyz", "types": ["Cu"], "snapshot": 2, "model": ALLOY_MODEL},
    "sweep_k16": {
        "file": TEACHER / "sweep_k16.xyz",
        "types": "Cu Ni Pd Ag Au Pt Al Pb Ti Zr V Cr Mo Ta W Mg".split(),
        "snapshot": 2,
        "model": ALLOY_MODEL,
    },
    # the closest to issue 10's user (152 frames of 30-108 atoms); used for tuning since round 4
    "PdCuNi_small": {
        "file": TEACHER / "PdCuNi_small.xyz",
        "types": ["Pd", "Cu", "Ni"],
        "snapshot": 5,
        "model": ALLOY_MODEL,
    },
    "PdCuNi_medium": {
        "file": TEACHER / "PdCuNi_medium.xyz",
        "types": ["Pd", "Cu", "Ni"],
        "snapshot": 1,
        "model": ALLOY_MODEL,
    },
    # tenth round: a mid-sized split (~14,000 training atoms) between those where L-BFGS and
    # Adam won stage 2, drawn from PdCuNi_medium's frames (seed 1) to pin optimizer auto's limit
    "PdCuNi_mid": {
        "file": TEACHER / "PdCuNi_medium.xyz",
        "types": ["Pd", "Cu", "Ni"],
        "snapshot": 5,
        "model": ALLOY_MODEL,
        "subset": {"test": 30, "valid": 20, "train": 105},
    },
    "sweep_k2_half": {
        "file": TEACHER / "sweep_k2.xyz",
        "types": ["Cu", "Ni"],
        "snapshot": 5,
        "model": ALLOY_MODEL,
        "subset": {"test": 40, "valid": 40, "train": 160},
    },
    # sixteenth round: held out from every choice; another teacher (teacher_sets.py), one covalent
    # element, a liquid and a surface; "file" is the teacher potential the frames are made with
    "Si_teacher": {
        "file": teacher_sets.SI_POTENTIAL,
        "make": teacher_sets.make_si_teacher,
        "types": ["Si"],
        "snapshot": 5,
        "model": "--cutoff 5 4 --n-max 4 4 --basis-size 8 8 --l-max 4 2 0 --neuron 30".split(),
    },
    # thirtieth round: held out from every choice; carbon (diamond, graphite, graphene, 3000 K)
    # labelled by a third teacher (teacher_sets.py), with the teacher's own cutoffs
    "C_teacher": {
        "file": teacher_sets.C_POTENTIAL,
        "make": teacher_sets.make_c_teacher,
        "types": ["C"],
        "snapshot": 5,
        "model": "--cutoff 4.2 3.7 --n-max 4 4 --basis-size 8 8 --l-max 4 2 0 --neuron 30".split(),
    },
    # thirty-first round: held out from every choice; a metallic glass with a metalloid and a
    # high-entropy alloy, labelled by the two gpumd-reference potentials (teacher_sets.py), with
    # the issue-10 user's architecture
    "PdCuNiP_teacher": {
        "file": teacher_sets.PDCUNIP_POTENTIAL,
        "make": teacher_sets.make_pdcunip_teacher,
        "types": ["Pd", "Cu", "Ni", "P"],
        "snapshot": 5,
        "model": ALLOY_MODEL,
    },
    "CrCoNi_teacher": {
        "file": teacher_sets.CRCONI_POTENTIAL,
        "make": teacher_sets.make_crconi_teacher,
        "types": ["Cr", "Co", "Ni"],
        "snapshot": 5,
        "model": ALLOY_MODEL,
    },
    "PbTe": {
        "file": DATA / "PbTe" / "train.xyz",
        "types": ["Te", "Pb"],
        "snapshot": 5,
        "model": "--cutoff 8 4 --n-max 6 6 --basis-size 6 6 --l-max 4 2 0 --neuron 30".split(),
    },
}
# forty-seventh round: the same frames split 0.7/0.2/0.1 (the same test frames; more validation)
for _name in ("PdCuNi_small", "PdCuNiP_teacher", "CrCoNi_teacher", "C_teacher"):
    DATASETS[f"{_name}_v20"] = {**DATASETS[_name], "split": ["0.7", "0.2", "0.1"], "frames_of": _name}


def timed(cmd: list[str], log: Path, cpu_limit: float | None = None) -> tuple[int, float, float]:
    """Run ``cmd`` (output to ``log``, at most ``cpu_limit`` CPU seconds).

    Returns:
        (exit code, its CPU seconds with its children's, its wall seconds).
    """
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()

    def limit() -> None:
        if cpu_limit:
            resource.setrlimit(resource.RLIMIT_CPU, (int(cpu_limit) + 1, int(cpu_limit) + 2))

    with open(log, "w") as fh:
        code = subprocess.call(cmd, stdout=fh, stderr=subprocess.STDOUT, preexec_fn=limit)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return code, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def sh(cmd: list[str], log: Path, cpu_limit: float | None = None) -> tuple[int, float]:
    """Run ``cmd`` (output to ``log``); returns (exit code, its CPU seconds, children included)."""
    code, cpu, _ = timed(cmd, log, cpu_limit)
    return code, cpu


def nepcore(*args: str) -> list[str]:
    return [sys.executable, "-m", "nepcore", *args]


def prepare(name: str, work: Path, fold: int | None, folds: int) -> Path:
    """The dataset's structures.h5 (converted once per dataset / fold)."""
    spec = DATASETS[name]
    folder = work / "data" / (name if fold is None else f"{name}_fold{fold}")
    folder.mkdir(parents=True, exist_ok=True)
    h5 = folder / "structures.h5"
    if h5.exists():
        return h5
    if name == "demo":
        sh(
            nepcore("demo-data", "-o", str(folder / "demo.xyz"), "--n-frames", "300", "--seed", "0"),
            folder / "demo.log",
        )
        files = [str(folder / "demo.xyz")]
    elif "make" in spec:
        base = spec.get("frames_of", name)  # a re-split of another made set: its frames, made once
        if base == name:
            spec["make"](folder / f"{name}.xyz")
        else:
            prepare(base, work, None, folds)
        files = [str(work / "data" / base / f"{base}.xyz")]
    else:
        files = [str(spec["file"])]
    if fold is None and "subset" not in spec:
        cmd = nepcore(
            "convert",
            *files,
            "-o",
            str(h5),
            "--split",
            *spec.get("split", ["0.8", "0.1", "0.1"]),
            "--seed",
            "0",
            "--types",
            *spec["types"],
            "--no-progress",
        )
    else:
        from ase.io import read, write

        frames = read(files[0], ":")
        if fold is None:  # a subset: the first frames of a seed-1 permutation, test first
            order, parts, start = np.random.default_rng(1).permutation(len(frames)), {}, 0
            for part, count in spec["subset"].items():
                parts[part] = sorted(int(i) for i in order[start : start + count])
                start += count
        else:
            order = np.random.default_rng(0).permutation(len(frames))
            test = set(int(i) for i in np.array_split(order, folds)[fold])
            rest = [int(i) for i in order if int(i) not in test]
            parts = {"train": rest[2:], "valid": rest[:2], "test": sorted(test)}
        for part, idx in parts.items():
            write(folder / f"{part}.xyz", [frames[i] for i in idx], format="extxyz")
        cmd = nepcore(
            "convert",
            str(folder / "train.xyz"),
            "--valid",
            str(folder / "valid.xyz"),
            "--test",
            str(folder / "test.xyz"),
            "-o",
            str(h5),
            "--types",
            *spec["types"],
            "--no-progress",
        )
    code, _ = sh(cmd, folder / "convert.log")
    if code:
        raise SystemExit(f"convert failed for {name}: see {folder / 'convert.log'}")
    return h5


class TestScorer:
    """Test-split RMSEs of nep.txt files (float64; identical files scored once)."""

    def __init__(self, h5: Path, split: str = "test") -> None:
        self.h5, self.split, self.cache, self.store = h5, split, {}, None

    def __call__(self, path: Path) -> dict[str, float]:
        import torch

        from nepcore.data.store import StreamDataStore
        from nepcore.io.nep_txt import read_nep
        from nepcore.model.nep_model import NEPModel
        from nepcore.training.epoch import evaluate_sums
        from nepcore.training.loss import rmse

        key = hashlib.sha256(path.read_bytes()).hexdigest()
        if key not in self.cache:
            potential = read_nep(path)
            if self.store is None:
                self.store = StreamDataStore.from_hdf5(
                    self.h5, potential.spec, split=self.split, dtype=torch.float64, progress=False
                )
            sums = evaluate_sums(
                NEPModel(potential.spec, potential.params), self.store, 32, torch.device("cpu"), "analytical"
            )
            r = rmse({k: float(v) for k, v in sums.items()}, shifted_energy=False)
            milli = lambda v: None if v is None else 1e3 * v
            self.cache[key] = {"e": milli(r["rmse_e"]), "f": milli(r["rmse_f"]), "v": milli(r["rmse_v"])}
        return self.cache[key]


def snapshots(stage_dir: Path) -> list[tuple[int, float, Path]]:
    index = stage_dir / "snapshots" / "index.tsv"
    if not index.exists():
        return []
    rows = [line.split("\t") for line in index.read_text().splitlines() if line.strip()]
    return [(int(e), float(c), stage_dir / "snapshots" / f.strip()) for e, c, f in rows]


def reuse_stage1(folder: Path, source: Path) -> dict:
    """Copy the finished stage 1 of another recipe's run of the same data (a recipe that changes
    stage 2 only: its stage 1 would repeat that run to the digit); returns its stage entry.

    Its CPU seconds are the source run's as ``bench_accuracy`` measured them (``stage1.cpu_s``),
    or, for a run made before that file was written, the stage's own ``process_cpu_s`` (which
    leaves out the few seconds of starting Python and importing torch).
    """
    status_path = source / "stage1" / "status.json"
    status = json.loads(status_path.read_text()) if status_path.exists() else {}
    if not status.get("finished"):
        raise SystemExit(f"{source / 'stage1'}: no finished stage 1 to reuse; run its recipe first")
    if (source / "qscaler.json").read_bytes() != (folder / "qscaler.json").read_bytes():
        raise SystemExit(f"{folder / 'qscaler.json'} differs from {source / 'qscaler.json'}: stage 1 not reusable")
    if (folder / "stage1").exists():
        shutil.rmtree(folder / "stage1")
    shutil.copytree(source / "stage1", folder / "stage1")
    cpu_file = source / "stage1.cpu_s"
    used = float(cpu_file.read_text()) if cpu_file.exists() else status["last"]["process_cpu_s"]
    return {
        "stage": 1,
        "exit": 0,
        "cpu_s": used,
        "cpu_offset_s": 0.0,
        "reason": status.get("reason"),
        "epoch": status.get("epoch"),
        "best_epoch": status.get("best_epoch"),
        "reused_from": str(source),
        "cpu_from": "stage1.cpu_s" if cpu_file.exists() else "status.json process_cpu_s",
    }


def run_recipe(name: str, recipe: str, h5: Path, folder: Path, budget: float, threads: int) -> dict:
    """q-scaler, both stages and the evaluation of one recipe; returns its curve and ends."""
    spec, flags = DATASETS[name], RECIPES[recipe]
    folder.mkdir(parents=True, exist_ok=True)
    q = folder / "qscaler.json"
    code, qs_cpu = sh(
        nepcore("qscaler", str(h5), "-o", str(q), "--type", *spec["types"], *spec["model"], *flags.get("qscaler", [])),
        folder / "qscaler.log",
    )
    if code:
        raise SystemExit(f"qscaler failed: {folder / 'qscaler.log'}")
    common = [
        "--data",
        str(h5),
        "--qscaler",
        str(q),
        "--no-progress",
        "--device",
        "cpu",
        "--snapshot-every",
        str(spec["snapshot"]),
    ]
    stages, cpu, out = [], 0.0, {"recipe": recipe, "flags": flags, "qscaler_cpu_s": qs_cpu}
    for stage in (1, 2):
        if stage == 1 and flags.get("stage1_from"):
            if RECIPES[flags["stage1_from"]]["stage1"] != flags["stage1"]:
                raise SystemExit(f"{recipe}: its stage 1 differs from {flags['stage1_from']}'s, so not reusable")
            stages.append(reuse_stage1(folder, folder.parent / flags["stage1_from"]))
            cpu += stages[-1]["cpu_s"]
            continue
        if flags[f"stage{stage}"] is None:
            break
        init = [] if stage == 1 else ["--init", str(folder / "stage1" / "checkpoint.pt")]
        cmd = nepcore(
            "train",
            "--stage",
            str(stage),
            *common,
            "--out-dir",
            str(folder / f"stage{stage}"),
            *init,
            *flags[f"stage{stage}"],
        )
        code, used, wall = timed(cmd, folder / f"stage{stage}.log", cpu_limit=budget)
        status_path = folder / f"stage{stage}" / "status.json"
        status = json.loads(status_path.read_text()) if code == 0 and status_path.exists() else {}
        stages.append(
            {
                "stage": stage,
                "exit": code,
                "cpu_s": used,
                "wall_s": wall,
                "cpu_offset_s": cpu,
                "reason": status.get("reason", "cpu budget" if code else None),
                "epoch": status.get("epoch"),
                "best_epoch": status.get("best_epoch"),
            }
        )
        (folder / f"stage{stage}.cpu_s").write_text(f"{used!r}\n")
        cpu += used
        if code:
            break
    out["stages"] = stages
    out["train_cpu_s"] = cpu
    # the training commands' wall seconds (what a user waits for with --threads N); unknown
    # when a stage was copied from another run
    walls = [s.get("wall_s") for s in stages]
    out["train_wall_s"] = None if None in walls else sum(walls)
    scorer = TestScorer(h5)
    curve = []
    for s in stages:
        for epoch, c, path in snapshots(folder / f"stage{s['stage']}"):
            curve.append({"stage": s["stage"], "epoch": epoch, "cpu_s": s["cpu_offset_s"] + c, **scorer(path)})
    out["curve"] = curve
    last = stages[-1]
    final_dir = folder / f"stage{last['stage']}"
    final = final_dir / "nep_best.txt"
    if last["exit"] == 0 and final.exists():
        code, _ = sh(
            nepcore(
                "evaluate",
                "--model",
                str(final),
                "--data",
                str(h5),
                "--out-dir",
                str(folder / "eval"),
                "--device",
                "cpu",
            ),
            folder / "evaluate.log",
        )
        metrics = json.loads((folder / "eval" / "metrics.json").read_text())
        out["final"] = {
            k: 1e3 * metrics["splits"]["test"][q]["rmse"]
            for k, q in (("e", "energy"), ("f", "force"), ("v", "virial"))
            if metrics["splits"]["test"][q]
        }
        out["final"]["train_f"] = 1e3 * metrics["splits"]["train"]["force"]["rmse"]
        out["final"]["train_e"] = 1e3 * metrics["splits"]["train"]["energy"]["rmse"]
        out["final"]["warnings"] = metrics["warnings"]
    elif curve:  # stopped by the budget: its last snapshot is what there is
        out["final"] = {k: curve[-1][k] for k in ("e", "f", "v")}
        out["final"]["budget_stopped"] = True
    if stages and stages[0]["exit"] == 0 and (folder / "stage1" / "nep_best.txt").exists():
        out["stage1_best"] = scorer(folder / "stage1" / "nep_best.txt")
    return out


def at_cpu(curve: list[dict], seconds: float) -> dict | None:
    """The last curve point at or before ``seconds`` of training CPU time (None before the first)."""
    points = [p for p in curve if p["cpu_s"] <= seconds]
    return points[-1] if points else None


def summary(r: dict) -> dict:
    """Test RMSEs (F meV/Å, E meV/atom) at the reported CPU times and at the end, stage 1's best."""
    pick = lambda p: (
        None if p is None else {"f": round(p["f"], 1), "e": round(p["e"], 2), "cpu_s": round(p["cpu_s"], 1)}
    )
    final = r.get("final") or {}
    return {
        "dataset": r["dataset"],
        "fold": r.get("fold"),
        "recipe": r["recipe"],
        "train_cpu_s": round(r["train_cpu_s"], 1),
        "train_wall_s": None if r.get("train_wall_s") is None else round(r["train_wall_s"], 1),
        "at": {k: pick(v) for k, v in r["at"].items()},
        "end": {k: round(v, 2) for k, v in final.items() if isinstance(v, float)},
        "stage1_best": {k: round(v, 2) for k, v in (r.get("stage1_best") or {}).items() if v is not None},
        "stages": [(s["reason"], s["epoch"], round(s["cpu_s"], 1)) for s in r["stages"]],
    }


def markdown_table(results: list[dict]) -> str:
    """Test force (meV/Å) / energy (meV/atom) RMSE at each reported CPU time and at the end."""
    times = sorted({k for r in results for k in r["at"]}, key=float)
    head = "| dataset | recipe | " + " | ".join(f"F / E at {t} s" for t in times) + " | F / E at end (CPU s) |"
    rows = [head, "|" + "---|" * (3 + len(times))]
    cell = lambda p: "–" if p is None else f"{p['f']:.1f} / {p['e']:.2f}"
    for r in results:
        name = r["dataset"] + ("" if r.get("fold") is None else f" fold {r['fold']}")
        end = r.get("final") or {}
        last = f"{end['f']:.1f} / {end['e']:.2f} ({r['train_cpu_s']:.0f})" if "f" in end else "–"
        rows.append(f"| {name} | {r['recipe']} | " + " | ".join(cell(r["at"][t]) for t in times) + f" | {last} |")
    return "\n".join(rows)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({r["dataset"] for r in results})
    fig, axes = plt.subplots(2, len(names), figsize=(3.6 * len(names), 6.4), squeeze=False)
    for col, name in enumerate(names):
        runs = [r for r in results if r["dataset"] == name and r.get("fold") in (None, 0) and r["curve"]]
        right = max((r["curve"][-1]["cpu_s"] for r in runs), default=0.0)
        for r in runs:
            xs = [p["cpu_s"] for p in r["curve"]]
            for row, q in enumerate(("f", "e")):
                (line,) = axes[row][col].plot(xs, [p[q] for p in r["curve"]], label=r["recipe"])
                # a run that finished early is the model its user holds from then on: dotted to the right edge
                axes[row][col].plot([xs[-1], right], [r["curve"][-1][q]] * 2, ":", color=line.get_color())
        for row, label in enumerate(("test force RMSE (meV/Å)", "test energy RMSE (meV/atom)")):
            ax = axes[row][col]
            for seconds in (60, 300):  # the issue's two comparison times
                ax.axvline(seconds, color="0.6", lw=0.6)
            ax.set_yscale("log")
            ax.set_xlabel("training CPU seconds")
            ax.set_ylabel(label)
            ax.set_title(name if name != "PbTe" else "PbTe (fold 0)")
            ax.grid(alpha=0.3)
        axes[0][col].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--recipes", nargs="+", default=["old", "new"], choices=list(RECIPES))
    parser.add_argument(
        "--work", type=Path, default=Path("/tmp/nepcore_bench_accuracy"), help="scratch folder (outside the repository)"
    )
    parser.add_argument("--budget", type=float, default=600.0, help="CPU seconds per training command")
    parser.add_argument("--at", type=float, nargs="+", default=[60.0, 300.0], help="CPU seconds to report")
    parser.add_argument("--folds", type=int, default=5, help="PbTe folds run (of 5)")
    parser.add_argument("--fold", type=int, nargs="+", help="run only these PbTe folds (0-4)")
    parser.add_argument("--threads", type=int, default=1, help="OMP/torch threads of each command")
    parser.add_argument("--out", type=Path, help="JSON file to write (also printed)")
    parser.add_argument("--plot", type=Path, help="PNG of test error against CPU seconds")
    parser.add_argument(
        "--combine", type=Path, nargs="+", help="merge earlier --out JSON files (no training) into --out and --plot"
    )
    args = parser.parse_args()
    if args.combine:
        merged = [r for path in args.combine for r in json.loads(path.read_text())["results"]]
        text = json.dumps({"combined": [str(p) for p in args.combine], "results": merged}, indent=1)
        if args.out:
            args.out.write_text(text + "\n")
        if args.plot:
            plot(merged, args.plot)
        print(json.dumps([summary(r) for r in merged], indent=1))
        print(markdown_table(merged))
        return
    os.environ.update(OMP_NUM_THREADS=str(args.threads), PYTHONPATH=str(REPO))
    results = []
    for name in args.datasets:
        if name != "demo" and not DATASETS[name]["file"].exists():
            print(f"skipping {name}: {DATASETS[name]['file']} is absent", file=sys.stderr)
            continue
        for fold in (args.fold or range(args.folds)) if name == "PbTe" else [None]:
            h5 = prepare(name, args.work, fold, 5)
            for recipe in args.recipes:
                tag = name if fold is None else f"{name}_fold{fold}"
                t0, load0 = time.time(), os.getloadavg()[0]
                r = run_recipe(name, recipe, h5, args.work / tag / recipe, args.budget, args.threads)
                r.update(
                    dataset=name, fold=fold, wall_s=time.time() - t0, load_start=load0, load_end=os.getloadavg()[0]
                )
                r["at"] = {str(int(s)): at_cpu(r["curve"], s) for s in args.at}
                results.append(r)
                print(
                    json.dumps(
                        {
                            k: r.get(k)
                            for k in (
                                "dataset",
                                "fold",
                                "recipe",
                                "train_cpu_s",
                                "train_wall_s",
                                "final",
                                "at",
                                "stage1_best",
                                "stages",
                            )
                        }
                    ),
                    file=sys.stderr,
                )
    text = json.dumps({"threads": args.threads, "budget_cpu_s": args.budget, "results": results}, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    if args.plot:
        plot(results, args.plot)
    print(text)


if __name__ == "__main__":
    main()
