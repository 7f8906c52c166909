"""Training checkpoints: atomic writing, loading, and the "does this checkpoint fit?" check.

A checkpoint (``checkpoint.pt``, ``torch.save`` of plain containers and tensors, so it loads
with ``weights_only=True``) holds everything a stage needs to continue bit for bit:

==================  ==========================================================================
key                 content
==================  ==========================================================================
``format``          "nepcore-checkpoint", ``version`` 1
``spec``            ModelSpec.architecture_dict() of the model
``config``          the settings that determine the trajectory (TrainConfig.trajectory() in
                    nepcore.training.stage), the frame counts and ``data_sha256`` (content
                    hashes of the training and validation splits: positions, labels, weights);
                    a resume refuses a checkpoint whose config differs
``model``           last parameters {name: float64 tensor} (W0 ... c_angular, q_scaler[, zbl_table])
``best_model``      parameters at the best monitored loss
``optimizer``       Adam state_dict
``schedule``        learning-rate schedule state; ``early_stop``: early-stop state
``epoch``           completed epochs; ``finished``: the stage has ended; ``reason``
``history``         one dict of metrics per completed epoch (loss.out is rewritten from it)
``rng``             torch (CPU and CUDA), numpy and Python random states
``max_neighbors``   (radial, angular) neighbour counts of the training data (nep.txt header)
``init``            where the stage started (for status.json)
==================  ==========================================================================

Files are written to a temporary name in the same directory and renamed with ``os.replace``,
so a crash leaves either the previous checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import io
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nepcore._utils import atomic_open
from nepcore.errors import NepcoreError

FORMAT_NAME = "nepcore-checkpoint"
FORMAT_VERSION = 1


class CheckpointError(NepcoreError, ValueError):
    """A checkpoint that cannot be read or does not fit the requested run."""


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> Path:
    """Write ``state`` (plus format tags) to ``path`` atomically.

    The state is serialised in memory first (a NEP checkpoint is small) and then written with
    plain file writes: torch.save straight to a file reports a full disk only as
    "unexpected pos ...", a plain write as ENOSPC, which becomes an
    :class:`~nepcore.errors.OutputError` ("cannot write <path>: disk full ..."). A failed
    write removes its temporary file and leaves the previous checkpoint in place.
    """
    path = Path(path)
    payload = {"format": FORMAT_NAME, "version": FORMAT_VERSION, **state}
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    with atomic_open(path, "wb") as fh:
        fh.write(buffer.getbuffer())
    return path


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` (tensors on the CPU)."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint") from None
    except Exception as err:
        raise CheckpointError(f"{path}: cannot read as a nepcore checkpoint ({err})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT_NAME:
        raise CheckpointError(f"{path}: not a nepcore checkpoint (no format={FORMAT_NAME!r})")
    if state.get("version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: checkpoint version {state.get('version')}, this nepcore reads {FORMAT_VERSION}")
    if isinstance(state.get("config"), dict):
        # checkpoints written before the optimizer setting existed were all trained with Adam
        state["config"].setdefault("optimizer", "adam")
        # ... and those written before init_bias_std existed started with biases of spread 0.1
        state["config"].setdefault("init_bias_std", 0.1)
        # ... and those written before adam_beta2 existed ran torch's default
        state["config"].setdefault("adam_beta2", 0.999)
        # ... and those written before adam_momentum existed ran plain Adam
        state["config"].setdefault("adam_momentum", "plain")
    return state


def differences(saved: dict[str, Any], current: dict[str, Any], ignore: tuple[str, ...] = ()) -> list[str]:
    """Human-readable differences between two flat-ish settings dicts ("key: a (checkpoint) vs b")."""
    out = []
    for key in sorted(set(saved) | set(current)):
        if key in ignore:
            continue
        a, b = saved.get(key, "<absent>"), current.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{key}.{d}" for d in differences(a, b, ignore)]
        elif _normalise(a) != _normalise(b):
            out.append(f"{key}: {a!r} in the checkpoint, {b!r} now")
    return out


def _normalise(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_normalise(v) for v in value]
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value


#: The config key holding the content hashes of the training and validation data.
DATA_KEY = "data_sha256"


def mismatches(state: dict[str, Any], spec: dict, config: dict, epochs: int | None = None) -> list[str]:
    """What differs between checkpoint ``state`` and this run: its architecture ``spec``, its
    trajectory-defining ``config`` (including the data hashes under DATA_KEY) and, with
    ``epochs``, a checkpoint that has already run more epochs than this run allows."""
    problems = [f"architecture {d}" for d in differences(state["spec"], spec)]
    problems += [f"setting {d}" for d in differences(state["config"], config, ignore=(DATA_KEY,))]
    if _normalise(state["config"].get(DATA_KEY)) != _normalise(config.get(DATA_KEY)):
        problems.append(
            "the training or validation data changed (their content hash of positions, labels "
            "and weights differs from the checkpoint's)"
        )
    if epochs is not None and int(state["epoch"]) > epochs:
        problems.append(f"it has run {int(state['epoch'])} epochs, more than epochs={epochs}")
    return problems


def mismatch_error(path: str | os.PathLike, problems: list[str]) -> CheckpointError:
    """The one-line refusal of a checkpoint that does not fit (see :func:`mismatches`)."""
    return CheckpointError(
        f"{path}: the checkpoint does not match this run ({'; '.join(problems)}); use another --out-dir, "
        "delete the checkpoint, run with the checkpoint's settings, or pass --restart-on-mismatch"
    )


def check_compatible(
    path: str | os.PathLike, state: dict[str, Any], spec: dict, config: dict, epochs: int | None = None
) -> None:
    """Raise CheckpointError saying what differs when ``state`` does not fit this run
    (see :func:`mismatches`)."""
    problems = mismatches(state, spec, config, epochs)
    if problems:
        raise mismatch_error(path, problems)


# ---- random number generator states --------------------------------------------------------


def rng_state() -> dict[str, Any]:
    """torch (CPU, CUDA), numpy global and Python random states, as weights_only-safe values."""
    np_state = np.random.get_state(legacy=False)
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": torch.from_numpy(np.asarray(np_state["state"]["key"]).astype(np.int64)),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "python": _to_lists(random.getstate()),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` saved."""
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])
    n = state["numpy"]
    np.random.set_state({
        "bit_generator": n["bit_generator"],
        "state": {"key": n["key"].numpy().astype(np.uint32), "pos": n["pos"]},
        "has_gauss": n["has_gauss"],
        "gauss": n["gauss"],
    })  # fmt: skip
    random.setstate(_to_tuples(state["python"]))


def _to_lists(value: Any) -> Any:
    return [_to_lists(v) for v in value] if isinstance(value, (tuple, list)) else value


def _to_tuples(value: Any) -> Any:
    return tuple(_to_tuples(v) for v in value) if isinstance(value, (tuple, list)) else value
