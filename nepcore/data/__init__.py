"""Data: reading raw structures, checks, the HDF5 dataset, conversion, neighbour frames, the streaming store,
and the one ase.Atoms -> Batch path (atoms_batch)."""
