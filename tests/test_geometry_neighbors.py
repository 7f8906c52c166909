"""nepcore.geometry.neighbors against ASE's primitive_neighbor_list and a brute-force image enumeration.

The definition (docs/model.md#neighbours-and-cutoffs): every periodic image along periodic directions with
``|r_j - r_i + shift @ cell| < rc(type_i, type_j)`` (strict), images of i itself included,
only the zero-shift self pair excluded; shifts refer to the positions as given.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from ase.build import bulk
from ase.neighborlist import primitive_neighbor_list

import nepcore.geometry.neighbors as nb
from nepcore.geometry.neighbors import PairList, neighbor_pairs, split_angular

Triples = dict[tuple[int, int, int, int, int], float]


def as_dict(pairs: PairList, dist: np.ndarray) -> Triples:
    """{(i, j, s0, s1, s2): distance}; also asserts the triples are unique."""
    keys = [(int(a), int(b), *map(int, s)) for a, b, s in zip(pairs.i, pairs.j, pairs.shift)]
    assert len(set(keys)) == len(keys), "duplicate (i, j, shift) triples"
    return dict(zip(keys, dist.tolist()))


def brute_force(positions, cell, pbc, types, pair_cutoff) -> Triples:
    """Every image shift that could matter, enumerated explicitly (small systems only).

    |n_d| <= |sum_d n_d a_d| / h_d, with h_d the distance of a_d from the span of the other
    periodic vectors, and |sum n_d a_d| <= rc + (largest |r_j - r_i|).
    """
    positions, cell = np.asarray(positions, float), np.asarray(cell, float)
    types, pair_cutoff = np.asarray(types), np.asarray(pair_cutoff, float)
    rc = pair_cutoff.max()
    diameter = np.linalg.norm(positions.max(0) - positions.min(0)) if len(positions) else 0.0
    periodic = [d for d in range(3) if pbc[d]]
    ranges = [[0]] * 3
    for d in periodic:
        others = cell[[e for e in periodic if e != d]]
        along = cell[d]
        if len(others):
            coef = np.linalg.lstsq(others.T, along, rcond=None)[0]
            along = along - others.T @ coef
        n_max = int(np.ceil((rc + diameter) / np.linalg.norm(along))) + 1
        ranges[d] = list(range(-n_max, n_max + 1))
    shifts = np.array(list(itertools.product(*ranges)), dtype=float)
    out: Triples = {}
    for i in range(len(positions)):
        vec = positions[None, :, :] - positions[i] + (shifts @ cell)[:, None, :]  # (S, n, 3)
        dist = np.linalg.norm(vec, axis=-1)
        cutoff = pair_cutoff[types[i], types][None, :]
        for s, j in zip(*np.nonzero(dist < cutoff)):
            if j == i and not shifts[s].any():
                continue
            out[(i, int(j), *map(int, shifts[s]))] = float(dist[s, j])
    return out


def ase_reference(positions, cell, pbc, types, pair_cutoff) -> Triples:
    """ASE's list at the largest cutoff, then the per-type-pair strict filter."""
    pair_cutoff = np.asarray(pair_cutoff, float)
    i, j, shift, dist = primitive_neighbor_list("ijSd", pbc, cell, positions, pair_cutoff.max())
    keep = dist < pair_cutoff[np.asarray(types)[i], np.asarray(types)[j]]
    pairs = PairList(i[keep], j[keep], shift[keep])
    return as_dict(pairs, dist[keep])


