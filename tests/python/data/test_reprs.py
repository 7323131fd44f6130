"""How datasets describe themselves: repr (Ray's table and summary), schema repr, explain(),
stats(), has_started_execution, lineage serialization, and the schema and row count a plan
knows without running (a union or grouped aggregation knows neither)."""

import functools

import numpy as np
import pytest
from data_testutil import ray


def test_repr_of_a_lazy_dataset_is_its_table_without_rows(data_cluster):
    assert repr(ray.data.range(5)) == (
        "shape: (5, 1)\n╭───────╮\n│ id    │\n│ ---   │\n│ int64 │\n╰───────╯\n(Dataset isn't materialized)"
    )


def test_repr_of_a_materialized_dataset_shows_its_first_and_last_rows(data_cluster):
    text = repr(ray.data.range(20, override_num_blocks=3).materialize())
    lines = text.split("\n")
    assert lines[0] == "shape: (20, 1)"
    cells = [line.strip("│ ") for line in lines[6:-2]]
    assert cells == ["0", "1", "2", "3", "4", "…", "15", "16", "17", "18", "19"]
    assert lines[-1] == "(Showing 10 of 20 rows)"


def test_repr_without_a_known_schema_is_a_summary_under_the_operators(data_cluster):
    ds = ray.data.range(10).map(lambda r: r).filter(lambda r: True)
    assert repr(ds) == ("Filter(<lambda>)\n+- Map(<lambda>)\n   +- Dataset(num_rows=10, schema={id: int64})")
    assert repr(ray.data.range(1).union(ray.data.range(1))) == ("Union\n+- Dataset(num_rows=?, schema=Unknown schema)")


def test_an_empty_materialized_dataset_has_no_schema(data_cluster):
    ds = ray.data.range(1).filter(lambda r: r["id"] > 1).materialize()
    assert ds.schema(fetch_if_missing=False) is None
    assert str(ds).startswith("MaterializedDataset(")
    assert "num_rows=0, schema=Unknown schema)" in str(ds)
    assert ray.data.range(0).schema() is None


def test_schema_repr_pads_names_to_the_widest(data_cluster):
    ds = ray.data.from_items([{"long_column_name": "spam", "n": 0}])
    assert repr(ds.schema()) == (
        "Column            Type\n------            ----\nlong_column_name  string\nn                 int64"
    )


def test_a_grouped_aggregation_changes_the_count_and_schema(data_cluster):
    ds = ray.data.from_items([{"k": i % 2} for i in range(10)]).groupby("k").count()
    assert ds.count() == 2
    assert ds.schema().names == ["k", "count()"]


def test_explain_prints_the_logical_and_physical_plans(data_cluster, capsys):
    ds = ray.data.range(10, override_num_blocks=10).map(lambda r: r).random_shuffle()
    ds.explain()
    out = capsys.readouterr().out.strip()
    assert out.startswith(
        "-------- Logical Plan --------\nRandomShuffle[RandomShuffle]\n+- MapRows[Map(<lambda>)]\n   +- Read[ReadRange]"
    )
    assert out.endswith(
        "-------- Physical Plan (Optimized) --------\n"
        "AllToAllOperator[RandomShuffle]\n"
        "+- TaskPoolMapOperator[ReadRange->Map(<lambda>)]\n"
        "   +- InputDataBuffer[Input]"
    )


def test_explain_names_a_partial_by_its_function(data_cluster, capsys):
    def add(batch, y):
        return batch

    ray.data.range(4).groupby("id").map_groups(functools.partial(add, y=1)).explain()
    assert "MapBatches(add)" in capsys.readouterr().out


def test_take_runs_a_derived_dataset_not_this_one(data_cluster):
    ds = ray.data.range(100, override_num_blocks=20)
    ds.take(10)
    assert not ds.has_started_execution
    ds.take_all()
    assert ds.has_started_execution


def test_lineage_of_reads_travels_and_stored_blocks_do_not(data_cluster):
    ds = ray.data.range(10).union(ray.data.range(20))
    again = ray.data.Dataset.deserialize_lineage(ds.serialize_lineage())
    assert sorted(r["id"] for r in again.take_all()) == sorted([*range(10), *range(20)])
    for stored in (ray.data.from_items([1, 2]), ray.data.range(3).union(ray.data.from_items([1]))):
        with pytest.raises(ValueError, match="Lineage-based serialization"):
            stored.serialize_lineage()


def test_stats_report_rows_in_and_out_per_operator(data_cluster):
    assert ray.data.range(3).stats() == ""
    items = ray.data.from_items([{"v": i} for i in range(50)])
    assert "Operator 0 FromItems" in items.stats()
    stats = items.map(lambda r: r).filter(lambda r: r["v"] < 10).materialize().stats()
    assert "Operator 0 FromItems" in stats
    op1 = stats[stats.index("Operator 1 Map(<lambda>)->Filter(<lambda>)") :]
    assert "Total input num rows: 50 rows" in op1
    assert "Total output num rows: 10 rows" in op1
    assert "FromNumpy" in ray.data.from_numpy(np.arange(4)).stats()


def test_actor_prefetcher_setting_takes_rays_default_only(data_cluster):
    ctx = ray.data.DataContext.get_current()
    ctx.actor_prefetcher_enabled = False
    assert ray.data.range(3).take_all() == [{"id": 0}, {"id": 1}, {"id": 2}]
    for value in (True, "yes"):
        with pytest.raises(ValueError, match=f"actor_prefetcher_enabled={value!r}.*not supported"):
            ctx.actor_prefetcher_enabled = value
    assert ctx.actor_prefetcher_enabled is False


def test_iterators_give_their_context(data_cluster):
    first, _ = ray.data.range(4).streaming_split(2, equal=True)
    assert isinstance(first.get_context(), ray.data.DataContext)
    assert isinstance(ray.data.range(4).iterator().get_context(), ray.data.DataContext)
