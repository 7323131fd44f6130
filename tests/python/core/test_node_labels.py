"""Node labels as Ray's tests use them: `init(labels=)` and `oxray start --labels`,
`ray.io/node-id` on every node, `label_selector` on tasks and actors, and a
placement group's `bundle_label_selector` and `topology_strategy`."""

import os

import pytest

import oxray as ray
from cli_cluster import running_cluster
from oxray.util import placement_group, placement_group_table, remove_placement_group


@ray.remote
def where():
    return os.environ["OXRAY_NODE_ID"], ray.get_runtime_context().get_node_labels()


@ray.remote
class Where:
    def node(self):
        return os.environ["OXRAY_NODE_ID"]


def test_labels_of_an_embedded_cluster(fresh_cluster):
    fresh_cluster(labels={"zone": "a", "tier": "cpu"})
    [node] = ray.nodes()
    assert node["Labels"]["zone"] == "a" and node["Labels"]["ray.io/node-id"] == node["NodeID"]
    node_id, labels = ray.get(where.options(label_selector={"zone": "a"}).remote())
    assert node_id == node["NodeID"] and labels["tier"] == "cpu"
    assert ray.get(where.options(label_selector={"zone": "!b", "tier": "in(cpu, gpu)"}).remote())[0] == node_id
    # No node could ever match: on a lone cluster that fails at once, naming the selector.
    with pytest.raises(ray.exceptions.TaskUnschedulableError, match="zone=b"):
        ray.get(where.options(label_selector={"zone": "b"}).remote())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"strategy": "PACK", "topology_strategy": {"zone": "STRICT_PACK"}}, "cannot both be specified"),
        ({"topology_strategy": ["zone"]}, "must be a dict"),
        ({"topology_strategy": {"zone": "PACK"}}, "only 'STRICT_PACK'"),
        ({"topology_strategy": {"zone": "STRICT_PACK", "rack": "STRICT_PACK"}}, "at most one topology label"),
        ({"topology_strategy": {"ray.io/node-id": "PAKC"}}, "Invalid topology strategy 'PAKC'"),
    ],
)
def test_bad_topology_strategies_are_refused_as_ray_refuses_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        placement_group([{"CPU": 1}], **kwargs)


@pytest.mark.parametrize(
    "options, error",
    [
        ({"label_selector": {"r!a!y.io/market_type": "spot"}}, ValueError),  # a prefix that is no DNS name
        ({"label_selector": {"??==ags!": "true"}}, ValueError),
        ({"label_selector": {"ray.io/accelerator_type": "??==ags!"}}, ValueError),
        ({"label_selector": {"ray.io/accelerator_type": "in(H100,, B200)"}}, ValueError),
        ({"label_selector": ""}, TypeError),
        ({"fallback_strategy": {"label_selector": {"market-type": "spot"}}}, TypeError),
        ({"fallback_strategy": ["not-a-dict"]}, ValueError),
        ({"fallback_strategy": [{"memory": "1Gi"}]}, ValueError),
        ({"fallback_strategy": [{"label_selector": {"-bad-key-": "value"}}]}, ValueError),
        ({"fallback_strategy": [{"label_selector": {"key": "-bad-value-"}}]}, ValueError),
    ],
)
def test_label_syntax_is_checked_as_rays_is(options, error):
    with pytest.raises(error):
        where.options(**options)
    good = {"label_selector": {"ray.io/accelerator-type": "in(H100, B200)", "market-type": "!spot"}}
    where.options(**good, fallback_strategy=[{"label_selector": {"region": "in(us-west-1, us-east-1)"}}])


def test_bad_selectors_and_labels_are_refused(fresh_cluster):
    with pytest.raises(ValueError, match="not a condition"):
        where.options(label_selector={"zone": "in(a,"})
    with pytest.raises(TypeError, match="label_selector"):
        where.options(label_selector={"zone": 1})
    with pytest.raises(TypeError, match="labels"):
        ray.init(labels={"zone": 1})


@pytest.fixture
def labelled_nodes(tmp_path, monkeypatch):
    with running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        cluster.start_head(num_cpus=1)
        # Ray's three spellings: a (quoted) string of pairs, a JSON object, and a YAML file.
        cluster.add_node(num_cpus=1, resources={"node_b": 1}, labels='"zone=b,tier=gpu"')
        labels_file = tmp_path / "labels.yaml"
        labels_file.write_text("zone: c\n")
        cluster.add_node(
            num_cpus=1, resources={"node_c": 1}, labels='{"rack": "r1"}', extra=["--labels-file", str(labels_file)]
        )
        ray.init()
        cluster.wait_nodes(3)
        yield cluster


@pytest.mark.parametrize(
    "labels", ["xxx", "a=b=c", '{"gpu_type": 1}', '{"ray.io/node-id": "111"}', "ray.io/other=1", "{not json"]
)
def test_oxray_start_refuses_bad_labels_in_rays_words(tmp_path, monkeypatch, labels):
    with running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        refused = cluster.cli("start", "--head", f"--labels={labels}", check=False)
        assert refused.returncode == 1 and "Label string is not a key-value pair." in refused.stderr, refused.stderr
        assert not cluster.records()


def test_label_selectors_place_work_on_matching_nodes(labelled_nodes):
    b = labelled_nodes.node_with("node_b")["node_id"]
    c = labelled_nodes.node_with("node_c")["node_id"]
    labels = {n["NodeID"]: n["Labels"] for n in ray.nodes()}
    assert labels[b]["zone"] == "b" and labels[b]["tier"] == "gpu" and labels[c]["zone"] == "c"
    assert labels[c]["rack"] == "r1"
    assert {ray.get(where.options(label_selector={"zone": "b"}).remote())[0] for _ in range(3)} == {b}
    assert ray.get(where.options(label_selector={"zone": "in(c)"}).remote())[0] == c
    # fallback_strategy: no node is in zone x, so the first fallback that some node matches decides.
    fallback = [{"label_selector": {"zone": "y"}}, {"label_selector": {"zone": "c"}}]
    assert ray.get(where.options(label_selector={"zone": "x"}, fallback_strategy=fallback).remote())[0] == c
    assert ray.get(where.options(label_selector={"zone": "b"}, fallback_strategy=fallback).remote())[0] == b
    actor = Where.options(label_selector={"tier": "gpu"}).remote()
    assert ray.get(actor.node.remote()) == b
    # Bundles follow their own selectors.
    pg = placement_group(
        [{"CPU": 0.5}, {"CPU": 0.5}], strategy="PACK", bundle_label_selector=[{"zone": "c"}, {"zone": "b"}]
    )
    ray.get(pg.ready())
    assert placement_group_table(pg)["bundles_to_node_id"] == {0: c, 1: b}
    remove_placement_group(pg)
    # topology_strategy: SPREAD across nodes, but within one zone. Unconstrained, SPREAD would put
    # the two bundles on two nodes; each zone here is one node, so both share it.
    pg = placement_group(
        [{"CPU": 0.5}, {"CPU": 0.5}], topology_strategy={"ray.io/node-id": "SPREAD", "zone": "STRICT_PACK"}
    )
    ray.get(pg.ready())
    placed = placement_group_table(pg)["bundles_to_node_id"]
    assert placed[0] == placed[1] and placed[0] in (b, c)
    remove_placement_group(pg)
    with pytest.raises(ValueError, match="one label selector per bundle"):
        placement_group([{"CPU": 0.5}], bundle_label_selector=[{"zone": "b"}, {"zone": "c"}])
