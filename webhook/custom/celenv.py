"""The CEL environments custom rules compile in: their variables and the Kubernetes helpers.

The runtime is ``cel-expr-python`` (Google's C++ CEL with its type checker), chosen by
measurement in ``bench/cel.py`` (``bench/README.md``): it evaluates five rules on a GPU Job
several times faster than the Rust bindings (which convert the whole object on every call) and
the pure-Python runtime, and its checker refuses unknown variables and wrong overloads at
load time, with the position, as the Kubernetes apiserver does.  It installs from wheels on
Linux x86-64 and ARM64 alike (``manylinux_2_28``, i.e. glibc 2.28 or newer;
``tests/unit/project/test_platforms.py``), so one runtime serves both image platforms and no
per-platform choice (with its risk of two runtimes deciding differently) is needed.

One environment per scope, so that an object-scope rule that reads ``podSpec`` is refused at
load instead of failing on every request.  Enabled libraries: the CEL standard library, the
``strings``, ``math``, ``optional`` (``object.?metadata.?labels.?team``) and ``cel.bind``
extensions as in Kubernetes, and Kubernetes' quantity library (below).  Not available (documented in
``docs/custom-policies.md``): ``authorizer``, ``url()``, ``ip()``/``cidr()``, the Kubernetes
list helpers (``isSorted``, ``sum``, ``indexOf``) and regex ``find``/``findAll``.

The runtime is imported when the first environment is built, i.e. when a config has custom
rules: it is about 16 MiB of a server worker's memory, which a config without them never needs.
"""

from __future__ import annotations

from decimal import Decimal
from functools import cache
from typing import Any

from gpuguard.workloads import quantity as qty

#: Variables every rule sees, and what each holds (shown in errors and docs).
OBJECT_VARIABLES: dict[str, str] = {
    "object": "the object as admitted (after gpuguard's mutations)",
    "oldObject": "the stored object on UPDATE, else null",
    "request": "operation, namespace, name, userInfo {username, groups}, kind {group, version, kind}",
    "namespaceObject": "metadata {name, labels} of the request's namespace (null for cluster-scoped)",
    "workload": "kind, group, apiVersion, name, class, acceleratorsPerPod, acceleratorsTotal, "
                "acceleratorsByResource, pods",
    "variables": "the rule's named variables",
}
#: podTemplate scope adds these (one evaluation per pod template).
TEMPLATE_VARIABLES: dict[str, str] = {
    "podSpec": "the template's PodSpec",
    "podMetadata": "the template's metadata ({} for kinds that inline a PodSpec, e.g. KServe)",
    "template": "role, replicas, acceleratorsPerPod, path (where the PodSpec is in the object)",
}

# A quantity is a map {"quantity": <canonical decimal string>} to CEL: declared with its own
# map type so the checker rejects ``quantity('1').isGreaterThan(3)``, and canonical so that
# ``quantity('1') == quantity('1000m')`` holds.  (cel-expr-python cannot return opaque types.)
_KEY = "quantity"


@cache
def _cel() -> Any:
    """The ``cel_expr_python.cel`` module, imported on first use (see the module docstring)."""
    from cel_expr_python import cel

    return cel


def _value(q: Any) -> Decimal:
    if not isinstance(q, dict) or _KEY not in q:
        raise ValueError("not a quantity (build one with quantity('64Gi'))")
    return Decimal(q[_KEY])


def _make(amount: Decimal) -> dict[str, str]:
    return {_KEY: format(amount.normalize(), "f")}


def _parse(text: Any) -> dict[str, str]:
    amount = qty.parse(text)
    if amount is None:
        raise ValueError(f"invalid quantity {text!r}")
    return _make(amount)


def _is_quantity(text: Any) -> bool:
    return qty.parse(text) is not None


def _compare(a: Any, b: Any) -> int:
    x, y = _value(a), _value(b)
    return (x > y) - (x < y)


def _as_integer(q: Any) -> int:
    amount = _value(q)
    if amount != amount.to_integral_value():
        raise ValueError(f"quantity {amount} is not an integer")
    if abs(amount) > 2**63 - 1:
        raise ValueError(f"quantity {amount} overflows int")
    return int(amount)


def _overload(name: str, ret: Any, params: list, impl: Any, member: bool = False) -> Any:
    return _cel().Overload(name, return_type=ret, parameters=params, is_member=member, impl=impl)


