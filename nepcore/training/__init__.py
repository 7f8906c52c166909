"""Training: q-scaler, loss, schedule, checkpoints, starting parameters, outputs, DDP, one stage."""
