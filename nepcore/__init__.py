"""nepcore: train NEP4 machine-learned interatomic potentials with PyTorch gradients.

Writes ``nep.txt`` files that GPUMD, NEP_CPU and calorine load and reproduce.
Heavy modules (torch) are imported lazily by the submodules that need them.
"""

from nepcore._version import __version__
