"""Bad input from users: odd timeouts and quantities must give a clear
`ValueError` naming the value (or work, for `inf`), never a Rust panic, which
`except Exception` would not catch."""

import math

import pytest

import oxray as ray
from oxray._private.api import _client


@ray.remote
def identity(x):
    return x


def test_get_and_wait_with_infinite_timeout_wait_without_limit(ray_cluster):
    ref = identity.remote(7)
    assert ray.get(ref, timeout=float("inf")) == 7
    assert ray.get(ref, timeout=1e300) == 7
    ready, pending = ray.wait([ref], timeout=float("inf"))
    assert ready == [ref] and pending == []
    ready, _ = ray.wait([ref], timeout=1e300)
    assert ready == [ref]


@pytest.mark.parametrize("timeout", [float("nan"), -1.0, float("-inf")])
def test_get_and_wait_refuse_nan_and_negative_timeouts(ray_cluster, timeout):
    ref = ray.put(1)
    for call in (lambda: ray.get(ref, timeout=timeout), lambda: ray.wait([ref], timeout=timeout)):
        with pytest.raises(ValueError, match="timeout"):
            call()


@pytest.mark.parametrize("timeout", [float("nan"), -1.0, float("-inf")])
def test_native_get_and_wait_refuse_bad_timeouts_themselves(ray_cluster, timeout):
    """The native client checks too: the Python wrapper is not the only guard."""
    ref = ray.put(1)
    with pytest.raises(ValueError, match=r"(?i)timeout .*(nan|-1\.0|-inf)"):
        _client().get([ref._id], timeout)
    with pytest.raises(ValueError, match=r"(?i)timeout .*(nan|-1\.0|-inf)"):
        _client().wait([ref._id], 1, timeout)


def test_native_get_with_infinite_timeout_is_no_limit(ray_cluster):
    ref = ray.put("x")
    assert len(_client().get([ref._id], math.inf)) == 1
    assert _client().wait([ref._id], 1, math.inf) == [ref._id]


@pytest.mark.parametrize("quantity", [1e300, float("inf"), float("nan"), -1.0])
def test_huge_or_invalid_resource_quantities_are_refused(ray_cluster, quantity):
    with pytest.raises(ValueError, match="resource"):
        identity.options(resources={"custom_a": quantity}).remote(1)


@pytest.mark.parametrize(
    "kwargs",
    [dict(num_gpus=10**15), dict(num_cpus=1e300), dict(num_cpus=float("nan")), dict(resources={"big": 1e300})],
)
def test_init_refuses_absurd_node_quantities(fresh_cluster, kwargs):
    with pytest.raises(ValueError, match=r"num_gpus|CPU|big"):
        fresh_cluster(**kwargs)


def test_an_absurd_num_returns_is_refused_not_a_hang(ray_cluster):
    for target in (identity, Holder):
        with pytest.raises(ValueError, match="num_returns.*1099511627776"):
            (
                target.options(num_returns=2**40)
                if target is identity
                else target.remote().get.options(num_returns=2**40)
            )
    assert ray.get(identity.options(num_returns=2).remote((1, 2))) == [1, 2]


@ray.remote
class Holder:
    def get(self, value=None):
        return value
