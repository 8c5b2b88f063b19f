"""Evaluate a CRD's CEL validation rules within the API server's cost limits, and within seconds here.

The API server cancels a rule costing over :data:`PER_CALL_LIMIT` (:data:`CALL_LIMIT`) and stops an object whose
rules exceed :data:`RUNTIME_COST_BUDGET` (:data:`OUT_OF_BUDGET`), running no further rule
(k8s.io/apiextensions-apiserver@v0.36.3:pkg/apiserver/schema/cel/validation.go, validateExpressions). cel-python
cannot count cel-go's cost, so the evaluator charges each step what cel-go charges (the constants below); it never
charges less (held rule by rule in tests/job/manifest/test_cel_budget.py), so it refuses wherever the server does,
at the same rule or an earlier one. ``messageExpression`` and the CRD's estimated cost are not evaluated. Time is
bounded apart: :data:`LOCAL_STEP_LIMIT` steps, else :data:`TOO_COSTLY_HERE` (cel-python is orders of magnitude
slower than cel-go), never accepted unchecked.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# k8s.io/apiserver@v0.36.3:pkg/apis/cel/config.go
PER_CALL_LIMIT = 1_000_000  # PerCallLimit: one evaluation of one rule
RUNTIME_COST_BUDGET = 10_000_000  # RuntimeCELCostBudget: every rule of one custom resource
# kftrain's own: about 2 s of cel-python on this project's machines (see the module's docstring).
LOCAL_STEP_LIMIT = 200_000

# The API server's messages (k8s.io/apiextensions-apiserver@v0.36.3:pkg/apiserver/schema/cel/validation.go).
OUT_OF_BUDGET = "validation failed due to running out of cost budget, no further validation rules will be run"
CALL_LIMIT = (
    "'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost "
    "exceeds limit for rule: {rule}"
)
TOO_COSTLY_HERE = (
    f"validation stopped: the CRD's validation rules need more than the {LOCAL_STEP_LIMIT} steps kftrain evaluates "
    "for one object (a list of tens of thousands of items?); no further validation rules were run"
)

# github.com/google/cel-go@v0.26.0:common/cost.go, interpreter/runtimecost.go, with the API server's options
# (k8s.io/apiserver@v0.36.3:pkg/cel/environment/base.go: OptOptimize makes a literal list or map a free constant,
# PresenceTestHasCost(false) makes has() free). Charged per step: a variable or field selection 1 (2 on a value that
# is not a variable's field), a literal 0, a function call 1, comparisons, ``in``, ``+`` of strings, startsWith,
# contains and matches by size as cel-go does; ``||``/``&&`` short-circuit as cel-go's do. Where it differs it charges
# more: ``x in list`` of an open type (cel-go charges 1), a conditional choosing a selection, a non-constant index.
_SELECT_AND_IDENT = 1
_LIST_CREATE = 10
_MAP_CREATE = 30
_STRUCT_CREATE = 40
_STRING_TRAVERSAL = 0.1
_REGEX_LENGTH = 0.25
# The parse tree of a literal (cel-python's grammar, cel.lark): a node of _PASS_THROUGH with one child holds no
# operator.
_PASS_THROUGH = frozenset(
    {"expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication", "unary", "member", "primary"}
)
_LITERAL_PARTS = _PASS_THROUGH | {"list_lit", "map_lit", "exprlist", "mapinits", "literal"}
# What each element costs beside its predicate in cel-go's expansion of the macro (parser/macro.go), always and when
# the predicate is true: ``all``'s loop condition @not_strictly_false(__result__) and step __result__ && p (3);
# ``exists``'s @not_strictly_false(!__result__) and __result__ || p (4); exists_one's p ? __result__ + 1 : __result__
# (the addition and the read, when true); map's __result__ + [f] (12); filter's p ? __result__ + [x] : __result__ (13
# when true; the false branch reads the accumulator as a free conditional attribute). The accumulator's empty list
# is a constant.
_PER_ELEMENT = {"all": (3, 0), "exists": (4, 0), "exists_one": (0, 2), "map": (12, 0), "filter": (0, 13)}
# What cel-go's loop condition costs when it ends an all/exists early (the element after the deciding one).
_LOOP_CONDITION = {"all": 2, "exists": 3}
# The accumulator read for the result (exists_one also compares it with 1).
_RESULT = {"all": 1, "exists": 1, "exists_one": 2, "map": 1, "filter": 1}


class RuleCompileError(Exception):
    """A rule cel-python cannot parse (the API server refuses such a CRD when it is created)."""


class Stop(Exception):
    """Stop evaluating the object's rules: ``message`` is the refusal, at ``where`` (the path of the rule's node,
    which the caller walking the object fills in)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.where: tuple[str, ...] = ()