def check(positions, cell, pbc, types, pair_cutoff, use_ase: bool = True) -> Triples:
    """Run neighbor_pairs and check it against the references and the API contract."""
    positions = np.asarray(positions, float)
    cell = np.asarray(cell, float)
    pairs, dist = neighbor_pairs(positions, cell, pbc, types, pair_cutoff)
    # contract: int32 fields, sorted by i then j, distances from the positions as given
    assert pairs.i.dtype == pairs.j.dtype == pairs.shift.dtype == np.int32
    assert pairs.shift.shape == (len(pairs), 3) and dist.shape == (len(pairs),)
    assert dist.dtype == np.float64
    key = pairs.i.astype(np.int64) * max(len(positions), 1) + pairs.j
    assert np.all(np.diff(key) >= 0), "pairs not sorted by (i, j)"
    vectors = positions[pairs.j] - positions[pairs.i] + pairs.shift @ cell
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), dist, rtol=0, atol=1e-12)
    assert not np.any((pairs.i == pairs.j) & ~pairs.shift.any(axis=1)), "self pair"
    ours = as_dict(pairs, dist)
    references = [brute_force(positions, cell, pbc, types, pair_cutoff)]
    if use_ase:
        references.append(ase_reference(positions, cell, pbc, types, pair_cutoff))
    for ref in references:
        assert_same(ours, ref)
    return ours


def assert_same(ours: Triples, ref: Triples) -> None:
    """Same (i, j, shift) triples, distances equal to rounding."""
    assert ours.keys() == ref.keys(), (len(ours), len(ref), set(ours) ^ set(ref))
    keys = list(ref)
    np.testing.assert_allclose([ours[k] for k in keys], [ref[k] for k in keys], rtol=0, atol=1e-10)


def random_cell(rng: np.random.Generator) -> np.ndarray:
    """A well-conditioned but strongly skewed triclinic cell, rows = vectors, Å."""
    while True:
        cell = np.diag(rng.uniform(4.0, 9.0, 3)) + np.triu(rng.uniform(-4.0, 4.0, (3, 3)), 1)
        cell = cell[rng.permutation(3)]  # not upper-triangular any more
        if abs(np.linalg.det(cell)) > 40.0:
            return cell


@pytest.mark.parametrize("seed", range(6))
def test_random_triclinic_with_atoms_outside_the_cell(seed):
    rng = np.random.default_rng(seed)
    cell = random_cell(rng)
    n = int(rng.integers(2, 14))
    frac = rng.uniform(-1.5, 2.5, (n, 3))  # negative and > 1 fractional coordinates
    check(frac @ cell, cell, (True, True, True), np.zeros(n, int), [[4.5]])


@pytest.mark.parametrize("seed", range(4))
def test_thin_skewed_cells_need_several_image_layers(seed):
    rng = np.random.default_rng(100 + seed)
    cell = random_cell(rng) * 0.35  # thicknesses ~1-3 Å against rc 4 Å
    frac = rng.uniform(-1.0, 2.0, (3, 3))
    pairs = check(frac @ cell, cell, (True,) * 3, [0, 1, 1], [[4.0, 3.0], [3.0, 3.5]])
    assert max(max(map(abs, k[2:])) for k in pairs) >= 2


def test_fcc_primitive_cell_much_smaller_than_cutoff():
    atoms = bulk("Cu", "fcc", a=3.615)  # one atom, 2.556 Å nearest neighbours
    pairs = check(atoms.positions, atoms.cell.array, (True,) * 3, [0], [[6.0]])
    assert len(pairs) == 78  # 12 + 6 + 24 + 12 + 24 shells below 6 Å, all self images
    big = bulk("Cu", "fcc", a=3.615, cubic=True).repeat(3)
    pairs_big, _ = neighbor_pairs(big.positions, big.cell.array, (True,) * 3, np.zeros(108, int), [[6.0]])
    assert np.all(pairs_big.counts(108) == 78)


def test_one_atom_cell_and_strict_cutoff():
    cell = np.eye(3) * 3.0
    assert check([[0.0, 0.0, 0.0]], cell, (True,) * 3, [0], [[3.0]]) == {}  # exactly rc: out
    pairs = check([[0.0, 0.0, 0.0]], cell, (True,) * 3, [0], [[3.0 + 1e-9]])
    assert len(pairs) == 6 and set(pairs.values()) == {3.0}
    assert len(check([[0.3, 0.2, 0.1]], cell, (True,) * 3, [0], [[4.3]])) == 18


