"""``nepcore qscaler``: descriptor min/max over the training split -> qscaler.json.

Argument parsing only; the work is :func:`nepcore.training.qscaler.compute_q_scaler`. The model
architecture comes from a GPUMD nep.in (``--nep-in``) or from the same keywords as flags,
which are turned into nep.in text and parsed by :mod:`nepcore.io.nep_in`, so both routes share
GPUMD's defaults and limits.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from nepcore.cli import positive_int
from nepcore.errors import SettingError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from nepcore.spec import ModelSpec

    d = ModelSpec(elements=("H",))  # the defaults: GPUMD's
    parser.add_argument("data", help="the HDF5 dataset made by nepcore convert (structures.h5)")
    parser.add_argument("-o", "--output", required=True, help="qscaler.json to write")
    parser.add_argument("--nep-in", help="GPUMD nep.in with the architecture (instead of the flags below)")
    model = parser.add_argument_group("architecture (GPUMD nep.in keywords; defaults as GPUMD's)")
    model.add_argument("--type", nargs="+", metavar="SYMBOL", help="element types in type order")
    model.add_argument(
        "--cutoff",
        nargs="+",
        metavar="RC",
        help=f"radial and angular cutoff, Å, or 2 per type (default {d.cutoff_radial[0]:g} {d.cutoff_angular[0]:g})",
    )
    model.add_argument(
        "--n-max",
        nargs=2,
        metavar=("NR", "NA"),
        help=f"n_max radial angular (default {d.n_max_radial} {d.n_max_angular})",
    )
    model.add_argument(
        "--basis-size",
        nargs=2,
        metavar=("KR", "KA"),
        help=f"basis_size radial angular (default {d.basis_size_radial} {d.basis_size_angular})",
    )
    model.add_argument("--l-max", nargs="+", metavar="L", help="l_max L [q222 [q1111 ...]] (default 4 2 0)")
    model.add_argument("--neuron", metavar="H", help=f"hidden-layer neurons (default {d.neurons})")
    model.add_argument("--zbl", metavar="R", help="ZBL outer cutoff, Å (off by default)")
    model.add_argument(
        "--use-typewise-cutoff-zbl",
        nargs="?",
        const="",
        metavar="FACTOR",
        help="typewise ZBL cutoffs (factor, default 0.7)",
    )
    parser.add_argument(
        "--mode",
        choices=("gpumd", "self-consistent"),
        default="gpumd",
        help="gpumd: all descriptor coefficients 1 (GPUMD's rule); self-consistent: the "
        "model's seeded initial coefficients (default: gpumd)",
    )
    parser.add_argument("--seed", type=int, default=0, help="initialisation seed of the self-consistent mode")
    parser.add_argument(
        "--batch-size", type=positive_int, default=32, help="frames per batch (memory only; default 32)"
    )
    parser.add_argument(
        "--split",
        default="train",
        choices=("train", "valid", "test", "all"),
        help="split to take the statistics over (default: train)",
    )
    parser.add_argument(
        "--floor", type=float, default=None, help="smallest descriptor range used as denominator (default 1e-8)"
    )


#: Architecture flags; each argparse attribute is also the nep.in keyword.
_FLAG_KEYS = ("type", "cutoff", "n_max", "basis_size", "l_max", "neuron", "zbl", "use_typewise_cutoff_zbl")


def nep_in_text(args: argparse.Namespace) -> tuple[str, dict[int, str]]:
    """nep.in text equivalent to the architecture flags (``--type`` is required), and the flag
    behind each line (1-based), so a bad value is reported as "--n-max ..." and not as a line
    of a file the user never wrote. In the workflow these flags are the run's ``model`` keys."""
    if not args.type:
        raise SettingError("give --nep-in or at least --type (and --cutoff ...)")
    lines = [f"type {len(args.type)} {' '.join(args.type)}"]
    names = {1: _flag_name("type", args.type)}
    for key in _FLAG_KEYS[1:]:
        value = getattr(args, key)
        if value is None:
            continue
        values = value if isinstance(value, list) else [value]
        lines.append(" ".join([key, *[str(v) for v in values if v != ""]]))
        names[len(lines)] = _flag_name(key, values)
    return "\n".join(lines) + "\n", names


def _flag_name(key: str, values: list) -> str:
    """``--n-max 4 x (model.n_max in a workflow config)``: the flag as given, and its config key."""
    given = " ".join(str(v) for v in values if v != "")
    return f"--{key.replace('_', '-')} {given}".rstrip() + f" (model.{key} in a workflow config)"


def run(args: argparse.Namespace) -> int:
    import torch

    from nepcore.data.store import StreamDataStore
    from nepcore.io.nep_in import parse_nep_in, spec_from_nep_in
    from nepcore.training.qscaler import DEFAULT_FLOOR, compute_q_scaler, write_qscaler

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    given = [f"--{a.replace('_', '-')}" for a in _FLAG_KEYS if getattr(args, a) is not None]
    if args.nep_in and given:
        raise SettingError(f"--nep-in cannot be combined with {' '.join(given)}")
    if args.nep_in:
        parsed = parse_nep_in(Path(args.nep_in))
    else:
        text, line_names = nep_in_text(args)
        parsed = parse_nep_in(text, source="the architecture flags", line_names=line_names)
    for line, key in parsed.unknown:
        logging.warning(
            "warning: %s, line %d: %r is not an architecture keyword; ignored here", parsed.source, line, key
        )
    spec = spec_from_nep_in(parsed)
    store = StreamDataStore.from_hdf5(args.data, spec, split=args.split, dtype=torch.float64, progress=None)
    r, a = store.max_neighbors()
    spec = spec.replace(max_neighbors_radial=r, max_neighbors_angular=a)
    stats = compute_q_scaler(
        spec,
        store.batches(args.batch_size),
        mode=args.mode,
        seed=args.seed,
        floor=DEFAULT_FLOOR if args.floor is None else args.floor,
        zbl_table=parsed.zbl_table,
    )
    write_qscaler(args.output, stats)
    print(
        f"q_scaler over {stats.n_frames} frames, {stats.n_atoms} atoms ({args.mode}): "
        f"{len(stats.q_scaler)} components, range {stats.q_scaler.min():.4g} .. {stats.q_scaler.max():.4g} "
        f"-> {args.output}"
    )
    return 0
