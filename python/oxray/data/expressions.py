"""Column expressions, as Ray Data's: `col("x") > 5`, `(col("a") + col("b")).alias("c")`, `lit(1)`.

`Dataset.filter(expr=...)` keeps the rows where an expression is true, `Dataset.with_column(name,
expr)` adds its values as a column. An expression may also be a string of Python syntax over
column names (`"x > 5 and y != 'a'"`, `"z is null"` is written `"z.is_null()"` or, as in Ray,
`"is_null(z)"`; `is_not_null`/`is_valid`, `is_nan` and `is_in(x, [...])` likewise; a dotted name,
`"sepal.length > 5"`, is one column), parsed here with `ast` (never evaluated as Python).
Expressions run on each block with pyarrow.compute, in the block's task.
"""

from __future__ import annotations

import abc
import ast
from enum import Enum
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["Expr", "Operation", "col", "lit", "udf"]


class Operation(str, Enum):
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    MOD = "mod"
    FLOORDIV = "floordiv"
    GT = "gt"
    LT = "lt"
    GE = "ge"
    LE = "le"
    EQ = "eq"
    NE = "ne"
    AND = "and"
    OR = "or"
    NOT = "not"
    IS_NULL = "is_null"
    IS_NOT_NULL = "is_not_null"
    IN = "in"
    NOT_IN = "not_in"


def _add(a, b):
    if pa.types.is_string(getattr(a, "type", pa.null())) or pa.types.is_large_string(getattr(a, "type", pa.null())):
        return pc.binary_join_element_wise(a, b, "")
    return pc.add(a, b)


_BINARY = {
    Operation.ADD: _add,
    Operation.SUB: pc.subtract,
    Operation.MUL: pc.multiply,
    Operation.DIV: pc.divide,
    Operation.MOD: lambda a, b: pc.subtract(a, pc.multiply(pc.floor(pc.divide(a, b)), b)),
    Operation.FLOORDIV: lambda a, b: pc.floor(pc.divide(a, b)),
    Operation.GT: pc.greater,
    Operation.LT: pc.less,
    Operation.GE: pc.greater_equal,
    Operation.LE: pc.less_equal,
    Operation.EQ: pc.equal,
    Operation.NE: pc.not_equal,
    Operation.AND: pc.and_kleene,
    Operation.OR: pc.or_kleene,
}

_SYMBOLS = {
    Operation.ADD: "+",
    Operation.SUB: "-",
    Operation.MUL: "*",
    Operation.DIV: "/",
    Operation.MOD: "%",
    Operation.FLOORDIV: "//",
    Operation.GT: ">",
    Operation.LT: "<",
    Operation.GE: ">=",
    Operation.LE: "<=",
    Operation.EQ: "==",
    Operation.NE: "!=",
    Operation.AND: "&",
    Operation.OR: "|",
}