class _OverCallLimit(Exception):
    """Raised inside an evaluation past :data:`PER_CALL_LIMIT` (not a ValueError, TypeError...: cel-python turns
    those into CEL errors)."""


class _OverSteps(Exception):
    """Raised inside an evaluation past :data:`LOCAL_STEP_LIMIT`."""


class _Decided(Exception):
    """Ends an ``all``/``exists`` at the element after the deciding one, as cel-go's loop condition does (cel-python
    would evaluate every element); ``value`` is the macro's result."""

    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value


@dataclass
class Budget:
    """What is left for one object's rules: the server's cost budget, and the steps evaluated here."""

    cost: int = RUNTIME_COST_BUDGET
    steps: int = LOCAL_STEP_LIMIT


class _Meter:
    """The cost of the evaluation under way, and the object's steps left."""

    def __init__(self) -> None:
        self.cost = 0
        self.budget = Budget()

    def charge(self, units: int) -> None:
        self.cost += units
        if self.cost > PER_CALL_LIMIT:
            raise _OverCallLimit

    def step(self) -> None:
        self.budget.steps -= 1
        if self.budget.steps < 0:
            raise _OverSteps


def _size(value: Any) -> int:
    """cel-go's actualSize: a string's, bytes', list's or map's size, else 1."""
    return len(value) if isinstance(value, (str, bytes, list, dict)) else 1


def _traversal(size: int) -> int:
    return math.ceil(size * _STRING_TRAVERSAL)


def _call_cost(name: str, args: tuple[Any, ...]) -> int:
    """What cel-go charges for calling ``name`` on ``args`` (interpreter/runtimecost.go, costCall)."""
    if name in ("startsWith", "endsWith") or (name in ("bytes", "string") and isinstance(args[0], (str, bytes))):
        return _traversal(_size(args[0]))
    if name == "_in_" and isinstance(args[1], list):
        return _size(args[1])
    if name in ("_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"):
        return _traversal(min(_size(args[0]), _size(args[1])))
    if name == "_+_" and all(isinstance(a, (str, bytes)) for a in args):
        return _traversal(_size(args[0]) + _size(args[1]))
    if name == "matches" and len(args) == 2:
        return math.ceil((1 + _size(args[0])) * _STRING_TRAVERSAL) * math.ceil(_size(args[1]) * _REGEX_LENGTH)
    if name == "contains" and len(args) == 2 and isinstance(args[0], str):
        return _traversal(_size(args[0])) * _traversal(_size(args[1]))
    if name in ("_||_", "_&&_", "_?_:_"):
        return 0  # evalOr, evalAnd and the conditional cost nothing themselves
    return 1


