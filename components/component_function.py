"""Makes a KFP component of a function written as source text from an input table (:mod:`kftrain.inputs`).

KFP embeds the text ``inspect.getsource`` returns for a component's function
(kubeflow/pipelines@2.17.0:sdk/python/kfp/dsl/component_factory.py:220-221) and its executor maps the step's inputs
onto the parameters that text defines (sdk/python/kfp/dsl/executor.py:351-359, ``inspect.getfullargspec``): the
signature must be in the text, so the function is written, then compiled and decorated.
Module scope imports only kfp, the standard library and kftrain's input tables.
"""

from __future__ import annotations

import linecache
import sys
from typing import Any, NamedTuple, Optional

from kfp import dsl

from kftrain.inputs import Output, function_source, parameters, step_body


def define(module: str, name: str, source: str, **options: Any) -> Any:
    """The component ``dsl.component(**options)`` makes of the function ``name`` that ``source`` defines, as if
    defined in ``module`` (so ``kftrain compile`` finds it there)."""
    filename = f"<kftrain component {module}.{name}>"
    # inspect.getsource (which KFP uses to embed the function) reads generated code through linecache.
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace: dict[str, Any] = {"dsl": dsl, "NamedTuple": NamedTuple, "Optional": Optional, "__name__": module}
    exec(compile(source, filename, "exec", dont_inherit=True), namespace)  # no "annotations" future: KFP reads types
    return dsl.component(**options)(namespace[name])


def step_component(module: str, table: type, step: str, *, outputs: tuple[Output, ...] = (), image: str) -> Any:
    """The component defined in ``module`` (``components/<category>/<name>/component.py``): named as its folder,
    described by the module's docstring, its inputs ``table``'s, its body one call of ``step`` (``module:function``)
    with every input by name, returning ``outputs``."""
    name = module.rsplit(".", 2)[-2]
    summary, _, details = (sys.modules[module].__doc__ or name).partition("\n\n")
    params = parameters(table)
    body = step_body(step, params, returns=bool(outputs))
    source = function_source(name, summary.strip(), details, params, body, outputs=outputs)
    return define(module, name, source, base_image=image, install_kfp_package=False)
