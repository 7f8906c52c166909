"""Figures of ``nepcore evaluate``: parity plots and training loss curves (PNG, no display).

Figures are built with :class:`matplotlib.figure.Figure` directly rather than pyplot, so no
GUI backend is ever chosen (works on clusters without a display) and no global figure state
leaks between calls. PNGs are written to a temporary file and renamed into place.

``loss.out`` files are read in GPUMD's column layout, which ``nepcore train`` also writes:
``epoch L_total L1 L2 E_train F_train V_train E_test F_test V_test`` (``#`` lines are
comments; the "test" columns are the validation split there, all zero without one).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from nepcore._utils import atomic_path

#: Columns of a GPUMD / nepcore loss.out.
LOSS_COLUMNS = ("epoch", "L_total", "L1", "L2", "E_train", "F_train", "V_train", "E_test", "F_test", "V_test")
#: Parity panels: quantity -> axis label.
PARITY_LABELS = {
    "energy": "energy (eV/atom)",
    "force": "force component (eV/Å)",
    "virial": "virial (eV/atom)",
    "stress": "stress (GPa)",
}
#: Colours of the splits (the highlighted split is drawn last, on top).
SPLIT_COLORS = {"train": "tab:gray", "valid": "tab:orange", "test": "tab:blue"}


def save_png(fig: Figure, path: str | os.PathLike, dpi: int = 120) -> None:
    """Write ``fig`` as PNG to ``path`` atomically (temporary file + ``os.replace``)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi)


# ---- parity ---------------------------------------------------------------------------------
def parity_plot(
    path: str | os.PathLike,
    samples: Mapping[str, Mapping[str, tuple[np.ndarray, np.ndarray]]],
    metrics: Mapping[str, Mapping] | None = None,
    highlight: str = "test",
) -> None:
    """Predicted vs reference for energy, force components, virial and stress, one panel each.

    samples: split -> quantity -> (pred, ref) flat arrays in the units of
    :data:`PARITY_LABELS`. metrics: split -> metrics.json split block; its RMSEs go into the
    legend. The ``highlight`` split is drawn on top. A panel without points says so.
    """
    fig = Figure(figsize=(10, 9), layout="constrained")
    axes = fig.subplots(2, 2).ravel()
    order = sorted(samples, key=lambda s: (s == highlight, s))
    for ax, (quantity, label) in zip(axes, PARITY_LABELS.items()):
        lo, hi, drawn = np.inf, -np.inf, False
        for split in order:
            pred, ref = samples[split].get(quantity, (np.zeros(0), np.zeros(0)))
            finite = np.isfinite(pred) & np.isfinite(ref)  # a diverged model must not break the axes
            pred, ref = pred[finite], ref[finite]
            if len(pred) == 0:
                continue
            block = (metrics or {}).get(split, {}).get(quantity)
            unit = label[label.index("(") + 1 : -1]
            legend = split if block is None else f"{split}: RMSE {block['rmse']:.4g} {unit}"
            ax.scatter(
                ref,
                pred,
                s=4,
                alpha=0.5 if split == highlight else 0.3,
                linewidths=0,
                color=SPLIT_COLORS.get(split),
                label=legend,
                rasterized=True,
            )
            lo, hi, drawn = min(lo, ref.min(), pred.min()), max(hi, ref.max(), pred.max()), True
        ax.set_title(quantity)
        ax.set_xlabel(f"reference {label}")
        ax.set_ylabel(f"predicted {label}")
        if not drawn:
            ax.text(0.5, 0.5, f"no reference {quantity}", ha="center", va="center", transform=ax.transAxes)
            continue
        pad = 0.05 * (hi - lo) if hi > lo else 1e-3 * max(1.0, abs(hi))
        ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="k", lw=0.8, zorder=0)
        ax.set_xlim(lo - pad, hi + pad)
        ax.set_ylim(lo - pad, hi + pad)
        ax.set_aspect("equal")
        ax.legend(loc="upper left", fontsize=8, markerscale=3)
    save_png(fig, path)


