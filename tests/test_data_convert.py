"""nepcore convert / export-xyz: reading, validation errors, HDF5 content, split, round trip.

All data is made in the test (ase.build cells with random labels); the test on the team's
reference data skips where ../shared/data is absent (``shared_data`` fixture, conftest.py).
"""

from __future__ import annotations

import logging
from pathlib import Path

import ase.io
import h5py
import numpy as np
import pytest
from ase import Atoms
from ase.build import bulk, fcc111, molecule
from ase.calculators.singlepoint import SinglePointCalculator
from ase.stress import voigt_6_to_full_3x3_stress
from helpers.structures import labelled_bulk, write_xyz

from nepcore.cli import main
from nepcore.data.convert import convert, split_by_fractions
from nepcore.data.gpumd_xyz import VACUUM_MARGIN, gpumd_cell
from nepcore.data.structures_h5 import StructureFile

PER_ATOM = ("types", "positions", "forces")
PER_FRAME = (
    "offsets",
    "cell",
    "pbc",
    "energy",
    "has_energy",
    "has_forces",
    "virial",
    "has_virial",
    "weight",
    "config_type",
)


def read_h5(path) -> dict:
    with StructureFile(path) as h5:
        data = h5.read_all()
        split = {name: h5.split(name) for name in ("train", "valid", "test")}
    out = {k: getattr(data, k) for k in PER_ATOM + PER_FRAME}
    out["species"] = data.species
    out["split"] = split
    return out


def run_cli(*args: str) -> int:
    return main([str(a) for a in args])


# ---- reading labels ---------------------------------------------------------------------------

GPUMD_XYZ = """\
2
Lattice="4 0 0 0 4.5 0 0 0 5" energy=-7.5 virial="1 2 3 4 5 6 7 8 9" weight=2.5 config_type=md_1 pbc="T T T" \
Properties=species:S:1:pos:R:3:force:R:3
Cu 0 0 0 0.1 0.2 0.3
Ni 1.8 1.8 0 -0.1 -0.2 -0.3
"""


def test_gpumd_extxyz_force_column_virial_order_weight_label(tmp_path):
    src = tmp_path / "gpumd.xyz"
    src.write_text(GPUMD_XYZ)
    out = tmp_path / "s.h5"
    convert([str(src)], out, fractions=(1, 0, 0), cutoff=6)
    d = read_h5(out)
    assert d["species"] == ("Ni", "Cu")  # by atomic number when --types is absent
    np.testing.assert_array_equal(d["forces"], [[0.1, 0.2, 0.3], [-0.1, -0.2, -0.3]])
    # GPUMD reads the 9 numbers row-major: xx xy xz / yx yy yz / zx zy zz
    np.testing.assert_array_equal(d["virial"][0], np.arange(1.0, 10.0).reshape(3, 3))
    assert d["energy"][0] == -7.5 and d["weight"][0] == 2.5 and d["config_type"] == ["md_1"]
    assert d["has_energy"].all() and d["has_forces"].all() and d["has_virial"].all()


def test_stress_becomes_minus_stress_times_volume(tmp_path):
    frames = labelled_bulk(3)
    out = tmp_path / "s.h5"
    convert([write_xyz(tmp_path / "in.xyz", frames)], out, fractions=(1, 0, 0))
    d = read_h5(out)
    for f, atoms in enumerate(frames):
        expected = -voigt_6_to_full_3x3_stress(atoms.get_stress()) * atoms.get_volume()
        np.testing.assert_allclose(d["virial"][f], expected, rtol=1e-12, atol=1e-12)


def test_disagreeing_virial_wins_with_a_note(tmp_path, caplog):
    frames = labelled_bulk(2)
    frames[1].info["virial"] = np.diag([50.0, 50.0, 50.0])
    out = tmp_path / "s.h5"
    with caplog.at_level(logging.INFO, logger="nepcore.convert"):
        summary = convert([write_xyz(tmp_path / "in.xyz", frames)], out, fractions=(1, 0, 0))
    assert summary.virial_stress_disagreements == 1
    assert "frame 1: virial and -stress*V disagree" in caplog.text
    np.testing.assert_array_equal(read_h5(out)["virial"][1], np.diag([50.0, 50.0, 50.0]))


