"""Data preparation."""