class Expr(abc.ABC):
    """An expression over a block's columns; each kind below says how it evaluates."""

    @abc.abstractmethod
    def eval(self, table: pa.Table):
        """The expression's value over a block: an Arrow array (or a scalar)."""

    @abc.abstractmethod
    def columns(self) -> set:
        """The block columns the expression reads."""

    @property
    def name(self):
        return None

    def _binary(self, op: Operation, other, reverse: bool = False) -> "BinaryExpr":
        other = other if isinstance(other, Expr) else LiteralExpr(other)
        return BinaryExpr(op, other, self) if reverse else BinaryExpr(op, self, other)

    def __add__(self, o):
        return self._binary(Operation.ADD, o)

    def __radd__(self, o):
        return self._binary(Operation.ADD, o, True)

    def __sub__(self, o):
        return self._binary(Operation.SUB, o)

    def __rsub__(self, o):
        return self._binary(Operation.SUB, o, True)

    def __mul__(self, o):
        return self._binary(Operation.MUL, o)

    def __rmul__(self, o):
        return self._binary(Operation.MUL, o, True)

    def __truediv__(self, o):
        return self._binary(Operation.DIV, o)

    def __rtruediv__(self, o):
        return self._binary(Operation.DIV, o, True)

    def __mod__(self, o):
        return self._binary(Operation.MOD, o)

    def __floordiv__(self, o):
        return self._binary(Operation.FLOORDIV, o)

    def __gt__(self, o):
        return self._binary(Operation.GT, o)

    def __lt__(self, o):
        return self._binary(Operation.LT, o)

    def __ge__(self, o):
        return self._binary(Operation.GE, o)

    def __le__(self, o):
        return self._binary(Operation.LE, o)

    def __eq__(self, o):  # type: ignore[override] - builds an expression, as in Ray
        return self._binary(Operation.EQ, o)

    def __ne__(self, o):  # type: ignore[override]
        return self._binary(Operation.NE, o)

    def __and__(self, o):
        return self._binary(Operation.AND, o)

    def __or__(self, o):
        return self._binary(Operation.OR, o)

    def __invert__(self):
        return UnaryExpr(Operation.NOT, self)

    def __hash__(self):
        return id(self)

    def __bool__(self):
        raise TypeError("an expression has no truth value; combine conditions with & and |, not `and`/`or`")

    def is_null(self) -> "UnaryExpr":
        return UnaryExpr(Operation.IS_NULL, self)

    def is_not_null(self) -> "UnaryExpr":
        return UnaryExpr(Operation.IS_NOT_NULL, self)

    def is_in(self, values) -> "BinaryExpr":
        return BinaryExpr(Operation.IN, self, LiteralExpr(list(values)))

    def not_in(self, values) -> "BinaryExpr":
        return BinaryExpr(Operation.NOT_IN, self, LiteralExpr(list(values)))

    def alias(self, name: str) -> "AliasExpr":
        return AliasExpr(self, name)


class ColumnExpr(Expr):
    def __init__(self, name: str):
        if not isinstance(name, str):
            raise TypeError(f"col({name!r}): a column name must be a string")
        self._name = name

    @property
    def name(self):
        return self._name

    def eval(self, table: pa.Table):
        if self._name not in table.column_names:
            raise ValueError(
                f"expression: the block has no column {self._name!r}; its columns are {table.column_names}"
            )
        return table.column(self._name)

    def columns(self) -> set:
        return {self._name}

    def __repr__(self) -> str:
        return f"col({self._name!r})"


class LiteralExpr(Expr):
    def __init__(self, value: Any):
        self.value = value

    def eval(self, table: pa.Table):
        return pa.scalar(self.value) if not isinstance(self.value, list) else self.value

    def columns(self) -> set:
        return set()

    def __repr__(self) -> str:
        return f"lit({self.value!r})"


class BinaryExpr(Expr):
    def __init__(self, op: Operation, left: Expr, right: Expr):
        self.op, self.left, self.right = op, left, right

    def eval(self, table: pa.Table):
        left = self.left.eval(table)
        if self.op in (Operation.IN, Operation.NOT_IN):
            values = pa.array(self.right.value)
            found = pc.is_in(left, value_set=values)
            return pc.invert(found) if self.op is Operation.NOT_IN else found
        return _BINARY[self.op](left, self.right.eval(table))

    def columns(self) -> set:
        return self.left.columns() | self.right.columns()

    @property
    def name(self):
        return None

    def __repr__(self) -> str:
        if self.op in (Operation.IN, Operation.NOT_IN):
            return f"{self.left!r}.{'is_in' if self.op is Operation.IN else 'not_in'}({self.right.value!r})"
        return f"({self.left!r} {_SYMBOLS[self.op]} {self.right!r})"


class UnaryExpr(Expr):
    def __init__(self, op: Operation, operand: Expr):
        self.op, self.operand = op, operand

    def eval(self, table: pa.Table):
        value = self.operand.eval(table)
        if self.op is Operation.NOT:
            return pc.invert(value)
        if self.op is Operation.IS_NULL:
            return pc.is_null(value)
        return pc.is_valid(value)

    def columns(self) -> set:
        return self.operand.columns()

    def __repr__(self) -> str:
        return f"~{self.operand!r}" if self.op is Operation.NOT else f"{self.operand!r}.{self.op.value}()"