def test_missing_labels_are_masked_not_zero(tmp_path):
    bare = bulk("Cu", "fcc", a=3.6, cubic=True)
    out = tmp_path / "s.h5"
    convert([write_xyz(tmp_path / "in.xyz", [bare])], out, fractions=(1, 0, 0))
    d = read_h5(out)
    assert not d["has_energy"][0] and not d["has_forces"][0] and not d["has_virial"][0]
    assert np.isnan(d["energy"][0]) and np.isnan(d["forces"]).all() and np.isnan(d["virial"]).all()


def test_partly_and_non_periodic_frames_traj_db_and_globs(tmp_path):
    slab = fcc111("Cu", (2, 2, 3), a=3.6)  # pbc T T F, no vacuum: the c vector is zero
    slab.cell[2] = 0.0
    slab.calc = SinglePointCalculator(slab, energy=-40.0, forces=np.zeros((12, 3)))
    water = molecule("H2O")  # no cell at all
    water.calc = SinglePointCalculator(water, energy=-14.0, forces=np.ones((3, 3)))
    ase.io.write(tmp_path / "a.traj", [slab])
    ase.io.write(tmp_path / "b.db", [water])
    write_xyz(tmp_path / "c1.xyz", labelled_bulk(2))
    write_xyz(tmp_path / "c2.xyz", labelled_bulk(1, seed=3))
    out = tmp_path / "s.h5"
    summary = convert(
        [str(tmp_path / "a.traj"), str(tmp_path / "b.db"), str(tmp_path / "c*.xyz")],
        out,
        fractions=(1, 0, 0),
        cutoff=4.0,
    )
    assert summary.n_frames == 5 and summary.sources[2:] == [str(tmp_path / "c1.xyz"), str(tmp_path / "c2.xyz")]
    d = read_h5(out)
    np.testing.assert_array_equal(d["pbc"][:2], [[True, True, False], [False, False, False]])
    np.testing.assert_array_equal(d["cell"][1], np.zeros((3, 3)))
    assert d["energy"][1] == -14.0 and d["has_forces"][:2].all() and not d["has_virial"][:2].any()
    # export writes a lattice GPUMD accepts (vacuum vectors along open directions) and ase reads it
    xyz = tmp_path / "all.xyz"
    assert run_cli("export-xyz", out, "--split", "all", "-o", xyz) == 0
    back = ase.io.read(xyz, ":")
    np.testing.assert_array_equal(back[1].pbc, [False, False, False])
    assert back[1].cell.volume > 0 and back[0].cell.volume > 0
    np.testing.assert_array_equal(back[0].cell[:2], slab.cell[:2])
    np.testing.assert_array_equal(back[1].positions, water.positions)
    # GPUMD replicates every frame: the open directions need a vacuum gap wider than a cutoff
    assert vacuum_gaps(back[0])[2] >= VACUUM_MARGIN - 1e-9
    assert min(vacuum_gaps(back[1])) >= VACUUM_MARGIN - 1e-9


def vacuum_gaps(atoms: Atoms) -> list[float]:
    """Gap (Å) between the atoms and their periodic image along each cell direction."""
    cell = atoms.cell.array
    gaps = []
    for d in range(3):
        normal = np.cross(cell[(d + 1) % 3], cell[(d + 2) % 3])
        normal /= np.linalg.norm(normal)
        gaps.append(abs(cell[d] @ normal) - np.ptp(atoms.positions @ normal))
    return gaps


def test_gpumd_cell_keeps_periodic_vectors_and_widens_thin_vacuum():
    slab = fcc111("Cu", (2, 2, 3), a=3.6, vacuum=2.0)  # 4 Å of vacuum along c: too thin
    cell = gpumd_cell(slab.cell.array, np.array([True, True, False]), slab.positions)
    np.testing.assert_array_equal(cell[:2], slab.cell[:2])
    assert np.allclose(np.cross(cell[2], slab.cell[2]), 0) and np.linalg.det(cell) > 0
    assert abs(vacuum_gaps(Atoms(cell=cell, positions=slab.positions))[2] - VACUUM_MARGIN) < 1e-9
    periodic = bulk("Cu", "fcc", a=3.6, cubic=True)
    np.testing.assert_array_equal(
        gpumd_cell(periodic.cell.array, np.ones(3, bool), periodic.positions), periodic.cell.array
    )


