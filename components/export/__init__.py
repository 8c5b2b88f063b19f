"""Model export components."""
