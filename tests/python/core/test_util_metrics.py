"""`ray.util.metrics` as Ray's docs use it: counters, gauges and histograms recorded in actors,
tasks and the driver reach each node's `/metrics` under Ray's names (`ray_<name>`, counters with
`_total`, histograms as buckets, sum and count), with the recording process's `WorkerId`; bad
use is an error naming what is wrong."""

import re

import pytest

import oxray as ray
from cli_cluster import running_cluster
from oxray.util.metrics import Counter, Gauge, Histogram
from oxray_testutil import metric_samples, metric_sum, wait_until


@ray.remote
class Shop:
    def __init__(self):
        self.sold = Counter("items_sold", description="Items sold.", tag_keys=("item",))
        self.stock = Gauge("stock_left", tag_keys=("item",)).set_default_tags({"item": "apple"})
        self.checkout = Histogram("checkout_ms", boundaries=[10, 100])

    def sell(self, n):
        self.sold.inc(n, tags={"item": "apple"})
        self.stock.set(100 - n)
        self.checkout.observe(5 * n)


@ray.remote
def sell_pear():
    Counter("items_sold", description="Items sold.", tag_keys=("item",)).inc(tags={"item": "pear"})


def test_metrics_from_actors_tasks_and_the_driver_reach_the_nodes_metrics(tmp_path, monkeypatch):
    with running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        cluster.start_head(num_cpus=2)
        ray.init()
        shop = Shop.remote()
        ray.get([shop.sell.remote(3), shop.sell.remote(30)])
        ray.get(sell_pear.remote())
        Gauge("driver_gauge", description="Set by the driver.").set(7)
        node = {"NodeAddress": "127.0.0.1"}

        def recorded():
            text = cluster.metrics_text()
            return (
                metric_sum(text, "ray_items_sold_total", item="apple", **node) == 33.0
                and metric_sum(text, "ray_items_sold_total", item="pear", **node) == 1.0
                and metric_sum(text, "ray_driver_gauge", **node) == 7.0
                and text
            )

        text = wait_until(lambda: f"the series on /metrics:\n{cluster.metrics_text()[-3000:]}", recorded, timeout=60)
        assert "# HELP ray_items_sold Items sold.\n# TYPE ray_items_sold counter\n" in text
        assert metric_sum(text, "ray_stock_left", item="apple") == 70.0
        buckets = {s["le"]: v for s, v in metric_samples(text, "ray_checkout_ms_bucket", **node)}
        assert buckets == {"10": 0.0, "100": 1.0, "+Inf": 2.0}, buckets
        assert metric_sum(text, "ray_checkout_ms_sum") == 165.0
        assert metric_sum(text, "ray_checkout_ms_count") == 2.0
        # Each process's series carry its own WorkerId: the actor's and the task's differ.
        workers = {s["WorkerId"] for s, _ in metric_samples(text, "ray_items_sold_total")}
        assert len(workers) == 2 and all(re.fullmatch("[0-9a-f]+", w) for w in workers), workers


def test_bad_use_is_an_error_naming_it():
    counter = Counter("requests", tag_keys=("route",))
    with pytest.raises(ValueError, match="Missing value for tag key"):
        counter.inc()
    with pytest.raises(ValueError, match="value must be >0, got 0"):
        counter.inc(0, tags={"route": "/"})
    with pytest.raises(ValueError, match="Unrecognized tag key nope"):
        counter.set_default_tags({"nope": "x"})
    with pytest.raises(TypeError, match="tag_keys should be a tuple"):
        Counter("c", tag_keys=["a"])
    with pytest.raises(ValueError, match="boundaries argument should be provided"):
        Histogram("h")
    with pytest.raises(ValueError, match="Use positive values"):
        Histogram("h", boundaries=[0, 1])
    Counter("twice").inc()
    with pytest.raises(ValueError, match='metric "twice" is a counter in this process; it cannot also be a gauge'):
        Gauge("twice").set(1)
    with pytest.warns(UserWarning, match="Invalid metric name: 1bad"):
        Counter("1bad").inc()  # discarded, as Ray does
    assert Histogram("h", boundaries=[1.0], tag_keys=("a",)).info == {
        "name": "h",
        "description": "",
        "tag_keys": ("a",),
        "default_tags": {},
        "boundaries": [1.0],
    }
