"""``nepcore export``: copy the chosen nep.txt to its final place after checking that it re-reads
and (when calorine is installed) that calorine reproduces nepcore's predictions."""

from __future__ import annotations

import argparse

from nepcore.cli import non_negative_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``nepcore export`` (docs/CLI.md)."""
    from nepcore.evaluation.export import DEFAULT_CHECK_FRAMES

    parser.add_argument("--model", required=True, help="nep.txt to export (e.g. stage2/nep_best.txt)")
    parser.add_argument("--data", required=True, help="HDF5 dataset (nepcore convert) giving the check frames")
    parser.add_argument("-o", "--output", required=True, help="destination nep.txt")
    parser.add_argument(
        "--check-frames",
        type=non_negative_int,
        default=DEFAULT_CHECK_FRAMES,
        help=f"frames compared with calorine (default {DEFAULT_CHECK_FRAMES}; 0 skips the check)",
    )


def run(args: argparse.Namespace) -> int:
    """Export; 0 on success (a failed check raises ExportError: exit status 1)."""
    from nepcore.evaluation.export import export_model

    report = export_model(args.model, args.data, args.output, n_frames=args.check_frames)
    print(f"exported {args.model} -> {report.output} (sha256 {report.sha256[:12]}), re-read with nepcore's reader")
    if report.skipped:
        print(f"note: calorine check skipped: {report.skipped}")
    else:
        print(
            f"calorine {report.calorine_version} reproduces nepcore on frames {report.checked_frames}: "
            f"max |dE| {report.max_energy_deviation:.2e} eV/atom, max |dF| {report.max_force_deviation:.2e} eV/Å"
        )
    return 0
