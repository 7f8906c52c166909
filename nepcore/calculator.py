"""ASE calculator for nep.txt potentials, with a neighbour list reused between MD steps.

    from nepcore.calculator import NEP
    atoms.calc = NEP("nep.txt")                     # float64 on the CPU, skin 1 Å
    atoms.get_potential_energy(); atoms.get_forces(); atoms.get_stress()

Neighbour list with a skin (Verlet list): pairs are searched once at ``rc(I, J) + skin`` and
kept while no atom has moved more than ``skin / 2`` since that search (two atoms approaching
each other then cannot have crossed from beyond ``rc + skin`` to inside ``rc``) and the cell,
the periodicity and the atomic numbers are unchanged. At every call the pair vectors are
recomputed from the current positions and the pairs are *selected* with the exact strict test
``|r_ij| < rc(I, J)`` (radial) and ``< rcA(I, J)`` (angular), in the same floating-point
operations as :func:`nepcore.geometry.neighbors.neighbor_pairs`, so the model sees exactly the pair set
a fresh search would give (only the order of images within one centre atom may differ).

Why select instead of passing the rc + skin pairs with a mask: the radial and angular basis
functions do vanish beyond their cutoff, but the ZBL term runs over the angular list and its
outer cutoff need not be below rcA, and the extra pairs of the skin shell (+73 % for rc = 5,
skin = 1) would cost more than the O(pairs) selection.

Units: energy eV, forces eV/Å, stress eV/Å³ in ASE's convention (Voigt xx yy zz yz xz xy,
positive = tensile): ``stress = -virial / V`` with GPUMD's virial (docs/model.md#forces-virial-and-stress).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
from ase.calculators.calculator import Calculator, all_changes

from nepcore.data.checks import StructureError, check_close_contacts, check_finite
from nepcore.evaluation.predict import PRECISIONS, load_model
from nepcore.geometry.neighbors import PairList, neighbor_pairs
from nepcore.geometry.virial import ASE_VOIGT_FROM_ATOM9, virial6_to_ase_stress
from nepcore.model.batch import Batch, slot_layout
from nepcore.model.nep_model import NEPModel, resolve_device

#: Default skin, Å: at 300-1000 K an atom moves ~0.01-0.03 Å per 1-2 fs step, so a list
#: lasts tens of steps, while rc + 1 Å costs about +60 % pairs in the (cheap) selection only.
DEFAULT_SKIN = 1.0


@dataclass
class _ListState:
    """What the current pair list was built for, and its rc + skin pairs."""

    positions: np.ndarray  # (n, 3) Å at build time
    cell: np.ndarray
    pbc: np.ndarray
    types: np.ndarray
    i: np.ndarray  # (m,) int64
    j: np.ndarray
    shift: np.ndarray  # (m, 3) int32
    offset: np.ndarray  # (m, 3) float64 shift @ cell, Å
    rc_radial: np.ndarray  # (m,) exact pair cutoffs, Å
    rc_angular: np.ndarray


class SkinNeighborList:
    """Radial and angular pairs of one structure, rebuilt only when atoms moved > skin / 2.

    rc_radial, rc_angular: (T, T) pair cutoffs, Å. skin: Å (0 rebuilds whenever anything
    moved). ``n_builds`` counts the searches.
    """

    def __init__(self, rc_radial: np.ndarray, rc_angular: np.ndarray, skin: float = DEFAULT_SKIN) -> None:
        if not skin >= 0.0:
            raise ValueError(f"skin must be >= 0 Å, found {skin}")
        self.rc_radial = np.asarray(rc_radial, dtype=np.float64)
        self.rc_angular = np.asarray(rc_angular, dtype=np.float64)
        self.skin = float(skin)
        self.n_builds = 0
        self._state: _ListState | None = None

    def needs_rebuild(self, positions: np.ndarray, cell: np.ndarray, pbc: np.ndarray, types: np.ndarray) -> bool:
        s = self._state
        if s is None or s.positions.shape != positions.shape:
            return True
        if not (np.array_equal(s.cell, cell) and np.array_equal(s.pbc, pbc) and np.array_equal(s.types, types)):
            return True
        moved = positions - s.positions
        # skin 0: any motion at all rebuilds (max > 0)
        return bool(np.einsum("ij,ij->i", moved, moved).max(initial=0.0) > (0.5 * self.skin) ** 2)

    def build(self, positions: np.ndarray, cell: np.ndarray, pbc: np.ndarray, types: np.ndarray) -> None:
        """Search the pairs within rc + skin for these positions."""
        pairs, _ = neighbor_pairs(positions, cell, pbc, types, self.rc_radial + self.skin)
        i, j = pairs.i.astype(np.int64), pairs.j.astype(np.int64)
        self._state = _ListState(
            positions=positions.copy(), cell=cell.copy(), pbc=pbc.copy(), types=types.copy(),
            i=i, j=j, shift=pairs.shift,
            # the same expression as neighbors._exact_filter, so the selection below is bitwise
            # the strict test a fresh search would make
            offset=np.einsum("pk,kx->px", pairs.shift.astype(np.float64), cell),
            rc_radial=self.rc_radial[types[i], types[j]],
            rc_angular=self.rc_angular[types[i], types[j]],
        )  # fmt: skip
        self.n_builds += 1

    def pairs(
        self, positions: np.ndarray, cell: np.ndarray, pbc: np.ndarray, types: np.ndarray
    ) -> tuple[PairList, PairList]:
        """Radial and angular pairs (``r < rc``, ``r < rcA``) for the current positions (Å)."""
        positions = np.ascontiguousarray(positions, dtype=np.float64)
        if self.needs_rebuild(positions, cell, pbc, types):
            self.build(positions, cell, pbc, types)
        s = self._state
        assert s is not None
        vectors = np.take(positions, s.j, axis=0) - np.take(positions, s.i, axis=0)
        vectors += s.offset
        dist = np.sqrt(np.einsum("ij,ij->i", vectors, vectors))
        check_close_contacts(PairList(s.i, s.j, s.shift), dist, _fail)  # else NaN energies (r = 0)
        radial = np.flatnonzero(dist < s.rc_radial)
        angular = np.flatnonzero(dist < s.rc_angular)

        def take(k: np.ndarray) -> PairList:
            return PairList(s.i[k], s.j[k], s.shift[k])

        return take(radial), take(angular)


def _fail(field: str, problem: str):
    raise StructureError("<atoms>", None, field, problem)


def single_frame_batch(
    positions: np.ndarray,
    types: np.ndarray,
    cell: np.ndarray,
    radial: PairList,
    angular: PairList,
    dtype: torch.dtype,
    device: torch.device | str,
) -> Batch:
    """A one-frame :class:`Batch` without labels (cheaper than collate's general path)."""
    # cells by reshape, not cell[None]: numpy's new axis has stride 0, torch keeps it, and the
    # compiled core guards on strides (a calculator then compiled a graph of its own, not predict's)
    n = len(types)
    as_float = lambda x: torch.as_tensor(np.asarray(x, dtype=np.float64)).to(device, dtype)
    as_long = lambda x: torch.as_tensor(np.asarray(x, dtype=np.int64)).to(device)
    zeros_f = torch.zeros(1, dtype=dtype, device=device)
    false = lambda: torch.zeros(1, dtype=torch.bool, device=device)  # one tensor each: dynamo guards on aliases
    slot, n_slots = slot_layout(np.asarray(angular.i, dtype=np.int64), n)
    return Batch(
        positions=as_float(positions), types=as_long(types),
        atom_frame=torch.zeros(n, dtype=torch.long, device=device),
        cells=as_float(np.reshape(cell, (1, 3, 3))), atoms_per_frame=as_float([n]),
        radial_i=as_long(radial.i), radial_j=as_long(radial.j), radial_shift=as_float(radial.shift),
        angular_i=as_long(angular.i), angular_j=as_long(angular.j), angular_shift=as_float(angular.shift),
        angular_slot=as_long(slot), angular_slots=torch.zeros(n_slots, dtype=torch.int8, device=device),
        energy=zeros_f, has_energy=false(), forces=torch.zeros(n, 3, dtype=dtype, device=device), has_forces=false(),
        virial=torch.zeros(1, 6, dtype=dtype, device=device), has_virial=false(), weight=torch.ones_like(zeros_f),
        frame_index=torch.zeros(1, dtype=torch.long, device=device),
    )  # fmt: skip


class NEP(Calculator):
    """ASE calculator for a GPUMD nep.txt (NEP4 / NEP3 read by nepcore).

    model_path: nep.txt path (or a :class:`~nepcore.model.nep_model.NEPModel`). precision: "float64"
    or "float32". device: "cpu", "cuda", "auto" (CUDA when available) or a torch.device.
    skin: neighbour-list skin, Å.
    compile: evaluate through the inductor-compiled core (NEPModel.use_compiled_core): the
    first call compiles (cached on disk; a call with stresses compiles once more), later calls
    with other atom or neighbour counts reuse the graph. compile_cache: its cache folder
    (default: $NEPCORE_COMPILE_CACHE, else ~/.cache/nepcore/inductor).
    Results: energy / free_energy (eV), energies (N,) eV, forces (N, 3) eV/Å, stress (6,)
    eV/Å³ and stresses (N, 6) eV/Å³ (only for cells periodic in all three directions).
    ``n_neighbor_builds`` counts neighbour searches. Atoms with no atoms get zero energy and
    empty forces (as ASE's EMT and LJ calculators give). Two atoms closer than 0.1 Å raise
    :class:`~nepcore.data.checks.StructureError` naming them (the energy would be NaN).
    """

    implemented_properties = ["energy", "free_energy", "energies", "forces", "stress", "stresses"]

    def __init__(
        self,
        model_path: str | os.PathLike | NEPModel,
        precision: str = "float64",
        device: str | torch.device = "cpu",
        skin: float = DEFAULT_SKIN,
        compile: bool = False,
        compile_cache: str | os.PathLike | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.model = load_model(model_path, precision, device)  # a copy; validates precision
        self.dtype = PRECISIONS[precision]
        self.device = resolve_device(device)
        spec = self.model.spec
        self._type_of = {symbol: t for t, symbol in enumerate(spec.elements)}
        self.neighbor_list = SkinNeighborList(
            np.array(spec.pair_cutoffs("radial")), np.array(spec.pair_cutoffs("angular")), skin
        )
        if compile:
            self.model.use_compiled_core(compile_cache)

    @property
    def n_neighbor_builds(self) -> int:
        return self.neighbor_list.n_builds

    def _types(self, atoms) -> np.ndarray:
        try:
            return np.array([self._type_of[s] for s in atoms.get_chemical_symbols()], dtype=np.int64)
        except KeyError as err:
            raise ValueError(
                f"element {err.args[0]} is not a type of the model {' '.join(self.model.spec.elements)}"
            ) from None

    def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes) -> None:
        super().calculate(atoms, properties, system_changes)
        atoms = self.atoms
        if len(atoms) == 0:
            self.results = _empty_results(atoms)
            return
        types = self._types(atoms)
        positions = atoms.get_positions()
        cell = np.array(atoms.cell.array, dtype=np.float64)
        check_finite(positions, "positions", _fail)
        check_finite(cell, "cell", _fail)
        pbc = np.array(atoms.pbc, dtype=bool)
        radial, angular = self.neighbor_list.pairs(positions, cell, pbc, types)
        batch = single_frame_batch(positions, types, cell, radial, angular, self.dtype, self.device)
        per_atom_virial = "stresses" in properties
        with torch.no_grad():
            out = self.model(batch, per_atom_virial=per_atom_virial)
        numpy = lambda t: t.detach().to("cpu", torch.float64).numpy()
        energy = float(out["energy"][0])
        self.results = {
            "energy": energy,
            "free_energy": energy,
            "energies": numpy(out["atom_energy"]),
            "forces": numpy(out["forces"]),
        }
        if pbc.all():
            volume = abs(float(np.linalg.det(cell)))
            self.results["stress"] = virial6_to_ase_stress(numpy(out["virial"])[0], volume)
            if per_atom_virial:
                self.results["stresses"] = -numpy(out["atom_virial"])[:, list(ASE_VOIGT_FROM_ATOM9)] / volume


def _empty_results(atoms) -> dict[str, object]:
    """Results for an Atoms with no atoms: no energy, no forces (the torch core needs atoms)."""
    results: dict[str, object] = {
        "energy": 0.0,
        "free_energy": 0.0,
        "energies": np.zeros(0),
        "forces": np.zeros((0, 3)),
    }
    if np.all(atoms.pbc):
        results["stress"] = np.zeros(6)
        results["stresses"] = np.zeros((0, 6))
    return results