class CompiledRule:
    """One rule, compiled once, evaluated with a meter (cel-python is imported by the caller: the [crd] extra)."""

    def __init__(self, celpy: Any, rule: str) -> None:
        from celpy.celparser import CELParseError

        self._celpy = celpy
        self._meter = _Meter()
        runner = _metered_runner(celpy, self._meter)
        env = celpy.Environment(runner_class=runner)
        try:
            ast = env.compile(rule)
        except CELParseError as exc:
            where = f" (line {exc.line}, column {exc.column})" if getattr(exc, "line", None) else ""
            raise RuleCompileError(f"does not parse{where}") from None
        self._program = env.program(ast, functions=_metered_functions(celpy, self._meter))

    def holds(self, value: Any, budget: Budget) -> tuple[bool, int]:
        """Whether the rule holds for ``value`` (a CEL value: ``celpy.json_to_cel``), and what it cost. Raises
        :class:`_OverCallLimit` or :class:`_OverSteps` (:func:`evaluate` turns them into :class:`Stop`)."""
        self._meter.cost = 0
        self._meter.budget = budget
        try:
            result = self._program.evaluate({"self": value})
        except self._celpy.CELEvalError:
            return False, self._meter.cost  # the API server refuses an object a rule cannot be evaluated on
        return bool(result), self._meter.cost


def evaluate(rule: CompiledRule, value: Any, budget: Budget, failed: str) -> bool:
    """Whether ``rule`` holds for ``value``, charged to ``budget`` as the API server charges it; past a limit,
    :class:`Stop` with the server's message (``failed`` names the rule in it: its message, else its text)."""
    if budget.cost <= 0:
        raise Stop(OUT_OF_BUDGET)
    try:
        holds, cost = rule.holds(value, budget)
    except _OverCallLimit:
        raise Stop(CALL_LIMIT.format(rule=failed)) from None
    except _OverSteps:
        raise Stop(TOO_COSTLY_HERE) from None
    if cost > budget.cost:
        raise Stop(OUT_OF_BUDGET)
    budget.cost -= cost
    return holds


