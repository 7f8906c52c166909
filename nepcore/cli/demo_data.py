"""``nepcore demo-data``: write the built-in labelled Cu-Pd-Ni demo dataset (ASE EMT) as extxyz."""

from __future__ import annotations

import argparse

from nepcore.cli import positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``nepcore demo-data``."""
    parser.add_argument("-o", "--output", required=True, help="extxyz file to write")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--n-frames", type=positive_int, default=60, help="number of frames to generate (default 60)")


def run(args: argparse.Namespace) -> int:
    """Generate the frames and write them; 0 on success."""
    from nepcore.data.demo import write_demo_dataset

    n = write_demo_dataset(args.output, seed=args.seed, n_frames=args.n_frames)
    print(f"wrote {n} demo frames (Cu-Pd-Ni, EMT, seed {args.seed}) to {args.output}")
    return 0
