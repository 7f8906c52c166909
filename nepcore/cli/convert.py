"""``nepcore convert``: raw structures (anything ase.io reads) -> validated HDF5 dataset.

Argument parsing only; the work is :func:`nepcore.data.convert.convert`.
"""

from __future__ import annotations

import argparse
import logging
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="structure files or globs (extxyz, OUTCAR, vasprun.xml, .traj, .db, ...)",
    )
    parser.add_argument("-o", "--output", required=True, help="the HDF5 dataset to write (structures.h5)")
    parser.add_argument(
        "--types",
        nargs="+",
        metavar="SYMBOL",
        help="allowed species, in type order (default: all found, by atomic number)",
    )
    parser.add_argument("--energy-key", default="energy", help="total energy key, eV (default: energy)")
    parser.add_argument(
        "--forces-key", default=None, help="per-atom force key, eV/Å (default: forces, then GPUMD's force)"
    )
    parser.add_argument("--virial-key", default="virial", help="9-value total virial key, eV (default: virial)")
    parser.add_argument(
        "--stress-key",
        default="stress",
        help="stress key, eV/Å^3, ASE sign; virial = -stress * volume (default: stress)",
    )
    parser.add_argument("--weights-key", default="weight", help="per-frame weight key (default: weight)")
    parser.add_argument(
        "--split",
        nargs=3,
        type=float,
        metavar=("TRAIN", "VALID", "TEST"),
        help="random frame split fractions (default: 0.8 0.1 0.1)",
    )
    parser.add_argument(
        "--valid",
        nargs="+",
        default=[],
        metavar="FILE",
        help="files whose frames form the validation split (INPUTS are then training)",
    )
    parser.add_argument(
        "--test",
        nargs="+",
        default=[],
        metavar="FILE",
        help="files whose frames form the test split (INPUTS are then training)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random split (default: 0)")
    parser.add_argument(
        "--cutoff",
        type=float,
        default=6.0,
        help="warn about atoms with no neighbour within this radius, Å; 0 = off (default: 6)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.epilog = "Frames in messages are counted from 0, as ase.io.read(path, index=k) does."


class _StderrHandler(logging.Handler):
    """Writes records to whatever ``sys.stderr`` is at the time (robust to redirection)."""

    def emit(self, record: logging.LogRecord) -> None:
        print(self.format(record), file=sys.stderr)


def _log_to_stderr() -> None:
    """Notes and warnings of the conversion go to stderr (the summary goes to stdout)."""
    logger = logging.getLogger("nepcore.convert")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_StderrHandler())
    logger.setLevel(logging.INFO)


def run(args: argparse.Namespace) -> int:
    from nepcore.data.convert import convert
    from nepcore.data.reading import LabelKeys
    from nepcore.errors import SettingError

    _log_to_stderr()
    if args.split is not None and (args.valid or args.test):
        raise SettingError("--split cannot be combined with --valid/--test")
    keys = LabelKeys(
        energy=args.energy_key,
        forces=args.forces_key,
        virial=args.virial_key,
        stress=args.stress_key,
        weight=args.weights_key,
    )
    summary = convert(
        args.inputs,
        args.output,
        types=args.types,
        keys=keys,
        fractions=args.split or (0.8, 0.1, 0.1),
        valid_files=args.valid,
        test_files=args.test,
        seed=args.seed,
        cutoff=args.cutoff,
        progress=False if args.no_progress else None,
    )
    print("\n".join(summary.lines()))
    return 0