def _metered_functions(celpy: Any, meter: _Meter) -> dict[str, Callable[..., Any]]:
    """cel-python's functions and operators, each charging what cel-go charges for the call before making it."""
    from celpy.evaluation import base_functions

    def metered(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            meter.charge(_call_cost(name, args))
            return function(*args)

        call.__name__ = getattr(function, "__name__", name)
        return call

    return {name: metered(name, function) for name, function in base_functions.items()}


def _metered_runner(celpy: Any, meter: _Meter) -> type:
    """A cel-python runner whose evaluator charges ``meter`` for each step, and stops ``||``, ``&&``, ``all`` and
    ``exists`` where cel-go stops them."""
    from celpy.evaluation import CELEvalError, Evaluator

    bool_type = celpy.celtypes.BoolType

    class _MeteredEvaluator(Evaluator):
        def sub_evaluator(self, ast: Any) -> Any:
            return _MeteredEvaluator(ast, activation=self.activation)

        def visit_children(self, tree: Any) -> Any:
            meter.step()
            return super().visit_children(tree)

        def primary(self, tree: Any) -> Any:
            child = tree.children[0]
            kind = getattr(child, "data", "")
            if kind in ("ident", "dot_ident") or (kind == "ident_arg" and str(child.children[0]) == "dyn"):
                meter.charge(_SELECT_AND_IDENT)
            elif kind == "ident_arg" and str(child.children[0]) == "has":
                meter.charge(-_SELECT_AND_IDENT)  # the selection it tests is free (PresenceTestHasCost(false))
            elif kind in ("list_lit", "map_lit") and not _constant(child):
                meter.charge(_LIST_CREATE if kind == "list_lit" else _MAP_CREATE)
            return super().primary(tree)

        def member_dot(self, tree: Any) -> Any:
            meter.charge(_SELECT_AND_IDENT + _relative(tree))
            return super().member_dot(tree)

        def member_index(self, tree: Any) -> Any:
            meter.charge(_relative(tree))  # the index itself is the call _[_], charged as a function
            return super().member_index(tree)

        def member_object(self, tree: Any) -> Any:
            meter.charge(_STRUCT_CREATE)
            return super().member_object(tree)

        def member_dot_arg(self, tree: Any) -> Any:
            meter.charge(_RESULT.get(str(tree.children[1]), 0))
            try:
                return super().member_dot_arg(tree)
            except _Decided as decided:  # an all/exists ended early by its loop condition (see _per_element)
                return decided.value

        def build_macro_eval(self, child: Any) -> Any:
            return _per_element(str(child.children[1]), super().build_macro_eval(child))

        def build_ss_macro_eval(self, child: Any) -> Any:
            return _per_element(str(child.children[1]), super().build_ss_macro_eval(child))

        def conditionalor(self, tree: Any) -> Any:
            if len(tree.children) == 2:
                return self._logical(tree, "_||_", deciding=True)
            return super().conditionalor(tree)

        def conditionaland(self, tree: Any) -> Any:
            if len(tree.children) == 2:
                return self._logical(tree, "_&&_", deciding=False)
            return super().conditionaland(tree)

        def _logical(self, tree: Any, operator: str, deciding: bool) -> Any:
            """``a || b`` (``a && b``) as cel-go evaluates it: true (false) once ``a`` is, ``b`` unevaluated;
            cel-python would evaluate ``b`` too. Otherwise cel-python's operator on both, as cel-python's own
            conditionalor/conditionaland apply it."""
            meter.step()
            left = self.visit(tree.children[0])
            if isinstance(left, bool_type) and bool(left) is deciding:
                return left
            right = self.visit(tree.children[1])
            try:
                return self.activation.resolve_function(operator)(left, right)
            except TypeError as exc:
                return CELEvalError(f"found no matching overload for {operator}", exc.__class__, exc.args, tree=tree)

    constants: dict[int, bool] = {}

    def _constant(tree: Any) -> bool:
        """Whether ``tree`` (a list or map literal) holds literals only, no operator: cel-go's optimizer
        (cel.OptOptimize, on in the API server: k8s.io/apiserver@v0.36.3:pkg/cel/environment/base.go) makes it a
        constant, which costs nothing."""
        key = id(tree)
        if key not in constants:
            constants[key] = all(
                t.data in _LITERAL_PARTS and (t.data not in _PASS_THROUGH or len(t.children) == 1)
                for t in tree.iter_subtrees()
            )
        return constants[key]

    def _relative(tree: Any) -> int:
        """1 when ``tree`` (a field selection or an index) applies to a value that is not a variable's field (a
        literal, a call's result): cel-go charges such a relative attribute 1 more than a variable's."""
        operand = tree.children[0]
        while getattr(operand, "data", "") in ("member", "primary") and len(operand.children) == 1:
            operand = operand.children[0]
        if getattr(operand, "data", "") in ("member_dot", "member_index"):
            return _relative(operand)
        return 0 if getattr(operand, "data", "") in ("ident", "dot_ident") else 1

    def _per_element(macro: str, sub_expr: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``sub_expr`` (the macro's predicate or function on one element), charged what cel-go's expansion charges
        per element; ``all``/``exists`` are not evaluated past the deciding element, where cel-go's loop condition
        ends the loop (and costs once more)."""
        before, if_true = _PER_ELEMENT.get(macro, (1, 0))
        decided: list[Any] = []

        def each(value: Any) -> Any:
            if decided:
                meter.charge(_LOOP_CONDITION[macro])
                raise _Decided(decided[0])
            meter.charge(before)
            result = sub_expr(value)
            truth = isinstance(result, bool_type) and bool(result)
            if if_true and truth:
                meter.charge(if_true)
            if macro in _LOOP_CONDITION and isinstance(result, bool_type) and truth is (macro == "exists"):
                decided.append(result)
            return result

        return each

    class _MeteredRunner(celpy.InterpretedRunner):
        def evaluate(self, context: Mapping[str, Any]) -> Any:
            return _MeteredEvaluator(ast=self.ast, activation=self.new_activation()).evaluate(context)

    return _MeteredRunner
