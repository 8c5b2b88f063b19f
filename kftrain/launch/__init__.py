"""The launch step: the one table of launch inputs (inputs.py), the body every launch component calls
(component.py), the step that prepares and runs a job (step.py), the run and task it belongs to (identity.py),
what the replicas print and report, kept (observe.py), and a Python function as a job's program (function.py)."""