def _quantity_library() -> Any:
    """Kubernetes' quantity library (k8s.io/apiserver/pkg/cel/library/quantity.go), same names."""
    cel = _cel()
    Q = cel.Type.Map(cel.Type.STRING, cel.Type.STRING)  # noqa: N806
    B, N, S, D = cel.Type.BOOL, cel.Type.INT, cel.Type.STRING, cel.Type.DOUBLE  # noqa: N806
    return cel.CelExtension("gpuguard.k8s.quantity", [
        cel.FunctionDecl("quantity", [_overload("quantity_string", Q, [S], _parse),
                                      _overload("quantity_int", Q, [N], _parse)]),
        cel.FunctionDecl("isQuantity", [_overload("is_quantity_string", B, [S], _is_quantity)]),
        cel.FunctionDecl("compareTo", [_overload("quantity_compareTo", N, [Q, Q], _compare, True)]),
        cel.FunctionDecl("isGreaterThan", [_overload("quantity_isGreaterThan", B, [Q, Q],
                                                     lambda a, b: _compare(a, b) > 0, True)]),
        cel.FunctionDecl("isLessThan", [_overload("quantity_isLessThan", B, [Q, Q],
                                                  lambda a, b: _compare(a, b) < 0, True)]),
        cel.FunctionDecl("add", [_overload("quantity_add", Q, [Q, Q], lambda a, b: _make(_value(a) + _value(b)), True),
                                 _overload("quantity_add_int", Q, [Q, N],
                                           lambda a, b: _make(_value(a) + Decimal(b)), True)]),
        cel.FunctionDecl("sub", [_overload("quantity_sub", Q, [Q, Q], lambda a, b: _make(_value(a) - _value(b)), True),
                                 _overload("quantity_sub_int", Q, [Q, N],
                                           lambda a, b: _make(_value(a) - Decimal(b)), True)]),
        cel.FunctionDecl("sign", [_overload("quantity_sign", N, [Q], lambda a: _compare(a, _make(Decimal(0))), True)]),
        cel.FunctionDecl("asInteger", [_overload("quantity_asInteger", N, [Q], _as_integer, True)]),
        cel.FunctionDecl("asApproximateFloat", [_overload("quantity_asApproximateFloat", D, [Q],
                                                          lambda a: float(_value(a)), True)]),
        cel.FunctionDecl("isInteger", [_overload("quantity_isInteger", B, [Q],
                                                 lambda a: _value(a) == _value(a).to_integral_value(), True)]),
    ])


@cache
def environment(scope: str) -> Any:
    """The (shared, immutable) CEL environment for ``scope``.

    ``podTemplate`` and ``object`` are the checking environments (what a rule may read).
    ``runtime`` declares every variable: rules of both scopes run in it, so that one activation
    per pod template serves them all.  Why: cel-expr-python converts a Python value the first
    time an expression reads it and then keeps it in the activation, and converting ``object``
    is most of a rule's cost (~50 us for a GPU Job); sharing the activation pays it once.
    """
    names = dict(OBJECT_VARIABLES)
    if scope in ("podTemplate", "runtime"):
        names.update(TEMPLATE_VARIABLES)
    from cel_expr_python.ext.ext_bindings import ExtBindings
    from cel_expr_python.ext.ext_math import ExtMath
    from cel_expr_python.ext.ext_optional import ExtOptional
    from cel_expr_python.ext.ext_strings import ExtStrings

    cel = _cel()
    return cel.NewEnv(variables={name: cel.Type.DYN for name in names},
                      extensions=[ExtStrings(), ExtMath(), ExtOptional(), ExtBindings(), _quantity_library()])


def runtime() -> Any:
    """The environment every compiled rule runs in (see :func:`environment`)."""
    return environment("runtime")


def variables_for(scope: str) -> list[str]:
    names = list(OBJECT_VARIABLES)
    if scope == "podTemplate":
        names += list(TEMPLATE_VARIABLES)
    return names


def is_error(value: Any) -> bool:
    """Whether a CEL result is an error value (cel-expr-python returns errors, it does not raise)."""
    return value.type() == _cel().Type.ERROR


def type_name(t: Any) -> str:
    return t.name()


#: Result types the checker may infer for a validation / a message expression.
BOOL_RESULTS = frozenset({"BOOL", "DYN"})
STRING_RESULTS = frozenset({"STRING", "DYN"})