def test_exact_cutoff_pairs_excluded_in_a_supercell():
    positions = np.array([[0.0, 0.0, 0.0], [2.5, 0.0, 0.0], [0.0, 1.5, 0.0]])
    pairs = check(positions, np.eye(3) * 10.0, (True,) * 3, [0, 0, 0], [[2.5]])
    assert set(pairs) == {(0, 2, 0, 0, 0), (2, 0, 0, 0, 0)}


@pytest.mark.parametrize("c_vector", [(0.0, 0.0, 0.0), (0.0, 0.0, 15.0), (3.0, -2.0, 8.0)])
def test_slab(c_vector):
    rng = np.random.default_rng(1)
    cell = np.array([[3.1, 0.0, 0.0], [1.2, 2.9, 0.0], c_vector])
    positions = np.column_stack([rng.uniform(-2, 5, 10), rng.uniform(-2, 5, 10), rng.uniform(0, 7, 10)])
    pbc = (True, True, False)
    ours = check(positions, cell, pbc, np.zeros(10, int), [[5.0]], use_ase=np.any(c_vector))
    assert all(k[4] == 0 for k in ours)  # never a shift along the open direction
    assert any(k[0] == k[1] for k in ours)  # self images in a cell thinner than rc


def test_open_middle_direction_and_wire():
    rng = np.random.default_rng(2)
    positions = rng.uniform(-3, 6, (9, 3))
    cell = np.array([[2.7, 0.3, -0.4], [0.0, 0.0, 0.0], [0.5, 0.2, 4.1]])
    check(positions, cell, (True, False, True), np.zeros(9, int), [[4.0]], use_ase=False)
    wire = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.3, 0.2, 2.2]])
    ours = check(positions, wire, (False, False, True), np.zeros(9, int), [[4.0]], use_ase=False)
    assert all(k[2] == k[3] == 0 for k in ours) and any(k[4] != 0 for k in ours)


def test_cluster_with_zero_cell_and_far_apart_atoms():
    rng = np.random.default_rng(3)
    positions = rng.uniform(-4, 4, (15, 3))
    check(positions, np.zeros((3, 3)), (False,) * 3, np.zeros(15, int), [[3.5]], use_ase=False)
    # sparse: the bin grid must not scale with the extent (1e6 Å apart along a diagonal)
    sparse = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1e6, 1e6, 1e6], [1e6, 1e6, 1e6 + 2.0]])
    ours = check(sparse, np.zeros((3, 3)), (False,) * 3, np.zeros(4, int), [[3.0]], use_ase=False)
    assert set(ours) == {(0, 1, 0, 0, 0), (1, 0, 0, 0, 0), (2, 3, 0, 0, 0), (3, 2, 0, 0, 0)}


def test_per_type_pair_cutoffs_and_split_angular():
    rng = np.random.default_rng(4)
    cell = random_cell(rng)
    n = 12
    positions = rng.uniform(0, 1, (n, 3)) @ cell
    types = rng.integers(0, 2, n)
    radial = np.array([[3.0, 4.5], [4.5, 6.0]])
    check(positions, cell, (True,) * 3, types, radial)
    pairs, dist = neighbor_pairs(positions, cell, (True,) * 3, types, radial)
    angular = split_angular(pairs, dist, types, radial - 1.0)
    expected = as_dict(*neighbor_pairs(positions, cell, (True,) * 3, types, radial - 1.0))
    assert set(as_dict(angular, np.zeros(len(angular)))) == set(expected)


