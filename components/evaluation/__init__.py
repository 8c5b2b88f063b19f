"""Evaluation components."""
