"""What a training stage writes: nep.txt / nep_best.txt, loss.out, status.json, the log line.

Every file goes through a temporary ``.<name>.*`` file in the same folder and ``os.replace``,
so a killed run leaves whole files (and at most a stale temporary, removed by the next run).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from nepcore._utils import atomic_write_text
from nepcore.errors import NepcoreError, writing
from nepcore.io.nep_txt import write_nep
from nepcore.spec import ModelSpec

#: The lock file a running stage holds in its folder (never removed: removing it would let a
#: third run lock a new file while the second still holds the old one).
LOCK_NAME = "train.lock"


class FolderLockedError(NepcoreError, OSError):
    """Another process is training into the same folder."""


@contextlib.contextmanager
def stage_lock(out_dir: Path, take: bool = True) -> Iterator[None]:
    """Hold an exclusive ``fcntl.flock`` on ``out_dir/train.lock`` for the block.

    A second stage into the same folder (a duplicate command, or a rerun while the child of a
    SIGKILLed snakemake still trains) fails at once with FolderLockedError instead of both
    writing the same files. The kernel drops the lock when the holder exits, however it ends.
    take: False for the non-main processes of a torchrun job (rank 0 holds it for all).
    """
    if not take:
        yield
        return
    path = out_dir / LOCK_NAME
    with writing(path):  # a read-only folder: "cannot write .../train.lock: permission denied"
        fh = open(path, "a")  # closed by the with below
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderLockedError(
                f"{out_dir}: another nepcore train is running in this folder (it holds {path}); "
                "wait for it to end, stop it, or use another --out-dir"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def write_outputs(
    out_dir: Path,
    spec: ModelSpec,
    last: dict[str, torch.Tensor],
    best: dict[str, torch.Tensor],
    max_neighbors: tuple[int, int],
    history: list[dict[str, float]],
    status: dict,
) -> None:
    """nep.txt (``last`` parameters), nep_best.txt, loss.out and status.json, each atomically.

    max_neighbors: (radial, angular) counts of the data, written in the nep.txt headers.
    """
    header_spec = spec.replace(max_neighbors_radial=int(max_neighbors[0]), max_neighbors_angular=int(max_neighbors[1]))
    as_numpy = lambda params: {k: v.detach().cpu().double().numpy() for k, v in params.items()}
    write_nep(out_dir / "nep.txt", header_spec, as_numpy(last))
    write_nep(out_dir / "nep_best.txt", header_spec, as_numpy(best))
    atomic_write_text(out_dir / "loss.out", format_loss_out(history))
    atomic_write_text(out_dir / "status.json", json.dumps(status, indent=1) + "\n")


def format_loss_out(history: Iterable[dict[str, float]]) -> str:
    """GPUMD's loss.out layout (``%-8d`` then nine numbers) with a ``#`` header line."""
    lines = [
        "# epoch L_total L1 L2 E_train F_train V_train E_test F_test V_test"
        "  (RMSE: eV/atom, eV/A, eV/atom; test = validation split; 0 = no such label, as GPUMD)"
    ]
    for h in history:
        values = [
            h["train_loss"],
            h["l1"],
            h["l2"],
            h["train_rmse_e"],
            h["train_rmse_f"],
            h["train_rmse_v"],
            h.get("valid_rmse_e"),
            h.get("valid_rmse_f"),
            h.get("valid_rmse_v"),
        ]
        lines.append(f"{int(h['epoch']):<8d}" + " ".join(f"{v or 0.0:<13.6e}" for v in values))
    return "\n".join(lines) + "\n"


def log_line(stage: int, m: dict[str, float], epochs: int) -> str:
    def value(key: str, digits: int, unit: str) -> str:
        # a label absent from the data reads "n/a", never 0 (which would look like a perfect fit)
        return "n/a" if m[key] is None else f"{1e3 * m[key]:.{digits}f} {unit}"

    def rm(prefix: str) -> str:
        return (
            f"E {value(prefix + '_rmse_e', 2, 'meV/atom')}  F {value(prefix + '_rmse_f', 1, 'meV/Å')}  "
            f"V {value(prefix + '_rmse_v', 2, 'meV/atom')}"
        )

    line = f"stage {stage} epoch {int(m['epoch'])}/{epochs}  loss {m['train_loss']:.4e}  train {rm('train')}"
    if "valid_loss" in m:
        line += f"  | valid loss {m['valid_loss']:.4e} {rm('valid')}"
    return line + f"  | lr {m['lr']:.2e}  {m['seconds']:.1f} s"


def set_aside_line(stage: int, aside: dict, tolerance: float, best_epoch: int) -> str:
    """The log line saying which epochs the bound on forces kept from being the best model
    (``aside``: :func:`nepcore.training.schedule.set_aside`)."""
    low = aside["lowest"]

    def mev(key: str, digits: int) -> str:
        return "n/a" if low.get(key) is None else f"{1e3 * low[key]:.{digits}f}"

    return (
        f"stage {stage}: kept epoch {best_epoch}; {aside['epochs']} epoch(s) with a lower monitored "
        f"metric were set aside because their validation force RMSE was above {1e3 * aside['limit']:.1f} "
        f"meV/Å, {100 * tolerance:g} % over the starting model's (max_force_rise); the lowest, epoch "
        f"{int(low['epoch'])}: force {mev('valid_rmse_f', 1)} meV/Å, energy {mev('valid_rmse_e', 2)} meV/atom"
    )


#: Files a stage writes (each through a temporary ".<name>.*" file in the same folder).
OUTPUTS: tuple[str, ...] = ("checkpoint.pt", "resume.pt", "nep.txt", "nep_best.txt", "loss.out", "status.json")


def remove_stale_temporaries(out_dir: Path) -> None:
    """Temporary files a killed run left behind (the outputs themselves are always whole)."""
    for name in OUTPUTS:
        for tmp in out_dir.glob(f".{name}.*"):
            tmp.unlink(missing_ok=True)


def write_snapshot(
    out_dir: Path,
    spec: ModelSpec,
    params: dict[str, torch.Tensor],
    max_neighbors: tuple[int, int],
    epoch: int,
    cpu_s: float,
) -> None:
    """snapshots/epoch<N>.txt: a model of the stage at epoch N (the best-so-far one, or with
    ``snapshot_models: epoch`` the one that epoch validated), with the process CPU seconds in an
    index (snapshots/index.tsv: epoch, CPU s, file)."""
    folder = out_dir / "snapshots"
    folder.mkdir(exist_ok=True)
    header = spec.replace(max_neighbors_radial=int(max_neighbors[0]), max_neighbors_angular=int(max_neighbors[1]))
    arrays = {k: v.detach().cpu().double().numpy() for k, v in params.items()}
    write_nep(folder / f"epoch{epoch:06d}.txt", header, arrays)
    with open(folder / "index.tsv", "a") as fh:
        fh.write(f"{epoch}\t{cpu_s:.3f}\tepoch{epoch:06d}.txt\n")