class AliasExpr(Expr):
    def __init__(self, expr: Expr, name: str):
        self.expr, self._name = expr, name

    @property
    def name(self):
        return self._name

    def eval(self, table: pa.Table):
        return self.expr.eval(table)

    def columns(self) -> set:
        return self.expr.columns()

    def __repr__(self) -> str:
        return f"{self.expr!r}.alias({self._name!r})"


class UDFExpr(Expr):
    """A `@udf` function applied to expressions: it gets each argument's values over the
    block as one Arrow array and returns an array, cast to the declared return type."""

    def __init__(self, fn, args: tuple, kwargs: dict, return_dtype):
        self.fn, self.args, self.kwargs, self.return_dtype = fn, args, kwargs, return_dtype

    def eval(self, table: pa.Table):
        def value(arg):
            if not isinstance(arg, Expr):
                return arg
            out = arg.eval(table)
            return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out

        result = self.fn(*[value(a) for a in self.args], **{k: value(v) for k, v in self.kwargs.items()})
        if not isinstance(result, (pa.Array, pa.ChunkedArray)):
            result = pa.array(result)
        if len(result) != table.num_rows:
            raise ValueError(
                f"udf {getattr(self.fn, '__name__', self.fn)!r} returned {len(result)} values for a block "
                f"of {table.num_rows} rows; a udf returns one value per row"
            )
        return result.cast(self.return_dtype.to_arrow_dtype())

    def columns(self) -> set:
        found = set()
        for arg in (*self.args, *self.kwargs.values()):
            if isinstance(arg, Expr):
                found |= arg.columns()
        return found

    def __repr__(self) -> str:
        return f"{getattr(self.fn, '__name__', 'udf')}({', '.join(map(repr, self.args))})"


def udf(return_dtype):
    """Ray's `@udf(return_dtype=DataType...)`: a function (or callable class) over Arrow
    arrays, made usable in expressions: calling it with expressions gives a `UDFExpr`."""
    from oxray.data.datatype import DataType

    if not isinstance(return_dtype, DataType):
        raise TypeError(f"udf(return_dtype={return_dtype!r}): expected a ray.data.datatype.DataType")

    def decorate(fn):
        if isinstance(fn, type):

            class ExpressionUDF(fn):
                def __call__(self, *args, **kwargs):
                    return UDFExpr(super().__call__, args, kwargs, return_dtype)

            ExpressionUDF.__name__ = ExpressionUDF.__qualname__ = fn.__name__
            return ExpressionUDF

        def as_expression(*args, **kwargs):
            return UDFExpr(fn, args, kwargs, return_dtype)

        as_expression.__name__ = getattr(fn, "__name__", "udf")
        as_expression.__doc__ = fn.__doc__
        return as_expression

    return decorate


def col(name: str) -> ColumnExpr:
    """The column `name` of each block."""
    return ColumnExpr(name)


def lit(value: Any) -> LiteralExpr:
    """A constant."""
    return LiteralExpr(value)


_AST_BINARY = {
    ast.Add: Operation.ADD,
    ast.Sub: Operation.SUB,
    ast.Mult: Operation.MUL,
    ast.Div: Operation.DIV,
    ast.Mod: Operation.MOD,
    ast.FloorDiv: Operation.FLOORDIV,
    ast.BitAnd: Operation.AND,
    ast.BitOr: Operation.OR,
}
_AST_COMPARE = {
    ast.Gt: Operation.GT,
    ast.Lt: Operation.LT,
    ast.GtE: Operation.GE,
    ast.LtE: Operation.LE,
    ast.Eq: Operation.EQ,
    ast.NotEq: Operation.NE,
    ast.In: Operation.IN,
    ast.NotIn: Operation.NOT_IN,
}


