"""The launch step: typed launch requests (request.py), the step that prepares and runs a job (step.py), the
body every launch component calls (component.py), and a Python function as a job's program (function.py)."""
