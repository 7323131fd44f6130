"""`Dataset.join`: both sides range-partitioned on their keys by the same boundaries (sampled from
both), then one task per partition joins its left and right parts with Arrow's hash join. Rows
with equal keys meet in one partition, so every match is found; no process holds either side."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import oxray
from oxray.data._internal import block as B
from oxray.data._internal import exchange as X

# Ray's join types, and Arrow's names for them.
JOIN_TYPES = {
    "inner": "inner",
    "left_outer": "left outer",
    "right_outer": "right outer",
    "full_outer": "full outer",
    "left_semi": "left semi",
    "right_semi": "right semi",
    "left_anti": "left anti",
    "right_anti": "right anti",
}


@dataclass(frozen=True)
class JoinSpec:
    join_type: str
    left_keys: tuple
    right_keys: tuple
    left_suffix: Optional[str]
    right_suffix: Optional[str]

    @staticmethod
    def of(join_type, on, right_on, left_suffix, right_suffix) -> "JoinSpec":
        name = getattr(join_type, "value", join_type)
        if name not in JOIN_TYPES:
            raise ValueError(f"join(join_type={join_type!r}): expected one of {sorted(JOIN_TYPES)}")
        left = (on,) if isinstance(on, str) else tuple(on)
        right = left if right_on is None else ((right_on,) if isinstance(right_on, str) else tuple(right_on))
        if not left or len(left) != len(right):
            raise ValueError(f"join: on={on!r} and right_on={right_on!r} must name the same number of columns")
        return JoinSpec(name, left, right, left_suffix, right_suffix)

    def check(self, left_schema, right_schema, validate: bool) -> None:
        for side, keys, schema in (("left", self.left_keys, left_schema), ("right", self.right_keys, right_schema)):
            if schema is not None:
                missing = [k for k in keys if k not in schema.names]
                if missing:
                    raise ValueError(
                        f"join: the {side} dataset has no key column(s) {missing}; its columns are {schema.names}"
                    )
        if validate and left_schema is not None and right_schema is not None:
            for lk, rk in zip(self.left_keys, self.right_keys, strict=True):
                lt, rt = left_schema.field(lk).type, right_schema.field(rk).type
                if lt != rt:
                    raise ValueError(f"join: key {lk!r} is {lt} on the left but {rk!r} is {rt} on the right")


def join_parts(spec: JoinSpec, n_left: int, *parts):
    """One partition's join: (blocks, metadata)."""
    B.release_cached_memory()
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    left, right = B.concat_bundles(parts[:n_left]), B.concat_bundles(parts[n_left:])
    if left.num_columns == 0 or right.num_columns == 0:
        out = None  # a side with no rows here: only outer/anti joins keep the other side's rows
        keep_left = spec.join_type in ("left_outer", "full_outer", "left_anti")
        keep_right = spec.join_type in ("right_outer", "full_outer", "right_anti")
        if left.num_rows and keep_left:
            out = left
        elif right.num_rows and keep_right:
            out = right
    else:
        out = left.join(
            right,
            keys=list(spec.left_keys),
            right_keys=list(spec.right_keys),
            join_type=JOIN_TYPES[spec.join_type],
            left_suffix=spec.left_suffix,
            right_suffix=spec.right_suffix,
            coalesce_keys=True,
            use_threads=False,
        )
    tables = [out] if out is not None and out.num_rows else []
    return [B.IpcBlock(t) for t in tables], B.task_meta(tables, wall0, cpu0)


def run_join(left, right, spec: JoinSpec, n: int):
    from oxray.data._internal.executor import remote
    from oxray.data.dataset import MaterializedDataset

    left_key = X.SortKey(spec.left_keys, (False,) * len(spec.left_keys))
    right_key = X.SortKey(spec.right_keys, (False,) * len(spec.right_keys))
    sample = remote(X.sample_keys)
    samples = oxray.get(
        [sample.remote(left_key, X.SAMPLES_PER_BLOCK, r) for r in left._refs]
        + [sample.remote(right_key, X.SAMPLES_PER_BLOCK, r) for r in right._refs]
    )
    # The right side's samples under the left side's key names, so one set of boundaries cuts both.
    named = [s.rename_columns(list(spec.left_keys)) if s.num_columns else s for s in samples]
    bounds = X.boundaries_from(named, left_key, n)

    def cut(refs, key):
        side_bounds = bounds.rename_columns(list(key.columns)) if bounds is not None else None
        parts = [remote(X.partition_map, num_returns=n).remote(key, side_bounds, n, r) for r in refs]
        return [[p] if n == 1 else list(p) for p in parts]

    left_parts, right_parts = cut(left._refs, left_key), cut(right._refs, right_key)
    task = remote(join_parts, num_returns=2)
    made = [
        task.remote(spec, len(left_parts), *[p[j] for p in left_parts], *[p[j] for p in right_parts]) for j in range(n)
    ]
    metas = oxray.get([m for _, m in made])
    kept = [(d, m) for (d, _), m in zip(made, metas, strict=True) if m["rows"]]
    refs = [d for d, _ in kept]
    schema = oxray.get(refs[0])[0].schema if refs else None
    return MaterializedDataset(refs, [(m["rows"], m["bytes"]) for _, m in kept], schema, None, "Join")
