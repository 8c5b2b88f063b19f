"""The hostile and careless cases of issue 37 ("hardening, fourth round"), re-run as a program and a slow-tier test.

Each case (:class:`~testbed.hostile.case.Case`) is a self-contained setup and one call into kftrain, with the class
its outcome must end in; the cases live in :mod:`testbed.hostile.areas`, one module per area, and
:mod:`testbed.hostile.runner` runs each in a process of its own. ``.venv/bin/python -m testbed.hostile [--area A]
[--case NAME]`` prints them as a Markdown table (exit 1 when one is off); tests/hardening/test_hostile_cases.py
runs the same table, one test per case.
"""
