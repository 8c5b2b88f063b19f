"""The cases of each area of issue 37, one module each (its ``CASES``), built on the setups of the tests that
cover the area (named in each module's docstring)."""
