"""``nepcore evaluate``: metrics.json, GPUMD-format *_test.out files, parity and loss plots
(and the committee's force disagreement with ``--committee``) of a trained model."""

from __future__ import annotations

import argparse
import sys

from nepcore.cli import add_inference_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``nepcore evaluate`` (docs/CLI.md)."""
    from nepcore.data.structures_h5 import SPLIT_NAMES

    parser.add_argument("--model", required=True, help="GPUMD nep.txt of the model to evaluate")
    parser.add_argument("--data", required=True, help="HDF5 dataset written by nepcore convert")
    parser.add_argument("--out-dir", required=True, help="directory for metrics.json, *_test.out and the plots")
    parser.add_argument(
        "--split",
        choices=SPLIT_NAMES,
        default="test",
        help="split written to the *_test.out files and the committee table (default test); metrics cover every split",
    )
    parser.add_argument(
        "--loss",
        nargs="*",
        default=[],
        metavar="LOSS_OUT",
        help="loss.out of each training stage, in order, for loss.png",
    )
    parser.add_argument(
        "--committee",
        nargs="*",
        default=[],
        metavar="NEP_TXT",
        help="two or more nep.txt (same types and cutoffs): per-structure force disagreement",
    )
    parser.add_argument(
        "--stage1-status",
        default=None,
        metavar="STATUS_JSON",
        help="stage 1's status.json: warn when the model's validation force RMSE is more than "
        "5 %% above stage 1's best",
    )
    add_inference_options(parser)


def run(args: argparse.Namespace) -> int:
    """Run the evaluation; 0 on success."""
    from nepcore.evaluation.metrics import evaluate

    metrics = evaluate(
        args.model,
        args.data,
        args.out_dir,
        split=args.split,
        loss_files=args.loss,
        committee=args.committee,
        batch_size=args.batch_size,
        precision=args.precision,
        device=args.device,
        compile=args.compile,
        stage1_status=args.stage1_status,
    )
    for warning in metrics["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    if metrics["summary"]["n_frames"] == 0:
        print(f"warning: the {args.split} split has no structures: its *_test.out files are empty", file=sys.stderr)
    print(summary_line(metrics))
    return 0


def summary_line(metrics: dict) -> str:
    """One human line: the evaluated split's RMSEs next to the force spread."""
    s = metrics["summary"]
    fmt = lambda value, scale, unit: "n/a" if value is None else f"{scale * value:.3f} {unit}"
    line = (
        f"{s['split']} ({s['n_frames']} structures): RMSE energy {fmt(s['energy_rmse'], 1e3, 'meV/atom')}, "
        f"force {fmt(s['force_rmse'], 1e3, 'meV/Å')} (force spread {fmt(s['force_spread'], 1e3, 'meV/Å')}), "
        f"virial {fmt(s['virial_rmse'], 1e3, 'meV/atom')}, stress {fmt(s['stress_rmse'], 1, 'GPa')}"
    )
    committee = metrics.get("committee")
    if committee and committee["max_force_deviation"]:
        line += f"; committee max force deviation: mean {committee['max_force_deviation']['mean']:.4f} eV/Å"
    return line