def parse(text: str) -> Expr:
    """A string expression (Python syntax over column names) as an `Expr`."""
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise ValueError(f"Invalid syntax in the expression: {text} ({e.msg})") from None
    return _from_ast(tree, text)


def _dotted_name(node) -> "str | None":
    """`a.b.c` as the one column name "a.b.c" (Ray reads dots as part of a column's name,
    e.g. "sepal.length"); None when the node is not a chain of plain names."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted_name(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


# Ray's string-expression functions: name -> (number of arguments, builder).
_AST_FUNCTIONS = {
    "is_null": (1, lambda x: x.is_null()),
    "is_not_null": (1, lambda x: x.is_not_null()),
    "is_valid": (1, lambda x: x.is_not_null()),
    # NaN is the one value unequal to itself.
    "is_nan": (1, lambda x: BinaryExpr(Operation.NE, x, x)),
    "is_in": (2, lambda x, values: BinaryExpr(Operation.IN, x, values)),
}


def _from_ast(node, text: str) -> Expr:  # noqa: C901 - one branch per kind of Python expression node
    if isinstance(node, ast.Name):
        return col(node.id)
    if isinstance(node, ast.Attribute) and _dotted_name(node) is not None:
        return col(_dotted_name(node))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _AST_FUNCTIONS:
        arity, build = _AST_FUNCTIONS[node.func.id]
        if len(node.args) != arity or node.keywords:
            raise ValueError(
                f"expression {text!r}: {node.func.id}() expects exactly {arity} argument{'s' if arity > 1 else ''}"
            )
        return build(*[_from_ast(a, text) for a in node.args])
    if isinstance(node, ast.Constant):
        return lit(node.value)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return lit([_literal(e, text) for e in node.elts])
    if isinstance(node, ast.BoolOp):
        op = Operation.AND if isinstance(node.op, ast.And) else Operation.OR
        out = _from_ast(node.values[0], text)
        for value in node.values[1:]:
            out = BinaryExpr(op, out, _from_ast(value, text))
        return out
    if isinstance(node, ast.BinOp) and type(node.op) in _AST_BINARY:
        return BinaryExpr(_AST_BINARY[type(node.op)], _from_ast(node.left, text), _from_ast(node.right, text))
    if isinstance(node, ast.UnaryOp):
        operand = _from_ast(node.operand, text)
        if isinstance(node.op, (ast.Not, ast.Invert)):
            return UnaryExpr(Operation.NOT, operand)
        if isinstance(node.op, ast.USub):
            return BinaryExpr(Operation.SUB, lit(0), operand)
    if isinstance(node, ast.Compare):
        out = None
        left = _from_ast(node.left, text)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            if type(op) not in _AST_COMPARE:
                break
            right = _from_ast(comparator, text)
            part = BinaryExpr(_AST_COMPARE[type(op)], left, right)
            out = part if out is None else BinaryExpr(Operation.AND, out, part)
            left = right
        else:
            return out
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args:
        target = _from_ast(node.func.value, text)
        if node.func.attr in ("is_null", "is_not_null"):
            return getattr(target, node.func.attr)()
    raise ValueError(
        f"expression {text!r}: {ast.unparse(node)!r} is not supported (columns, constants, arithmetic, "
        "comparisons, in / not in, and / or / not, .is_null() / .is_not_null(), is_null(x), is_not_null(x), "
        "is_valid(x), is_nan(x), is_in(x, [...]))"
    )


def _literal(node, text: str):
    if isinstance(node, ast.Constant):
        return node.value
    raise ValueError(f"expression {text!r}: {ast.unparse(node)!r} must be a constant")


def as_expr(value, what: str) -> Expr:
    if isinstance(value, Expr):
        return value
    if isinstance(value, str):
        return parse(value)
    raise TypeError(
        f"{what}: expected an expression (ray.data.expressions.col(...) > ...) or a string, got {type(value).__name__}"
    )
