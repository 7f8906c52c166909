"""``nepcore predict``: energies, forces, virials (and descriptors) of structures with a nep.txt,
written as GPUMD's energy_train.out, force_train.out, virial_train.out, stress_train.out."""

from __future__ import annotations

import argparse

from nepcore.cli import add_inference_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``nepcore predict`` (docs/CLI.md)."""
    parser.add_argument("--model", required=True, help="GPUMD nep.txt potential")
    parser.add_argument("structures", nargs="+", metavar="STRUCTURES", help="files ase.io can read (extxyz, ...)")
    parser.add_argument("-o", "--out-dir", required=True, help="directory for the *_train.out files")
    parser.add_argument(
        "--descriptors", action="store_true", help="also write descriptor.out (scaled descriptors, one row per atom)"
    )
    add_inference_options(parser)


def run(args: argparse.Namespace) -> int:
    """Run the prediction; 0 on success."""
    from nepcore.evaluation.predict import predict

    summary = predict(
        args.model,
        args.structures,
        args.out_dir,
        precision=args.precision,
        descriptors=args.descriptors,
        batch_size=args.batch_size,
        device=args.device,
        compile=args.compile,
    )
    names = ", ".join(p.name for p in summary.files)
    print(f"predicted {summary.n_frames} structures ({summary.n_atoms} atoms): wrote {names} to {args.out_dir}")
    return 0
