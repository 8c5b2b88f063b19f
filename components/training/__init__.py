"""Training launch components."""
