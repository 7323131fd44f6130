"""How a `Dataset` prints, as in Ray: a table of its columns and types (with up to 10 of its
rows when materialized) when the schema is known without running anything, else a summary
line under the operators that would run."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa

from oxray.data._internal import plan as P

ELLIPSIS = "…"  # a cut cell, or the gap between the first and last rows
MAX_ROWS = 10  # rows shown of a materialized dataset
HEAD_ROWS = 5  # of which from its start, when it has more than MAX_ROWS
MAX_CELL_WIDTH = 40
LINE_LIMIT = 80  # a summary longer than this puts each field on its own line
MIN_FIELD_NAME = 10  # characters of a column name kept when a schema field is cut
INDENT = "   "


def _cell(value) -> str:
    if isinstance(value, np.generic):
        value = value.item()
    text = str(value).replace("\n", " ").replace("\r", " ")
    return text if len(text) <= MAX_CELL_WIDTH else text[: MAX_CELL_WIDTH - 1] + ELLIPSIS


def _dtype_name(dtype) -> str:
    if isinstance(dtype, type):
        return dtype.__name__
    name = getattr(dtype, "name", None)
    return name if isinstance(name, str) else str(dtype)


def _row(cells: list, widths: list) -> str:
    return "│" + "┆".join(f" {c.ljust(w)} " for c, w in zip(cells, widths, strict=True)) + "│"


def _border(left: str, middle: str, right: str, fill: str, widths: list) -> str:
    return left + middle.join(fill * (w + 2) for w in widths) + right


def preview_row_counts(num_rows: Optional[int]) -> tuple:
    """(rows from the start, rows from the end) a materialized dataset's table shows."""
    if num_rows is None or num_rows <= MAX_ROWS:
        return (MAX_ROWS if num_rows is None else num_rows), 0
    return HEAD_ROWS, MAX_ROWS - HEAD_ROWS


def table_repr(schema: pa.Schema, num_rows: Optional[int], materialized: bool, head: list = (), tail: list = ()) -> str:
    """The table: `shape: (rows, columns)`, names, `---`, types, then the rows given (dicts),
    with a `…` row between the head and the tail, and a line saying how many are shown."""
    names = list(schema.names)
    headers = [_cell(n) for n in names]
    types = [_cell(_dtype_name(t)) for t in schema.types]
    rows = [[_cell(r.get(n)) for n in names] for r in head]
    if head and tail:
        rows.append([ELLIPSIS] * len(names))
    rows += [[_cell(r.get(n)) for n in names] for r in tail]
    widths = [
        max(len(h), len(t), 3, *(len(r[i]) for r in rows)) for i, (h, t) in enumerate(zip(headers, types, strict=True))
    ]
    lines = [
        f"shape: ({'?' if num_rows is None else num_rows}, {len(names)})",
        _border("╭", "┬", "╮", "─", widths),
        _row(headers, widths),
        _row(["---"] * len(names), widths),
        _row(types, widths),
    ]
    if rows:
        lines.append(_border("╞", "╪", "╡", "═", widths))
        lines += [_row(r, widths) for r in rows]
    lines.append(_border("╰", "┴", "╯", "─", widths))
    if materialized:
        shown = len(head) + len(tail)
        lines.append(f"(Showing {shown} of {'?' if num_rows is None else num_rows} rows)")
    else:
        lines.append("(Dataset isn't materialized)")
    return "\n".join(lines)


def _fields(schema: pa.Schema) -> list:
    return [(n, _dtype_name(t)) for n, t in zip(schema.names, schema.types, strict=True)]


def summary_repr(
    class_name: str, plan: Optional[P.Plan], schema, num_rows: Optional[int], num_blocks: Optional[int]
) -> str:
    """`Dataset(num_rows=..., schema={...})` under the tree of operators still to run (`plan`,
    None for a materialized dataset), wrapped onto several lines when longer than 80."""
    tree, depth = ("", 0)
    if plan is not None and plan.ops:
        tree, depth = P.render_tree(P.logical_tree(plan), with_kind=False, with_sources=False)
    if schema is None:
        schema_text = "Unknown schema"
    else:
        schema_text = "{" + ", ".join(f"{n}: {t}" for n, t in _fields(schema)) + "}"
    count = "?" if num_rows is None else num_rows
    blocks = f"num_blocks={num_blocks}, " if num_blocks else ""
    text = f"{class_name}({blocks}num_rows={count}, schema={schema_text})"
    pad = INDENT * depth
    if len(text) > LINE_LIMIT:
        if len(f"{pad}{INDENT}schema={schema_text}") > LINE_LIMIT and schema is not None:
            fields = []
            for n, t in _fields(schema):
                line = f"{pad}{INDENT * 2}{n}: {t}"
                if len(line) > LINE_LIMIT:
                    suffix = f"...: {t}"
                    line = line[: max(LINE_LIMIT - len(suffix), MIN_FIELD_NAME)] + suffix
                fields.append(line)
            schema_text = "{\n" + ",\n".join(fields) + f"\n{pad}{INDENT}" + "}"
        blocks = f"\n{pad}{INDENT}num_blocks={num_blocks}," if num_blocks else ""
        text = f"{class_name}({blocks}\n{pad}{INDENT}num_rows={count},\n{pad}{INDENT}schema={schema_text}\n{pad})"
    if depth == 0:
        return tree + text
    return tree + f"{INDENT * (depth - 1)}+- {text}"
