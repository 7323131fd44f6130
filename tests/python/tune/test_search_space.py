"""Search spaces as Ray defines them, without a cluster: bounds of each
domain, grid x num_samples in Ray's order, nested keys, sample_from seeing
the config resolved so far, and bad bounds refused by name."""

import random

import pytest

from oxray import tune
from oxray.tune.search.variant_generator import format_vars, generate_variants


def draws(domain, n=2000, seed=0):
    rng = random.Random(seed)
    return [domain.sample(rng=rng) for _ in range(n)]


def test_each_domain_keeps_to_rays_bounds():
    assert set(draws(tune.randint(0, 3))) == {0, 1, 2}, "randint's upper bound is exclusive"
    assert set(draws(tune.qrandint(0, 10, 5))) == {0, 5, 10}, "qrandint's upper bound is inclusive for q > 1"
    assert set(draws(tune.qrandint(1, 3))) == {1, 2}, "and exclusive for q == 1"
    values = draws(tune.quniform(0.0, 1.0, 0.25))
    assert set(values) == {0.0, 0.25, 0.5, 0.75, 1.0}
    assert all(1e-3 <= v <= 1.0 for v in draws(tune.loguniform(1e-3, 1.0)))
    log = draws(tune.loguniform(1e-4, 1.0))
    assert sum(v < 1e-2 for v in log) > 0.4 * len(log), "log-uniform: half the draws under 1e-2"
    assert all(1 <= v < 100 for v in draws(tune.lograndint(1, 100)))
    assert set(draws(tune.choice(["a", "b"]))) == {"a", "b"}
    normal = draws(tune.randn(10.0, 2.0))
    assert abs(sum(normal) / len(normal) - 10.0) < 0.3
    assert all(v % 0.5 == 0 for v in draws(tune.qrandn(0.0, 1.0, 0.5)))


def test_a_grid_is_crossed_with_the_other_grids_and_repeated_num_samples_times():
    space = {"a": tune.grid_search([1, 2]), "nested": {"b": tune.grid_search(["x", "y", "z"])}, "c": 7}
    configs = [config for config, _ in generate_variants(space, 2, random.Random(0))]
    assert len(configs) == 12
    # The first key varies fastest, as in Ray.
    assert [(c["a"], c["nested"]["b"]) for c in configs[:6]] == [
        (1, "x"),
        (2, "x"),
        (1, "y"),
        (2, "y"),
        (1, "z"),
        (2, "z"),
    ]
    assert all(c["c"] == 7 for c in configs)


def test_sample_from_sees_the_resolved_config_and_tags_name_what_varied():
    space = {
        "width": tune.grid_search([4, 8]),
        "height": tune.sample_from(lambda spec: spec.config.width * 2),
        "fixed": "same",
    }
    variants = list(generate_variants(space, 1, random.Random(0)))
    assert [c["height"] for c, _ in variants] == [8, 16]
    assert format_vars(variants[0][1]) == "width=4,height=8"


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: tune.uniform(1, 1), "lower bound 1 is not below the upper bound 1"),
        (lambda: tune.loguniform(0, 1), "needs a lower bound above 0"),
        (lambda: tune.randint(0.5, 3), "lower is 0.5; expected an integer"),
        (lambda: tune.choice([]), "expected a non-empty list"),
        (lambda: tune.grid_search([]), "expected at least one value"),
        (lambda: tune.quniform(0, 1, 0), "q is 0; expected a number above 0"),
        (lambda: tune.sample_from(3), "expected a function"),
    ],
)
def test_bad_bounds_are_refused_by_name(make, expected):
    with pytest.raises(ValueError, match=expected):
        make()


