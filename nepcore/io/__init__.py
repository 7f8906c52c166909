"""File formats: nep.txt, nep.in and GPUMD's *.out files."""
