"""Neighbour pairs with periodic image shifts, for periodic, partly periodic and open cells.

Definition (NEP_SPEC §2): j is a neighbour of i if ``0 < |r_ij| < rc(I, J)`` (strict), where
``r_ij = r_j - r_i + shift @ cell`` runs over *every* periodic image along the periodic
directions, images of i itself included (only the zero-shift self pair is excluded). So cells
thinner than the cutoff are handled exactly as GPUMD's replication does.

The search is ASE's binned ``primitive_neighbor_list`` (linear in the number of atoms);
this module adds the per-type-pair cutoffs, the open-cell bounding box and compact int32
storage. Pair vectors are *not* stored: the model forms them on the device from positions
and shifts, so autograd and the virial see the true geometry.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ase.neighborlist import primitive_neighbor_list


@dataclass
class PairList:
    """Ordered neighbour pairs of one structure (or a batch, after concatenation).

    i, j: (n_pairs,) int32 atom indices (centre i, neighbour j), sorted by i.
    shift: (n_pairs, 3) int32 cell-image offsets; r_ij = r_j - r_i + shift @ cell (Å).
    """

    i: np.ndarray
    j: np.ndarray
    shift: np.ndarray

    def __len__(self) -> int:
        return int(self.i.shape[0])

    def select(self, mask: np.ndarray) -> "PairList":
        return PairList(self.i[mask], self.j[mask], self.shift[mask])

    def counts(self, n_atoms: int) -> np.ndarray:
        """Number of neighbours of each atom, (n_atoms,) int64."""
        return np.bincount(self.i, minlength=n_atoms)


def _search_cell(positions: np.ndarray, cell: np.ndarray, pbc: np.ndarray, cutoff: float) -> np.ndarray:
    """A cell usable by the binned search: open directions get a box spanning the atoms.

    Along a non-periodic direction no shift is ever non-zero, so the cell vector there only
    sets the bin grid; ASE needs it non-degenerate.
    """
    cell = np.array(cell, dtype=np.float64, copy=True)
    if np.all(pbc):
        return cell
    span = positions.max(axis=0) - positions.min(axis=0) if len(positions) else np.zeros(3)
    for d in range(3):
        if not pbc[d] and np.linalg.norm(cell[d]) < 1e-12:
            cell[d] = 0.0
            cell[d, d] = max(span[d] + 2.0 * cutoff, 1.0)
    if abs(np.linalg.det(cell)) < 1e-12:
        # degenerate open cell (e.g. a tilted vector along an open direction): use a box
        for d in range(3):
            if not pbc[d]:
                cell[d] = 0.0
                cell[d, d] = max(span[d] + 2.0 * cutoff, 1.0)
    return cell


def neighbor_pairs(
    positions: np.ndarray,
    cell: np.ndarray,
    pbc: np.ndarray | tuple[bool, bool, bool],
    types: np.ndarray,
    pair_cutoff: np.ndarray,
) -> tuple[PairList, np.ndarray]:
    """All ordered pairs (i, j, shift) with ``|r_ij| < pair_cutoff[type_i, type_j]``.

    positions: (n_atoms, 3) float, Å. cell: (3, 3) float, rows are cell vectors, Å.
    pbc: (3,) bool. types: (n_atoms,) int type indices. pair_cutoff: (T, T) float, Å.
    Returns the pair list and the pair distances (n_pairs,) float64, Å.
    """
    positions = np.ascontiguousarray(positions, dtype=np.float64)
    types = np.asarray(types, dtype=np.int64)
    pair_cutoff = np.asarray(pair_cutoff, dtype=np.float64)
    pbc = np.asarray(pbc, dtype=bool).reshape(3)
    n = positions.shape[0]
    if positions.ndim != 2 or positions.shape[1] != 3:
        raise ValueError(f"positions: expected shape (n_atoms, 3), found {positions.shape}")
    if types.shape != (n,):
        raise ValueError(f"types: expected shape ({n},), found {types.shape}")
    rc_max = float(pair_cutoff.max())
    if n == 0:
        empty = np.zeros(0, np.int32)
        return PairList(empty, empty, np.zeros((0, 3), np.int32)), np.zeros(0)
    search_cell = _search_cell(positions, cell, pbc, rc_max)
    i, j, shift, dist = primitive_neighbor_list("ijSd", pbc, search_cell, positions, rc_max)
    keep = dist < pair_cutoff[types[i], types[j]]
    order = np.lexsort((j[keep], i[keep]))  # deterministic order: by i, then j
    pairs = PairList(
        i[keep][order].astype(np.int32),
        j[keep][order].astype(np.int32),
        shift[keep][order].astype(np.int32),
    )
    return pairs, dist[keep][order]


def split_angular(
    radial: PairList, distances: np.ndarray, types: np.ndarray, pair_cutoff_angular: np.ndarray
) -> PairList:
    """The angular pairs: the radial pairs with ``|r_ij| < rcA(type_i, type_j)``."""
    types = np.asarray(types)
    rcA = np.asarray(pair_cutoff_angular)[types[radial.i], types[radial.j]]
    return radial.select(distances < rcA)
