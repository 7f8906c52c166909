"""The ``nepcore`` command line: ``nepcore <command> [options]``.

Each command lives in its own module ``nepcore.cli.<name>`` that defines
``add_arguments(parser)`` and ``run(args) -> int``; this file only dispatches, importing a
command's module (and so torch) only when that command runs, so ``nepcore --help`` is fast.

Exit status: 0 on success; 1 for a :class:`~nepcore.errors.NepcoreError` (bad input data, a
stale checkpoint, a diverged run: one ``error: ...`` line on stderr); 2 for a usage error
(argparse's own checks, and :class:`~nepcore.errors.SettingError`: usage line and message).
Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from nepcore._version import __version__
from nepcore.errors import NepcoreError, SettingError

#: command name -> (module under nepcore.cli, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "convert": ("convert", "raw structures (anything ase.io reads) -> validated HDF5 dataset"),
    "export-xyz": ("export_xyz", "one split of an HDF5 dataset -> GPUMD train.xyz/test.xyz"),
    "qscaler": ("qscaler", "descriptor min/max over the training split -> qscaler.json"),
    "train": ("train", "train one stage (1 or 2) of a NEP model"),
    "evaluate": ("evaluate", "metrics, GPUMD *_test.out files and plots of a trained model"),
    "export": ("export", "copy the chosen model to its final place and check that it loads"),
    "predict": ("predict", "predict energies/forces/virials with a nep.txt, GPUMD-format output"),
    "demo-data": ("demo_data", "generate the built-in labelled demo dataset (ASE EMT)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nepcore", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"nepcore {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_module, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv or argv[0] not in COMMANDS:
        parser.parse_args(argv or ["--help"])
        return 2
    name = argv[0]
    # Before torch is imported: idle OpenMP threads sleep instead of spinning, which made
    # small 2-thread calls ~40x slower on a loaded 2-core machine. A user's setting wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    module = importlib.import_module(f"nepcore.cli.{COMMANDS[name][0]}")
    sub = argparse.ArgumentParser(prog=f"nepcore {name}", description=COMMANDS[name][1])
    module.add_arguments(sub)
    args = sub.parse_args(argv[1:])
    try:
        return int(module.run(args) or 0)
    except SettingError as err:
        sub.error(str(err))  # usage and message on stderr, exit status 2
    except NepcoreError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


def add_inference_options(parser: argparse.ArgumentParser) -> None:
    """Declare the options that ``nepcore evaluate`` and ``nepcore predict`` share: --batch-size,
    --precision, --device and --compile (docs/CLI.md)."""
    from nepcore.evaluation.predict import DEFAULT_BATCH_SIZE

    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=DEFAULT_BATCH_SIZE,
        help=f"structures per evaluation (default {DEFAULT_BATCH_SIZE})",
    )
    parser.add_argument(
        "--precision",
        choices=("float64", "float32"),
        default="float64",
        help="floating-point precision of the evaluation (default float64)",
    )
    parser.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="where to evaluate (default auto: CUDA when available)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="evaluate through the inductor-compiled model (pays off for many structures)",
    )


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _int_at_least(text, 0)


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, found {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be >= {low}, found {value}")
    return value


if __name__ == "__main__":
    sys.exit(main())
