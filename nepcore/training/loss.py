"""Training loss and error metrics of a NEP potential, in GPUMD's terms (docs/model.md#training-loss).

Per batch, over the frames that carry each label, with GPUMD's per-frame weight w (squared
errors are multiplied by w², as GPUMD does with ``weight=``):

* energy, per atom: d_s = (E_pred,s − E_ref,s) / N_s. The training loss uses d_s − shift with
  shift = Σ w_s² d_s / Σ w_s², the weighted mean residual of the batch, so the loss does not
  depend on the shared output bias b1 (its gradient is exactly zero); b1 is instead set
  analytically from the mean residual (:func:`energy_shift`), as GPUMD shifts it.
  ``MSE_E = Σ w_s² (d_s − shift)² / |S_E|`` (eV²/atom²).
* force, per component: ``MSE_F = Σ_s w_s² Σ_i t_i² g_i |ΔF_i|² / (3 Σ_s N_s)`` (eV²/Å²), with
  GPUMD's ``type_weight`` t_i of atom i's type (default 1) and its ``force_delta`` δ:
  g_i = δ / (δ + |F_ref,i|) when δ > 0 (more weight on small forces), else 1. Both only
  weight the loss; the reported force RMSE stays unweighted.
* virial, per atom, six components xx yy zz xy yz zx:
  ``MSE_V = Σ_s w_s² Σ_c (ΔW_s,c / N_s)² / (6 |S_V|)`` (eV²/atom²).

Loss forms: ``mse`` (default): λe MSE_E + λf MSE_F + λv MSE_V; ``rmse`` (GPUMD's fitness):
λe RMSE_E + λf RMSE_F + λv RMSE_V, so λ values from a GPUMD nep.in mean the same. Both add
GPUMD's regularisation λ1 Σ|θ|/N + λ2 sqrt(Σθ²/N) over all trainable parameters but b1
(N = GPUMD's N_par).

Everything here is branch-free tensor algebra (no ``.item()``): sums and counts are tensors
that the training loop accumulates over an epoch and reads once at its end.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nepcore.errors import SettingError
from nepcore.model.batch import Batch
from nepcore.model.nep_model import NEPModel

LOSS_FORMS: tuple[str, ...] = ("mse", "rmse")
#: Parameters covered by the L1/L2 regularisation (GPUMD: every variable but the global b1).
REGULARISED: tuple[str, ...] = ("W0", "b0", "w1", "c_radial", "c_angular")
# Keeps sqrt differentiable at 0 (an empty virial term in a batch): below it the gradient is 0.
_SQRT_EPS = 1e-30


@dataclass(frozen=True)
class LossWeights:
    """λe, λf, λv (loss weights), λ1, λ2 (regularisation), the loss form, and GPUMD's force
    weighting: ``force_delta`` δ (eV/Å, 0 = off) and ``type_weight`` (one weight per model type,
    empty = all 1)."""

    lambda_e: float = 0.01
    lambda_f: float = 1.0
    lambda_v: float = 0.01
    lambda_1: float = 0.0
    lambda_2: float = 0.0
    form: str = "mse"
    force_delta: float = 0.0
    type_weight: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.form not in LOSS_FORMS:
            raise SettingError(f"loss form must be one of {', '.join(LOSS_FORMS)}, found {self.form!r}")
        for name in ("lambda_e", "lambda_f", "lambda_v", "lambda_1", "lambda_2", "force_delta"):
            if not getattr(self, name) >= 0:
                raise SettingError(f"{name} must be >= 0, found {getattr(self, name)}")
        if any(not w >= 0 for w in self.type_weight):
            raise SettingError(f"type_weight values must be >= 0, found {list(self.type_weight)}")


#: Names of the per-batch sums returned by :func:`error_sums` (all 0-d tensors).
SUM_KEYS: tuple[str, ...] = (
    "e_w",  # Σ w² (d − shift)²           weighted, shifted (training loss)
    "e_sq",  # Σ (d − shift)²             unweighted, shifted (train RMSE, GPUMD's print)
    "e_w_raw",  # Σ w² d²               weighted, unshifted (validation loss)
    "e_sq_raw",  # Σ d²                   unweighted, unshifted (validation RMSE)
    "e_n",  # |S_E|
    "e_res",  # Σ w² d                    for the b1 shift
    "e_wsum",  # Σ w²
    "f_w",
    "f_sq",
    "f_n",  # force: weighted and plain sums of squared components, 3 Σ N_s
    "v_w",
    "v_sq",
    "v_n",  # virial: weighted and plain sums of squared per-atom components, 6 |S_V|
)

#: The (Σ w² d, Σ w²) pair of a stacked SUM_KEYS vector: a batch's mean energy residual is their
#: ratio (what b1 is moved by).
RESIDUAL_SUMS = slice(SUM_KEYS.index("e_res"), SUM_KEYS.index("e_res") + 2)
assert SUM_KEYS[RESIDUAL_SUMS] == ("e_res", "e_wsum")


def label_counts(batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The labelled values of ``batch``, the denominators of the mean squared errors (0-d
    tensors in the positions' dtype): energies (frames with an energy), force components
    (3 × atoms in frames with forces) and virial components (6 × frames with a virial)."""
    n = batch.atoms_per_frame
    return (
        batch.has_energy.to(n.dtype).sum(),
        3.0 * (n * batch.has_forces.to(n.dtype)).sum(),
        6.0 * batch.has_virial.to(n.dtype).sum(),
    )


