"""``nepcore convert`` as a library call: raw files -> one validated, split HDF5 dataset.

:func:`convert` expands globs, reads and validates every frame (:mod:`nepcore.data.reading`),
assigns the train/valid/test split, writes the file atomically (:mod:`nepcore.data.structures_h5`)
and returns a :class:`ConversionSummary`. Any invalid frame stops the conversion before
anything is written.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from nepcore._utils import sha256_file
from nepcore.data.checks import StructureError
from nepcore.data.reading import LabelKeys, RawStructure, iter_file, pack_structures, species_in
from nepcore.data.structures_h5 import SPLIT_NAMES, Provenance, StructureArrays, write_structures
from nepcore.elements import SYMBOLS
from nepcore.errors import SettingError
from nepcore.io.files import NoFileMatchesError, expand_patterns

log = logging.getLogger("nepcore.convert")

#: Notes about individual frames printed before the rest are only counted.
_MAX_FRAME_NOTES = 5


def expand_inputs(patterns: Sequence[str]) -> list[str]:
    """The input files of a conversion (:func:`nepcore.io.files.expand_patterns`: sorted within a
    pattern, each file once; a glob matching nothing is an error naming it)."""
    try:
        return expand_patterns(patterns)
    except NoFileMatchesError as err:
        raise StructureError(err.pattern, None, "file", "no file matches this pattern") from None


def check_types(types: Sequence[str] | None) -> tuple[str, ...] | None:
    """Validate ``--types``: known element symbols, no repeats."""
    if types is None:
        return None
    types = tuple(types)
    for symbol in types:
        if symbol not in SYMBOLS:
            raise SettingError(f"--types: {symbol!r} is not an element symbol H..Pu")
    if len(set(types)) != len(types) or not types:
        raise SettingError(f"--types: expected distinct element symbols, found {' '.join(types)}")
    return types


def split_by_fractions(n_frames: int, fractions: Sequence[float], seed: int) -> dict[str, np.ndarray]:
    """Random whole-frame split, deterministic from ``seed``; sorted, disjoint index arrays.

    Counts are rounded; a split with a positive fraction gets at least one frame when there
    are enough frames to leave one for training (so tiny datasets still have a test set).
    """
    fractions = np.asarray(fractions, dtype=np.float64)
    if fractions.shape != (3,) or (fractions < 0).any() or abs(fractions.sum() - 1.0) > 1e-6:
        raise SettingError(f"--split: expected three fractions >= 0 summing to 1, found {fractions.tolist()}")
    counts = {"valid": int(round(fractions[1] * n_frames)), "test": int(round(fractions[2] * n_frames))}
    for k, name in ((1, "valid"), (2, "test")):
        if fractions[k] > 0 and counts[name] == 0 and n_frames - sum(counts.values()) > 1:
            counts[name] = 1
    while sum(counts.values()) > n_frames:  # only possible with fractions near (0, .5, .5)
        counts["valid" if counts["valid"] >= counts["test"] else "test"] -= 1
    order = np.random.default_rng(seed).permutation(n_frames)
    n_test, n_valid = counts["test"], counts["valid"]
    return {
        "test": np.sort(order[:n_test]),
        "valid": np.sort(order[n_test : n_test + n_valid]),
        "train": np.sort(order[n_test + n_valid :]),
    }


@dataclass
class ConversionSummary:
    """What went into a dataset (printed at the end of ``nepcore convert``)."""

    output: str
    n_frames: int
    n_atoms: int
    split_frames: dict[str, int]
    species_counts: dict[str, int]
    labels: dict[str, int]
    energy_per_atom_range: tuple[float, float] | None
    force_component_range: tuple[float, float] | None
    force_norm_max: float | None
    cutoff: float
    isolated_atoms: int = 0
    isolated_frames: int = 0
    virial_stress_disagreements: int = 0
    sources: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        splits = ", ".join(f"{k} {v}" for k, v in self.split_frames.items())
        species = ", ".join(f"{k} {v}" for k, v in self.species_counts.items())
        labels = ", ".join(f"{k} {v}/{self.n_frames}" for k, v in self.labels.items())
        out = [
            f"wrote {self.output}: {self.n_frames} frames, {self.n_atoms} atoms from {len(self.sources)} file(s)",
            f"  split: {splits}",
            f"  species (atoms): {species}",
            f"  labels present (frames): {labels}",
        ]
        if self.energy_per_atom_range:
            out.append("  energy per atom: {:.6g} .. {:.6g} eV/atom".format(*self.energy_per_atom_range))
        if self.force_component_range:
            out.append(
                "  force components: {:.6g} .. {:.6g} eV/Å, max |F| {:.6g} eV/Å".format(
                    *self.force_component_range, self.force_norm_max
                )
            )
        if self.cutoff > 0:
            out.append(
                f"  warnings: {self.isolated_atoms} atom(s) in {self.isolated_frames} frame(s) "
                f"without a neighbour inside {self.cutoff:g} Å"
            )
        if self.virial_stress_disagreements:
            out.append(
                f"  notes: virial and stress disagree in {self.virial_stress_disagreements} "
                "frame(s); the virial was used"
            )
        return out


def summarize(
    data: StructureArrays,
    structures: Sequence[RawStructure],
    split: dict[str, np.ndarray],
    output: str,
    sources: list[str],
    cutoff: float,
) -> ConversionSummary:
    counts = np.bincount(data.types, minlength=len(data.species))
    n_per_frame = data.atoms_per_frame
    e_per_atom = data.energy[data.has_energy] / n_per_frame[data.has_energy]
    forces = data.forces[np.isfinite(data.forces[:, 0])] if data.n_atoms else data.forces
    isolated = np.array([s.n_isolated for s in structures])
    return ConversionSummary(
        output=output,
        n_frames=data.n_frames,
        n_atoms=data.n_atoms,
        split_frames={name: int(len(split[name])) for name in SPLIT_NAMES},
        species_counts={s: int(c) for s, c in zip(data.species, counts)},
        labels={
            "energy": int(data.has_energy.sum()),
            "forces": int(data.has_forces.sum()),
            "virial": int(data.has_virial.sum()),
            "weight != 1": int((data.weight != 1.0).sum()),
            "config_type": int(sum(bool(c) for c in data.config_type)),
        },
        energy_per_atom_range=(float(e_per_atom.min()), float(e_per_atom.max())) if len(e_per_atom) else None,
        force_component_range=(float(forces.min()), float(forces.max())) if len(forces) else None,
        force_norm_max=float(np.linalg.norm(forces, axis=1).max()) if len(forces) else None,
        cutoff=cutoff,
        isolated_atoms=int(isolated.sum()),
        isolated_frames=int((isolated > 0).sum()),
        virial_stress_disagreements=int(sum(s.virial_stress_disagree for s in structures)),
        sources=sources,
    )


def convert(
    inputs: Sequence[str],
    output: str | os.PathLike,
    *,
    types: Sequence[str] | None = None,
    keys: LabelKeys = LabelKeys(),
    fractions: Sequence[float] = (0.8, 0.1, 0.1),
    valid_files: Sequence[str] = (),
    test_files: Sequence[str] = (),
    seed: int = 0,
    cutoff: float = 6.0,
    progress: bool | None = None,
) -> ConversionSummary:
    """Read, validate and split ``inputs``; write the HDF5 dataset ``output`` atomically.

    types: allowed species in type order (None: every species found, by atomic number).
    fractions: train/valid/test fractions of a random frame split (ignored when
    ``valid_files`` or ``test_files`` are given: then those files' frames are the valid/test
    splits and ``inputs`` the training split). cutoff: radius (Å) of the isolated-atom
    warning (0 disables it). progress: tqdm bar over frames (None: only on a terminal).
    Raises :class:`~nepcore.data.checks.StructureError` (nothing is written then).
    """
    types = check_types(types)
    by_files = bool(valid_files) or bool(test_files)
    roles: list[tuple[str, str]] = []  # (path, split it feeds; "" = decided by fractions)
    for role, patterns in (("train" if by_files else "", inputs), ("valid", valid_files), ("test", test_files)):
        for path in expand_inputs(patterns):
            clash = [r for p, r in roles if os.path.realpath(p) == os.path.realpath(path)]
            if clash:
                raise StructureError(path, None, "file", "given twice (as an input and as --valid/--test)")
            roles.append((path, role))
    if not roles:
        raise SettingError("no input files")

    structures: list[RawStructure] = []
    source, source_frame, role_of_frame, shas, n_per_source = [], [], [], [], []
    notes = 0
    with tqdm(desc="convert", unit=" frames", disable=None if progress is None else not progress, leave=False) as bar:
        for s, (path, role) in enumerate(roles):
            count = 0
            for raw in iter_file(path, keys, allowed_species=types, cutoff=cutoff):
                if raw.virial_stress_disagree:
                    notes += 1
                    if notes <= _MAX_FRAME_NOTES:
                        log.info(
                            "note: %s: frame %d: virial and -stress*V disagree by more than "
                            "1e-3 eV/atom; using the virial",
                            path,
                            count,
                        )
                structures.append(raw)
                source.append(s)
                source_frame.append(count)
                role_of_frame.append(role)
                count += 1
                bar.update()
            shas.append(sha256_file(path))
            n_per_source.append(count)
    if notes > _MAX_FRAME_NOTES:
        log.info("note: virial and stress disagree in %d more frame(s)", notes - _MAX_FRAME_NOTES)

    species = types if types is not None else species_in(structures)
    data = pack_structures(structures, species, source, source_frame)
    if by_files:
        roles_array = np.array(role_of_frame)
        split = {name: np.flatnonzero(roles_array == name) for name in SPLIT_NAMES}
        frac = (float("nan"),) * 3
    else:
        split = split_by_fractions(data.n_frames, fractions, seed)
        frac = tuple(float(f) for f in fractions)
    prov = Provenance(
        source_paths=[p for p, _ in roles],
        source_sha256=shas,
        source_n_frames=n_per_source,
        split=split,
        split_mode="files" if by_files else "fractions",
        split_seed=int(seed),
        split_fractions=frac,
        cutoff_checked=float(cutoff),
    )
    write_structures(output, data, prov)
    summary = summarize(data, structures, split, str(output), prov.source_paths, cutoff)
    if summary.isolated_atoms:
        first = next(i for i, s in enumerate(structures) if s.n_isolated)
        log.warning(
            "warning: %d atom(s) in %d frame(s) have no neighbour within %g Å (first: %s frame %d)",
            summary.isolated_atoms,
            summary.isolated_frames,
            cutoff,
            roles[source[first]][0],
            source_frame[first],
        )
    return summary