def test_summary_lists_frames_species_labels_ranges(tmp_path, capsys):
    src = write_xyz(tmp_path / "in.xyz", labelled_bulk(4))
    assert run_cli("convert", src, "-o", tmp_path / "s.h5", "--types", "Cu", "Ni", "Pd", "--no-progress") == 0
    text = capsys.readouterr().out
    assert "4 frames, 32 atoms" in text and "species (atoms): Cu" in text
    assert "energy 4/4, forces 4/4, virial 4/4" in text and "energy per atom" in text
    assert "force components" in text and "without a neighbour inside 6 Å" in text
    assert read_h5(tmp_path / "s.h5")["species"] == ("Cu", "Ni", "Pd")


def test_isolated_atoms_are_a_counted_warning(tmp_path, capsys):
    far = Atoms("Cu2", positions=[[0, 0, 0], [20, 0, 0]])
    src = write_xyz(tmp_path / "in.xyz", [far] + labelled_bulk(1))
    assert run_cli("convert", src, "-o", tmp_path / "s.h5", "--no-progress", "--split", "1", "0", "0") == 0
    captured = capsys.readouterr()
    assert "2 atom(s) in 1 frame(s) without a neighbour inside 6 Å" in captured.out
    assert "in.xyz frame 0" in captured.err


# ---- bad inputs -------------------------------------------------------------------------------

LATTICE = 'Lattice="4 0 0 0 4 0 0 0 4"'
GOOD_FRAME = (
    f'2\n{LATTICE} Properties=species:S:1:pos:R:3:forces:R:3 energy=-1.0 pbc="T T T"\nCu 0 0 0 0 0 0\nCu 2 2 0 0 0 0\n'
)


def frame_text(comment: str, *rows: str) -> str:
    return f"{len(rows)}\n{comment}\n" + "".join(r + "\n" for r in rows)


