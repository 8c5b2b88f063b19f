"""The hostile and careless cases of issue 37 ("hardening, fourth round"), re-run as a program and a slow-tier test.

Each case (:class:`~testbed.hostile.case.Case`) is a small self-contained setup in a folder of its own (files, env
variables, servers it starts) and one call into kftrain (a ``kftrain`` command line, a launch component, an
initializer, a store lookup...), with the class its outcome must end in ("clear error" or "fine") and the surface it
targets. The cases live in :mod:`testbed.hostile.areas`, one module per area; :mod:`testbed.hostile.runner` runs each
in a process of its own under a deadline and classifies what it observes (:mod:`testbed.hostile.classes`)::

    .venv/bin/python -m testbed.hostile                    # every case, a Markdown table, exit 1 when one is off
    .venv/bin/python -m testbed.hostile --area runtimes    # one area (repeatable); --case NAME (a substring)

``tests/hardening/test_hostile_cases.py`` runs the same table, one test per case (slow tier).
"""
