"""``nepcore train --stage 1|2``: one training stage of a NEP model.

Argument parsing only; the work is :func:`nepcore.training.stage.train_stage`. Loss weights and the
learning rate default per stage (stage 1: λe 0.01, λf 1, λv 0.01, lr 1e-2; stage 2: λe 1,
λf 0.05, λv 0.1, lr 1e-3).
"""

from __future__ import annotations

import argparse
import logging
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--stage", type=int, choices=(1, 2), required=True, help="1 (force-focused) or 2 (energy-focused)")
    a("--data", required=True, help="the HDF5 dataset (structures.h5); its train and valid splits are used")
    a("--qscaler", required=True, help="qscaler.json from nepcore qscaler (fixes the architecture)")
    a("--out-dir", required=True, help="folder for checkpoint.pt, nep.txt, nep_best.txt, loss.out, status.json")
    start = parser.add_argument_group("starting point")
    start.add_argument("--init", help="stage-1 checkpoint.pt that stage 2 continues from")
    start.add_argument("--init-weights", choices=("best", "last"), default="best",
                       help="which weights of --init to start from (default: best)")
    start.add_argument("--finetune-from", help="nep.txt or checkpoint.pt to fine-tune (may have more elements)")
    start.add_argument("--finetune-qscaler", choices=("keep", "recompute"), default="keep",
                       help="keep the fine-tuned model's q_scaler or take qscaler.json's (default: keep)")
    start.add_argument("--resume", help="checkpoint to resume (default: OUT_DIR/checkpoint.pt when it exists)")
    opt = parser.add_argument_group("optimisation")
    opt.add_argument("--epochs", type=int, default=100, help="maximum epochs (default 100)")
    opt.add_argument("--patience", type=int, default=10, help="early stop after this many epochs without "
                     "improvement of the monitored loss (default 10)")
    opt.add_argument("--batch-size", type=int, default=32, help="frames per minibatch (default 32)")
    opt.add_argument("--lr", type=float, default=None, help="Adam learning rate (stage default)")
    opt.add_argument("--lr-min", type=float, default=1e-5, help="learning-rate floor (default 1e-5)")
    opt.add_argument("--schedule", choices=("plateau", "step"), default="plateau", help="default plateau")
    opt.add_argument("--lr-decay", type=float, default=0.5, help="learning-rate factor per decay (default 0.5)")
    opt.add_argument("--lr-patience", type=int, default=3,
                     help="plateau: epochs without improvement before a decay (default 3)")
    opt.add_argument("--lr-step", type=int, default=10, help="step: epochs between decays (default 10)")
    opt.add_argument("--amsgrad", action="store_true", help="AMSGrad variant of Adam")
    opt.add_argument("--clip", type=float, default=10.0, help="gradient-norm clipping, 0 = off (default 10)")
    loss = parser.add_argument_group("loss (GPUMD's names)")
    loss.add_argument("--lambda-e", type=float, default=None, help="energy weight (stage default)")
    loss.add_argument("--lambda-f", type=float, default=None, help="force weight (stage default)")
    loss.add_argument("--lambda-v", type=float, default=None, help="virial weight (stage default)")
    loss.add_argument("--lambda-1", type=float, default=0.0, help="L1 regularisation, GPUMD's form (default 0)")
    loss.add_argument("--lambda-2", type=float, default=0.0, help="L2 regularisation, GPUMD's form (default 0)")
    loss.add_argument("--loss-form", choices=("mse", "rmse"), default="mse",
                      help="sum of weighted MSEs, or of RMSEs as GPUMD's fitness (default mse)")
    run_ = parser.add_argument_group("run")
    run_.add_argument("--checkpoint-every", type=int, default=5, help="epochs between checkpoints (default 5)")
    run_.add_argument("--seed", type=int, default=0, help="seed of initialisation and shuffling (default 0)")
    run_.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="default auto")
    run_.add_argument("--precision", choices=("float32", "float64"), default="float32", help="default float32")
    run_.add_argument("--force-path", choices=("analytical", "autograd"), default="analytical",
                      help="closed-form or autograd forces (same values; default analytical)")
    run_.add_argument("--no-progress", action="store_true", help="no progress bar even on a terminal")


def run(args: argparse.Namespace) -> int:
    from nepcore.training.checkpoint import CheckpointError
    from nepcore.training.distributed import setup
    from nepcore.training.start import StartModelError
    from nepcore.data.structures_h5 import DatasetFileError
    from nepcore.training.qscaler import QScalerError, read_qscaler
    from nepcore.training.stage import TrainConfig, TrainingError, open_data, train_stage

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    cfg = TrainConfig(
        stage=args.stage, epochs=args.epochs, patience=args.patience, batch_size=args.batch_size, lr=args.lr,
        lr_min=args.lr_min, schedule=args.schedule, lr_decay=args.lr_decay, lr_patience=args.lr_patience,
        lr_step=args.lr_step, lambda_e=args.lambda_e, lambda_f=args.lambda_f, lambda_v=args.lambda_v,
        lambda_1=args.lambda_1, lambda_2=args.lambda_2, loss_form=args.loss_form, amsgrad=args.amsgrad,
        clip=args.clip, checkpoint_every=args.checkpoint_every, seed=args.seed, device=args.device,
        precision=args.precision, force_path=args.force_path, init_weights=args.init_weights,
        finetune_qscaler=args.finetune_qscaler, progress=False if args.no_progress else None,
    )  # fmt: skip
    distributed = setup(args.device)  # joins the process group when launched by torchrun
    try:
        cfg = cfg.resolved()
        stats = read_qscaler(args.qscaler)
        data = open_data(args.data, stats.spec, cfg.dtype)
        status = train_stage(cfg, data, stats, args.out_dir, init=args.init, finetune=args.finetune_from,
                             resume=args.resume, distributed=distributed)
    except (TrainingError, CheckpointError, StartModelError, QScalerError, DatasetFileError, ValueError,
            OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        distributed.close()
    if not distributed.is_main:
        return 0
    best = status.get("best") or {}
    print(f"stage {status['stage']}: {status['reason']} after epoch {status['epoch']}; best epoch "
          f"{status['best_epoch']} (monitored {status['monitor']} loss {best.get('monitored', float('nan')):.4e})")
    return 0
