"""Data: reading raw structures, checks, the HDF5 dataset, conversion, neighbour frames, the streaming store."""
