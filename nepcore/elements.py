"""Element symbols (H..Pu, the range GPUMD and NEP_CPU accept) and covalent radii.

The radii (Å) are GPUMD's ``COVALENT_RADIUS`` table (nep_utilities.cuh), used by the
typewise ZBL cutoff: r_out(I, J) = min(f * (Rcov_I + Rcov_J), r_out).
"""

from __future__ import annotations

#: Chemical symbols indexed by atomic number minus one (H = index 0, Pu = index 93).
SYMBOLS: tuple[str, ...] = (
    "H", "He", "Li", "Be", "B", "C", "N", "O", "F", "Ne",
    "Na", "Mg", "Al", "Si", "P", "S", "Cl", "Ar", "K", "Ca",
    "Sc", "Ti", "V", "Cr", "Mn", "Fe", "Co", "Ni", "Cu", "Zn",
    "Ga", "Ge", "As", "Se", "Br", "Kr", "Rb", "Sr", "Y", "Zr",
    "Nb", "Mo", "Tc", "Ru", "Rh", "Pd", "Ag", "Cd", "In", "Sn",
    "Sb", "Te", "I", "Xe", "Cs", "Ba", "La", "Ce", "Pr", "Nd",
    "Pm", "Sm", "Eu", "Gd", "Tb", "Dy", "Ho", "Er", "Tm", "Yb",
    "Lu", "Hf", "Ta", "W", "Re", "Os", "Ir", "Pt", "Au", "Hg",
    "Tl", "Pb", "Bi", "Po", "At", "Rn", "Fr", "Ra", "Ac", "Th",
    "Pa", "U", "Np", "Pu",
)

#: Covalent radius in Å per element, in the order of ``SYMBOLS``.
COVALENT_RADIUS: tuple[float, ...] = (
    0.426667, 0.613333, 1.6, 1.25333, 1.02667, 1, 0.946667, 0.84,
    0.853333, 0.893333, 1.86667, 1.66667, 1.50667, 1.38667, 1.46667, 1.36,
    1.32, 1.28, 2.34667, 2.05333, 1.77333, 1.62667, 1.61333, 1.46667,
    1.42667, 1.38667, 1.33333, 1.32, 1.34667, 1.45333, 1.49333, 1.45333,
    1.53333, 1.46667, 1.52, 1.56, 2.52, 2.22667, 1.96, 1.85333,
    1.76, 1.65333, 1.53333, 1.50667, 1.50667, 1.44, 1.53333, 1.64,
    1.70667, 1.68, 1.68, 1.64, 1.76, 1.74667, 2.78667, 2.34667,
    2.16, 1.96, 2.10667, 2.09333, 2.08, 2.06667, 2.01333, 2.02667,
    2.01333, 2, 1.98667, 1.98667, 1.97333, 2.04, 1.94667, 1.82667,
    1.74667, 1.64, 1.57333, 1.54667, 1.48, 1.49333, 1.50667, 1.76,
    1.73333, 1.73333, 1.81333, 1.74667, 1.84, 1.89333, 2.68, 2.41333,
    2.22667, 2.10667, 2.02667, 2.04, 2.05333, 2.06667,
)


def atomic_number(symbol: str) -> int:
    """Atomic number Z of ``symbol``; raises ValueError for symbols outside H..Pu."""
    try:
        return SYMBOLS.index(symbol) + 1
    except ValueError:
        raise ValueError(
            f"unknown element symbol {symbol!r}: NEP supports H to Pu (Z = 1..94)"
        ) from None