def test_rays_builder_style_domains_and_sample_sizes():
    from oxray.tune.search.sample import Categorical, Float, Integer

    bounded = Float(-4.2, 8.3)
    samples = bounded.uniform().sample(size=1000, random_state=0)
    assert len(samples) == 1000 and all(-4.2 <= s <= 8.3 for s in samples)
    with pytest.raises(ValueError, match="normal sampling takes no bounds"):
        bounded.normal()
    with pytest.raises(ValueError, match="a domain takes one sampler"):
        Float(1, 2).uniform().loguniform()
    with pytest.raises(ValueError, match="needs finite bounds"):
        Float(None, None).uniform()
    logs = Float(1e-4, 1e-1).loguniform().sample(size=500, random_state=1)
    assert all(1e-4 <= s <= 1e-1 for s in logs) and min(logs) < 1e-3
    normals = Float(None, None).normal(5, 0.1).sample(size=200, random_state=2)
    assert 4.9 < sum(normals) / 200 < 5.1
    assert set(Float(0, 10).uniform().quantized(5).sample(size=100, random_state=3)) <= {0.0, 5.0, 10.0}
    assert set(Integer(-3, 12).uniform().sample(size=500, random_state=4)) == set(range(-3, 12))
    assert Categorical(["a"]).uniform().sample() == "a"
    assert tune.sample_from(lambda: 7).sample() == 7, "a function of no arguments is called without the spec"
    with pytest.raises(ValueError, match="lower is None"):
        tune.uniform(None, 1)
    with pytest.raises(ValueError, match=r"sample\(size=0\)"):
        tune.choice([1]).sample(size=0)


def configs(space, n=1):
    return [config for config, _ in generate_variants(space, n, random.Random(0))]


def test_sample_from_reads_other_functions_whatever_their_order_as_rays_passes():
    space = {
        "z": tune.sample_from(lambda spec: spec["config"]["y"] + 1),
        "y": tune.sample_from(lambda spec: spec.config.x + 1),
        "x": 1,
        "nested": {"c": 3, "b": tune.sample_from(lambda spec: spec.config.nested.c * spec["config"]["z"])},
    }
    assert configs(space) == [{"z": 3, "y": 2, "x": 1, "nested": {"c": 3, "b": 9}}]


def test_a_grid_of_sample_from_functions_resolves_each_with_the_spec():
    space = {
        "x": tune.grid_search(
            [tune.sample_from(lambda spec: spec.config.y * 100), tune.sample_from(lambda spec: spec.config.y * 200)]
        ),
        "y": tune.sample_from(lambda spec: 1),
        "g": tune.grid_search([1, 2]),
        "h": tune.sample_from(lambda spec: spec.config.g * 10),
    }
    assert configs(space) == [
        {"x": 100, "y": 1, "g": 1, "h": 10},
        {"x": 200, "y": 1, "g": 1, "h": 10},
        {"x": 100, "y": 1, "g": 2, "h": 20},
        {"x": 200, "y": 1, "g": 2, "h": 20},
    ]


def test_a_sample_from_cycle_raises_rays_recursive_dependency_error():
    from oxray.tune.search.variant_generator import RecursiveDependencyError

    with pytest.raises(RecursiveDependencyError, match="`foo` recursively depends on 'foo'"):
        configs({"foo": tune.sample_from(lambda spec: spec.config.foo)})
    with pytest.raises(RecursiveDependencyError, match="recursively depends on"):
        configs({"a": tune.sample_from(lambda spec: spec.config.b), "b": tune.sample_from(lambda spec: spec.config.a)})
    with pytest.raises(ValueError, match="one argument"):
        tune.sample_from(lambda a, b: a)


def test_sample_from_gets_the_config_itself_and_older_spec_functions_still_work(caplog):
    space = {
        "param1": 3,
        "as_config": tune.sample_from(lambda config: config["param1"] * 2),
        "as_attribute": tune.sample_from(lambda config: config.param1 + 1),
        "as_spec": {"a": tune.sample_from(lambda spec: spec["config"]["param1"])},
        "as_spec_dots": tune.sample_from(lambda spec: spec.config["param1"] - 1),
        "before_its_input": tune.sample_from(lambda config: config["as_config"] + 1),
    }
    assert configs(space) == [
        {"param1": 3, "as_config": 6, "as_attribute": 4, "as_spec": {"a": 3}, "as_spec_dots": 2, "before_its_input": 7}
    ]
    assert "sample_from functions that take a spec dict are deprecated" in caplog.text
    with pytest.raises(KeyError, match="missing"):
        configs({"x": tune.sample_from(lambda config: config["missing"])})