PROPS = "Properties=species:S:1:pos:R:3:forces:R:3"
BAD_INPUTS = {
    # name: (file text, extra CLI args, expected message parts)
    "unreadable": ("this is not\nan xyz file\n", [], ["file", "cannot read"]),
    "empty": ("", [], ["file", "empty"]),
    "unknown species": (
        GOOD_FRAME + frame_text(f"{LATTICE} {PROPS} energy=1", "Cu 0 0 0 0 0 0", "Fe 2 2 0 0 0 0"),
        ["--types", "Cu", "Ni"],
        ["frame 1", "species", "Fe not among the types Cu Ni"],
    ),
    "nan position": (
        GOOD_FRAME + frame_text(f"{LATTICE} {PROPS} energy=1", "Cu 0 0 nan 0 0 0", "Cu 2 2 0 0 0 0"),
        [],
        ["frame 1", "positions", "non-finite"],
    ),
    "nan energy": (
        frame_text(f"{LATTICE} {PROPS} energy=nan", "Cu 0 0 0 0 0 0", "Cu 2 2 0 0 0 0"),
        [],
        ["frame 0", "energy", "non-finite"],
    ),
    "inf force": (
        frame_text(f"{LATTICE} {PROPS} energy=1", "Cu 0 0 0 0 0 0", "Cu 2 2 0 inf 0 0"),
        [],
        ["frame 0", "forces", "non-finite value inf at atom 1"],
    ),
    "nan virial": (
        frame_text(f'{LATTICE} {PROPS} energy=1 virial="1 0 0 0 nan 0 0 0 1"', "Cu 0 0 0 0 0 0", "Cu 2 2 0 0 0 0"),
        [],
        ["frame 0", "virial", "non-finite"],
    ),
    "virial wrong size": (
        frame_text(f'{LATTICE} {PROPS} energy=1 virial="1 0 0 1"', "Cu 0 0 0 0 0 0", "Cu 2 2 0 0 0 0"),
        [],
        ["frame 0", "virial", "9-long"],
    ),  # ase.io's own message
    "custom virial key wrong size": (
        frame_text(f'{LATTICE} {PROPS} energy=1 vir="1 0 0 1"', "Cu 0 0 0 0 0 0", "Cu 2 2 0 0 0 0"),
        ["--virial-key", "vir"],
        ["frame 0", "virial", "expected 9 values", "found shape (4,)"],
    ),
    "missing cell": (
        frame_text(f'{PROPS} energy=1 pbc="T T T"', "Cu 0 0 0 0 0 0", "Cu 2 2 0 0 0 0"),
        [],
        ["frame 0", "cell", "missing Lattice"],
    ),
    "zero volume": (
        frame_text(f'Lattice="4 0 0 4 0 0 0 0 4" {PROPS} energy=1 pbc="T T T"', "Cu 0 0 0 0 0 0", "Cu 2 2 0 0 0 0"),
        [],
        ["frame 0", "cell", "zero volume"],
    ),
    "negative volume": (
        frame_text(f'Lattice="4 0 0 0 4 0 0 0 -4" {PROPS} energy=1 pbc="T T T"', "Cu 0 0 0 0 0 0", "Cu 2 2 0 0 0 0"),
        [],
        ["frame 0", "cell", "zero or negative cell volume"],
    ),
    "forces wrong shape": (
        frame_text(f"{LATTICE} Properties=species:S:1:pos:R:3:f1:R:1 energy=1", "Cu 0 0 0 1", "Cu 2 2 0 1"),
        ["--forces-key", "f1"],
        ["frame 0", "forces", "expected shape (2, 3), found (2,)"],
    ),
    # an explicit key must not silently drop the other force column (GPUMD "force", ASE "forces")
    "forces key misses gpumd force": (
        frame_text(f"{LATTICE} Properties=species:S:1:pos:R:3:force:R:3 energy=1", "Cu 0 0 0 0 0 1", "Cu 2 2 0 0 0 -1"),
        ["--forces-key", "forces"],
        ["frame 0", "forces", "no 'forces' column", "'force' column", "--forces-key force"],
    ),
    "forces key misses ase forces": (
        frame_text(f"{LATTICE} {PROPS} energy=1", "Cu 0 0 0 0 0 1", "Cu 2 2 0 0 0 -1"),
        ["--forces-key", "force"],
        ["frame 0", "forces", "no 'force' column", "'forces' column"],
    ),
    "no atoms": (GOOD_FRAME + f"0\n{LATTICE} Properties=species:S:1:pos:R:3\n", [], ["frame 1", "atoms", "no atoms"]),
    "atoms too close": (
        frame_text(f"{LATTICE} {PROPS} energy=1", "Cu 0 0 0 0 0 0", "Cu 0.05 0 0 0 0 0"),
        [],
        ["frame 0", "positions", "atoms 0 and 1 are 0.05 Å apart (< 0.1 Å)"],
    ),
    "weight out of range": (
        frame_text(f"{LATTICE} {PROPS} energy=1 weight=0", "Cu 0 0 0 0 0 0", "Cu 2 2 0 0 0 0"),
        [],
        ["frame 0", "weight", "(0, 100]"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_fails_naming_file_frame_field_and_leaves_nothing(case, tmp_path, capsys):
    text, extra, expected = BAD_INPUTS[case]
    src = tmp_path / "bad.xyz"
    src.write_text(text)
    out = tmp_path / "out" / "structures.h5"
    assert run_cli("convert", src, "-o", out, "--no-progress", *extra) != 0
    err = capsys.readouterr().err
    assert err.startswith(f"error: {src}") and err.count("\n") == 1, err
    for part in expected:
        assert part in err, (part, err)
    assert not out.exists()
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


def test_missing_file_and_empty_glob(tmp_path, capsys):
    assert run_cli("convert", tmp_path / "nope.xyz", "-o", tmp_path / "s.h5") != 0
    assert "nope.xyz: file: no such file" in capsys.readouterr().err
    assert run_cli("convert", tmp_path / "none*.xyz", "-o", tmp_path / "s.h5") != 0
    assert "none*.xyz: file: no file matches" in capsys.readouterr().err
    assert not (tmp_path / "s.h5").exists()


def test_split_and_valid_test_files_are_exclusive(tmp_path, capsys):
    src = write_xyz(tmp_path / "in.xyz", labelled_bulk(2))
    with pytest.raises(SystemExit) as exit_:
        run_cli("convert", src, "-o", tmp_path / "s.h5", "--split", "0.5", "0.5", "0", "--test", src)
    assert exit_.value.code == 2
    assert "--split cannot be combined" in capsys.readouterr().err


# ---- split ------------------------------------------------------------------------------------


def test_split_is_reproducible_disjoint_and_complete(tmp_path):
    src = write_xyz(tmp_path / "in.xyz", labelled_bulk(20))
    a, b, c = (tmp_path / f"{n}.h5" for n in "abc")
    convert([src], a, fractions=(0.6, 0.2, 0.2), seed=7, cutoff=0)
    convert([src], b, fractions=(0.6, 0.2, 0.2), seed=7, cutoff=0)
    convert([src], c, fractions=(0.6, 0.2, 0.2), seed=8, cutoff=0)
    sa, sb, sc = (read_h5(p)["split"] for p in (a, b, c))
    for name in sa:
        np.testing.assert_array_equal(sa[name], sb[name])
    assert any(not np.array_equal(sa[n], sc[n]) for n in sa)
    assert [len(sa[n]) for n in ("train", "valid", "test")] == [12, 4, 4]
    together = np.concatenate(list(sa.values()))
    assert len(np.unique(together)) == len(together) == 20


def test_split_by_files(tmp_path):
    train = write_xyz(tmp_path / "train.xyz", labelled_bulk(3))
    valid = write_xyz(tmp_path / "valid.xyz", labelled_bulk(2, seed=1))
    test = write_xyz(tmp_path / "test.xyz", labelled_bulk(1, seed=2))
    out = tmp_path / "s.h5"
    assert run_cli("convert", train, "-o", out, "--valid", valid, "--test", test, "--no-progress") == 0
    split = read_h5(out)["split"]
    assert split["train"].tolist() == [0, 1, 2] and split["valid"].tolist() == [3, 4]
    assert split["test"].tolist() == [5]
    with h5py.File(out) as h5:
        assert h5["split"].attrs["mode"] == "files"


def test_tiny_dataset_still_gets_valid_and_test_frames():
    split = split_by_fractions(5, (0.8, 0.1, 0.1), seed=0)
    assert [len(split[n]) for n in ("train", "valid", "test")] == [3, 1, 1]


def test_a_larger_validation_fraction_keeps_the_test_frames():
    # the test frames come first in the seed's permutation, so a user (or a benchmark) who
    # enlarges the validation split compares models on the same held-out frames, and every
    # frame the validation split gains comes out of the training split
    small, large = (split_by_fractions(120, f, seed=3) for f in ((0.8, 0.1, 0.1), (0.7, 0.2, 0.1)))
    assert np.array_equal(small["test"], large["test"])
    assert [len(large[n]) for n in ("train", "valid", "test")] == [84, 24, 12]
    assert set(small["valid"]) < set(large["valid"]) and set(large["train"]) < set(small["train"])


# ---- determinism and round trip ----------------------------------------------------------------


def h5_content(path) -> dict:
    """Every dataset and attribute of an HDF5 file, by name."""
    content = {}
    with h5py.File(path) as h5:

        def visit(name, obj):
            content[name + "@attrs"] = {k: np.asarray(v).tolist() for k, v in obj.attrs.items()}
            if isinstance(obj, h5py.Dataset):
                content[name] = obj[()].tolist()

        h5.visititems(visit)
        content["@root"] = {k: np.asarray(v).tolist() for k, v in h5.attrs.items()}
    return content


def test_same_inputs_and_seed_give_the_same_file_content(tmp_path):
    src = write_xyz(tmp_path / "in.xyz", labelled_bulk(6))
    convert([src], tmp_path / "a.h5", seed=3)
    convert([src], tmp_path / "b.h5", seed=3)
    assert h5_content(tmp_path / "a.h5") == h5_content(tmp_path / "b.h5")
    with StructureFile(tmp_path / "a.h5") as h5:
        prov = h5.provenance()
    import hashlib

    assert prov.source_sha256 == [hashlib.sha256(Path(src).read_bytes()).hexdigest()]
    assert prov.converter.startswith("nepcore ")


def test_round_trip_convert_export_convert_and_agreement_with_ase(tmp_path):
    frames = labelled_bulk(10)
    frames[4].info["weight"] = 3.0
    src = write_xyz(tmp_path / "in.xyz", frames)
    first, second, xyz = tmp_path / "first.h5", tmp_path / "second.h5", tmp_path / "all.xyz"
    assert run_cli("convert", src, "-o", first, "--seed", "5", "--no-progress") == 0
    assert run_cli("export-xyz", first, "--split", "all", "-o", xyz) == 0
    assert run_cli("convert", xyz, "-o", second, "--seed", "5", "--no-progress") == 0
    a, b = read_h5(first), read_h5(second)
    for key in PER_ATOM + PER_FRAME + ("species",):
        np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]), err_msg=key)
    for name in a["split"]:
        np.testing.assert_array_equal(a["split"][name], b["split"][name])
    # the labels are what ase.io reads from the input
    for f, atoms in enumerate(ase.io.read(src, ":")):
        rows = slice(a["offsets"][f], a["offsets"][f + 1])
        assert a["energy"][f] == atoms.get_potential_energy()
        np.testing.assert_array_equal(a["forces"][rows], atoms.get_forces())
        np.testing.assert_array_equal(a["positions"][rows], atoms.positions)
        virial = -voigt_6_to_full_3x3_stress(atoms.get_stress()) * atoms.get_volume()
        np.testing.assert_allclose(a["virial"][f], virial, rtol=1e-13, atol=1e-13)
    assert a["weight"][4] == 3.0


