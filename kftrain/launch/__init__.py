"""The launch step: typed launch requests (request.py), the step that prepares and runs a job (step.py), and the
body every launch component calls (component.py)."""
