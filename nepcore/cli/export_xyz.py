"""``nepcore export-xyz``: one split of an HDF5 dataset -> GPUMD-ready train.xyz/test.xyz."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", help="HDF5 dataset written by nepcore convert")
    parser.add_argument(
        "--split",
        default="train",
        choices=("train", "valid", "test", "all"),
        help="which frames to write (default: train)",
    )
    parser.add_argument("-o", "--output", required=True, help="extxyz file to write (train.xyz)")


def run(args: argparse.Namespace) -> int:
    from nepcore.data.gpumd_xyz import write_gpumd_xyz
    from nepcore.data.structures_h5 import StructureFile

    with StructureFile(args.dataset) as h5:
        frames = h5.read_frames(h5.split(args.split))
    counts = write_gpumd_xyz(args.output, frames)
    print(f"wrote {args.output}: {counts.frames} frames, {counts.atoms} atoms ({args.split} split)")
    for label, n in (("energy", counts.without_energy), ("forces", counts.without_forces)):
        if n:
            print(f"warning: {n} frame(s) have no {label}; GPUMD needs it to train", file=sys.stderr)
    return 0