def test_export_one_split_is_gpumd_ready(tmp_path):
    src = write_xyz(tmp_path / "in.xyz", labelled_bulk(10))
    out, xyz = tmp_path / "s.h5", tmp_path / "train.xyz"
    convert([src], out, seed=1)
    assert run_cli("export-xyz", out, "--split", "train", "-o", xyz) == 0
    lines = xyz.read_text().splitlines()
    comment = lines[1]
    for key in (
        'Lattice="',
        "energy=",
        'virial="',
        "weight=1.0",
        "config_type=bulk_",
        'pbc="T T T"',
        "Properties=species:S:1:pos:R:3:force:R:3",
    ):
        assert key in comment, key
    assert len(comment.split('virial="')[1].split('"')[0].split()) == 9
    back = ase.io.read(xyz, ":")
    train = read_h5(out)["split"]["train"]
    assert len(back) == len(train) == 8
    assert "force" in back[0].arrays and back[0].get_potential_energy() is not None


def test_export_rejects_a_file_that_is_not_a_dataset(tmp_path, capsys):
    bogus = tmp_path / "x.h5"
    bogus.write_text("not hdf5")
    assert run_cli("export-xyz", bogus, "-o", tmp_path / "t.xyz") == 1
    assert "cannot open as HDF5" in capsys.readouterr().err
    assert not (tmp_path / "t.xyz").exists()


# ---- reference data ------------------------------------------------------------------------------


def test_teacher_labelled_small_set_matches_ase(shared_data, tmp_path):
    src = shared_data / "teacher-labelled" / "PdCuNi_small.xyz"
    out = tmp_path / "small.h5"
    summary = convert([str(src)], out, types=("Pd", "Cu", "Ni"), seed=0, progress=False)
    assert summary.n_frames == 120 and summary.n_atoms == 8010
    assert summary.virial_stress_disagreements == 0
    d = read_h5(out)
    frames = ase.io.read(src, ":")
    energies = np.array([a.get_potential_energy() for a in frames])
    np.testing.assert_array_equal(d["energy"], energies)
    np.testing.assert_array_equal(d["forces"], np.concatenate([a.get_forces() for a in frames]))
    virials = np.array([a.info["virial"].T for a in frames])  # ASE read it in Fortran order
    np.testing.assert_array_equal(d["virial"], virials)
    assert set(d["config_type"]) >= {"rattle", "strain", "md_300K"}
