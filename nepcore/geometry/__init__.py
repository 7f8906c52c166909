"""Geometry: neighbour search, pair lists and cells."""
