"""Evaluation: metrics, prediction, plots, export."""