def error_sums(
    out: dict[str, torch.Tensor], batch: Batch, weights: LossWeights | None = None
) -> dict[str, torch.Tensor]:
    """Sums of squared errors of one batch (see SUM_KEYS), from model outputs ``out``.

    out: ``energy`` (F,) eV, ``forces`` (N, 3) eV/Å, ``virial`` (F, 6) eV, totals per frame.
    weights: its ``force_delta`` and ``type_weight`` weight the force sum of the loss (f_w);
    None = neither. A type_weight must have one value per model type.
    """
    n = batch.atoms_per_frame
    w2 = batch.weight * batch.weight
    has_e = batch.has_energy.to(n.dtype)
    e_n, f_n, v_n = label_counts(batch)
    d = (out["energy"] - batch.energy) / n * has_e
    e_wsum = (w2 * has_e).sum()
    e_res = (w2 * d).sum()
    shift = e_res / e_wsum.clamp_min(torch.finfo(n.dtype).tiny)
    ds = (d - shift) * has_e

    has_f_atom = batch.has_forces.to(n.dtype)[batch.atom_frame]
    df2 = ((out["forces"] - batch.forces) ** 2).sum(1) * has_f_atom  # (N,)
    f_sq = df2.sum()
    atom_w = w2[batch.atom_frame]
    if weights is not None and weights.type_weight:
        table = torch.as_tensor(weights.type_weight, dtype=n.dtype, device=n.device)
        atom_w = atom_w * table[batch.types] ** 2
    if weights is not None and weights.force_delta > 0:
        atom_w = atom_w * weights.force_delta / (weights.force_delta + batch.forces.norm(dim=1))
    f_w = (df2 * atom_w).sum()

    has_v = batch.has_virial.to(n.dtype)
    dv2 = (((out["virial"] - batch.virial) / n[:, None]) ** 2).sum(1) * has_v  # (F,)
    return {
        "e_w": (w2 * ds * ds).sum(),
        "e_sq": (ds * ds).sum(),
        "e_w_raw": (w2 * d * d).sum(),
        "e_sq_raw": (d * d).sum(),
        "e_n": e_n,
        "e_res": e_res,
        "e_wsum": e_wsum,
        "f_w": f_w,
        "f_sq": f_sq,
        "f_n": f_n,
        "v_w": (w2 * dv2).sum(),
        "v_sq": dv2.sum(),
        "v_n": v_n,
    }


def _mean(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    return total / count.clamp_min(1.0)


def _root(x: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(x.clamp_min(_SQRT_EPS))


def data_loss(sums: dict[str, torch.Tensor], weights: LossWeights, shifted: bool = True) -> torch.Tensor:
    """λe·E + λf·F + λv·V terms (MSE or RMSE form) of weighted error sums.

    shifted: energy term with the batch's mean residual removed (training, b1-independent) or
    as predicted (validation, where b1 has been set).
    """
    terms = (
        (weights.lambda_e, _mean(sums["e_w" if shifted else "e_w_raw"], sums["e_n"])),
        (weights.lambda_f, _mean(sums["f_w"], sums["f_n"])),
        (weights.lambda_v, _mean(sums["v_w"], sums["v_n"])),
    )
    loss = sums["e_w"].new_zeros(())
    for lam, mse in terms:
        if lam > 0:  # a static setting, not data: skipping keeps 0·nan out of the loss
            loss = loss + lam * (_root(mse) if weights.form == "rmse" else mse)
    return loss


def regularisation(model: NEPModel, weights: LossWeights) -> tuple[torch.Tensor, torch.Tensor]:
    """GPUMD's L1 and L2 terms: λ1 Σ|θ|/N_par and λ2 sqrt(Σθ²/N_par), b1 excluded."""
    n_par = float(model.spec.n_trainable)
    zero = model.W0.new_zeros(())
    l1 = l2 = zero
    if weights.lambda_1 > 0:
        l1 = weights.lambda_1 * sum(getattr(model, k).abs().sum() for k in REGULARISED) / n_par
    if weights.lambda_2 > 0:
        l2 = weights.lambda_2 * _root(sum((getattr(model, k) ** 2).sum() for k in REGULARISED) / n_par)
    return l1, l2


def energy_shift(sums: dict[str, torch.Tensor]) -> torch.Tensor:
    """The weighted mean per-atom energy residual Σ w² d / Σ w² (eV/atom); 0 without energies.

    Adding it to b1 (U = w1·h − b1) removes the mean residual from the predictions.
    """
    return sums["e_res"] / sums["e_wsum"].clamp_min(torch.finfo(sums["e_res"].dtype).tiny)


def rmse(sums: dict[str, float], shifted_energy: bool) -> dict[str, float | None]:
    """Unweighted RMSEs from accumulated sums (plain floats): E (eV/atom), F (eV/Å), V (eV/atom);
    None for a label no frame carries (never a misleading 0).

    shifted_energy: the training RMSE (mean batch residual removed, as GPUMD prints it) or the
    plain one (validation, GPUMD's test columns).
    """
    e_key = "e_sq" if shifted_energy else "e_sq_raw"
    root = lambda s, n: (s / n) ** 0.5 if n > 0 else None
    return {
        "rmse_e": root(sums[e_key], sums["e_n"]),
        "rmse_f": root(sums["f_sq"], sums["f_n"]),
        "rmse_v": root(sums["v_sq"], sums["v_n"]),
    }