# ---- loss curves ---------------------------------------------------------------------------
def read_loss_out(path: str | os.PathLike) -> np.ndarray:
    """Rows of a loss.out as a (rows, 10) float array (see :data:`LOSS_COLUMNS`).

    Blank and ``#`` lines are skipped. Raises FileNotFoundError, or ValueError naming the file
    and line of a row that is not 10 numbers.
    """
    rows = []
    with open(path) as fh:
        for number, line in enumerate(fh, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            fields = text.split()
            try:
                values = [float(x) for x in fields]
            except ValueError:
                values = []
            if len(values) != len(LOSS_COLUMNS):
                raise ValueError(
                    f"{path}: line {number}: expected {len(LOSS_COLUMNS)} numbers "
                    f"({' '.join(LOSS_COLUMNS)}), found {text[:60]!r}"
                )
            rows.append(values)
    return np.array(rows, dtype=np.float64).reshape(-1, len(LOSS_COLUMNS))


def _load_stage(path: str | os.PathLike | None) -> tuple[np.ndarray | None, str | None]:
    """(rows, None), or (None, why not) for a missing, empty or malformed file: the loss
    curves are a by-product of the evaluation and must not stop it."""
    if path is None:
        return None, "not given"
    try:
        rows = read_loss_out(path)
    except FileNotFoundError:
        return None, f"{path}: missing"
    except (OSError, ValueError) as err:
        return None, str(err)
    return (rows, None) if len(rows) else (None, f"{path}: empty")


def loss_plot(path: str | os.PathLike, loss_files: Sequence[str | os.PathLike | None]) -> list[str]:
    """Loss and RMSE curves of consecutive training stages; returns the notes about files
    that could not be plotted (also printed in the figure).

    loss_files: one loss.out per stage, in order. Stage k+1's epochs are drawn after stage
    k's (a dotted line marks the change). Top: total loss (log scale); below: RMSE of energy
    (eV/atom), force (eV/Å) and virial (eV/atom), training solid, validation dashed (left out
    when all zero: no validation split, or virials absent).
    """
    fig = Figure(figsize=(9, 10), layout="constrained")
    ax_loss, ax_e, ax_f, ax_v = fig.subplots(4, 1, sharex=True)
    panels = [(ax_e, 4, "energy RMSE (eV/atom)"), (ax_f, 5, "force RMSE (eV/Å)"), (ax_v, 6, "virial RMSE (eV/atom)")]
    notes, offset, plotted = [], 0.0, False
    for stage, file in enumerate(loss_files, 1):
        rows, problem = _load_stage(file)
        if rows is None:
            notes.append(f"stage {stage}: {problem}")
            continue
        x = rows[:, 0] + offset
        color = f"C{stage - 1}"
        if offset:
            for ax in (ax_loss, ax_e, ax_f, ax_v):
                ax.axvline(offset + 0.5, color="k", ls=":", lw=0.8)
        _semilog(ax_loss, x, rows[:, 1], color, "-", f"stage {stage}")
        for ax, col, _label in panels:
            _semilog(ax, x, rows[:, col], color, "-", f"stage {stage} train")
            _semilog(ax, x, rows[:, col + 3], color, "--", f"stage {stage} validation")
        offset, plotted = float(x.max()), True
    ax_loss.set_ylabel("total loss")
    for ax, _col, label in panels:
        ax.set_ylabel(label)
    ax_v.set_xlabel("epoch (stages one after the other)")
    for ax in (ax_loss, ax_e, ax_f, ax_v):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    if notes or not plotted:
        text = "\n".join(notes) if notes else "no loss.out given"
        ax_loss.text(
            0.5,
            0.5,
            text,
            ha="center",
            va="center",
            transform=ax_loss.transAxes,
            fontsize=9,
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "0.7"},
        )
    save_png(fig, path)
    return notes


def _semilog(ax, x: np.ndarray, y: np.ndarray, color: str, style: str, label: str) -> None:
    """Plot the positive finite part of a curve on a log y axis; nothing if there is none
    (all-zero columns: no validation split or no virials)."""
    ok = np.isfinite(y) & (y > 0)
    if not ok.any():
        return
    ax.plot(x[ok], y[ok], style, color=color, label=label, lw=1.2)
    ax.set_yscale("log")