def test_empty_and_pairless_structures():
    for positions in (np.zeros((0, 3)), np.array([[0.0, 0.0, 0.0]])):
        n = len(positions)
        pairs, dist = neighbor_pairs(positions, np.eye(3) * 20.0, (False,) * 3, np.zeros(n, int), [[5.0]])
        assert len(pairs) == 0 and dist.shape == (0,) and pairs.shift.shape == (0, 3)
        assert pairs.i.dtype == pairs.j.dtype == pairs.shift.dtype == np.int32
    pairs, _ = neighbor_pairs(np.zeros((0, 3)), np.eye(3) * 20.0, (True,) * 3, np.zeros(0, int), [[5.0]])
    assert len(pairs) == 0
    check([[0.0, 0.0, 0.0], [9.0, 9.0, 9.0]], np.eye(3) * 20.0, (True,) * 3, [0, 0], [[5.0]])


def test_chunked_search_matches_a_single_chunk(monkeypatch):
    atoms = bulk("Cu", "fcc", a=3.615, cubic=True).repeat((3, 3, 2))
    atoms.rattle(0.05, seed=5)
    args = (atoms.positions, atoms.cell.array, (True,) * 3, np.zeros(len(atoms), int), [[5.5]])
    whole = neighbor_pairs(*args)
    monkeypatch.setattr(nb, "_CHUNK_CANDIDATES", 997)  # many chunks, some of a single atom
    parts = neighbor_pairs(*args)
    for name in ("i", "j", "shift"):
        np.testing.assert_array_equal(getattr(whole[0], name), getattr(parts[0], name))
    np.testing.assert_array_equal(whole[1], parts[1])
    assert_same(as_dict(*whole), ase_reference(*args))


def test_invalid_input():
    flat = np.array([[1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    with pytest.raises(ValueError, match="degenerate"):
        neighbor_pairs(np.zeros((2, 3)), flat, (True,) * 3, [0, 0], [[3.0]])
    # the same vectors are fine when the parallel one is along an open direction
    positions = np.array([[0.0, 0.0, 0.0], [0.5, 0.0, 0.0]])
    check(positions, flat, (True, False, True), [0, 0], [[3.0]], use_ase=False)
    with pytest.raises(ValueError, match="types"):
        neighbor_pairs(np.zeros((2, 3)), np.eye(3), (True,) * 3, [0], [[3.0]])
    with pytest.raises(ValueError, match="finite"):
        neighbor_pairs(np.full((1, 3), np.nan), np.eye(3), (True,) * 3, [0], [[3.0]])


def test_every_pair_has_its_reverse_and_a_missing_one_is_minus_one():
    """PairList.reverse: an involution mapping (i, j, S) to (j, i, −S) on a built list (small
    cell, so i–i image pairs and several shifts per pair occur); −1 where the reverse is absent."""
    rng = np.random.default_rng(7)
    cell = np.array([[3.1, 0.0, 0.0], [0.6, 3.3, 0.0], [0.2, 0.4, 3.6]])
    positions = rng.uniform(0, 1, (5, 3)) @ cell
    types = rng.integers(0, 2, 5)
    pairs, _ = neighbor_pairs(positions, cell, (True,) * 3, types, [[5.0, 5.5], [5.5, 6.0]])
    reverse = pairs.reverse()
    assert len(pairs) > 20 and np.any(pairs.i == pairs.j)
    assert np.all(reverse >= 0) and np.array_equal(reverse[reverse], np.arange(len(pairs)))
    np.testing.assert_array_equal(pairs.i[reverse], pairs.j)
    np.testing.assert_array_equal(pairs.j[reverse], pairs.i)
    np.testing.assert_array_equal(pairs.shift[reverse], -pairs.shift)
    lone = pairs.select(np.arange(len(pairs)) != 0).reverse()  # pair 0 removed: its reverse is alone
    assert np.count_nonzero(lone < 0) == 1 and lone[reverse[0] - 1] == -1
    assert PairList(np.zeros(0, int), np.zeros(0, int), np.zeros((0, 3), int)).reverse().shape == (0,)
