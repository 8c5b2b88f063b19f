"""User pipeline modules as the command-line tests write them: the smallest a user writes, whose import-time side
effects the tests add before or after it."""

# A module with one lightweight component and the pipeline ``mine`` that runs it: ``mine.py:mine`` on the command line.
ONE_STEP_PIPELINE = """
from kfp import dsl

@dsl.component(base_image="python:3.11")
def one() -> int:
    return 1

@dsl.pipeline(name="mine")
def mine() -> None:
    one()
"""
