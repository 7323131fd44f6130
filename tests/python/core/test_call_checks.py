"""Calls checked the way Ray checks them, before anything is submitted: arguments
against the function's or method's signature, `@remote()` with nothing in it, the
reserved resource name `bundle`, and closures too large to ship."""

import numpy as np
import pytest

import oxray as ray


@ray.remote
def add(x, y=1, *, scale=1):
    return (x + y) * scale


@ray.remote
class Account:
    def __init__(self, owner, balance=0):
        self.owner, self.balance = owner, balance

    def deposit(self, amount):
        self.balance += amount
        return self.balance

    @staticmethod
    def fee(amount):
        return amount // 100

    @classmethod
    def kind(cls, verbose=False):
        return cls.__name__


def test_task_arguments_are_checked_at_the_call(ray_cluster):
    assert ray.get(add.remote(1, 2, scale=3)) == 9
    with pytest.raises(TypeError, match="missing a required argument: 'x'"):
        add.remote()
    with pytest.raises(TypeError, match="too many positional arguments"):
        add.remote(1, 2, 3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        add.remote(1, z=2)


def test_actor_constructor_and_method_arguments_are_checked(ray_cluster):
    with pytest.raises(TypeError, match="missing a required argument: 'owner'"):
        Account.remote()
    a = Account.remote("ann", balance=5)
    assert ray.get(a.deposit.remote(10)) == 15
    with pytest.raises(TypeError, match="Account.deposit.remote"):
        a.deposit.remote()
    assert ray.get(a.fee.remote(250)) == 2
    assert ray.get(a.kind.remote(verbose=True)) == "Account"
    with pytest.raises(TypeError):
        a.fee.remote(1, 2)


def test_remote_with_empty_parentheses_is_an_error():
    with pytest.raises(TypeError, match="@remote"):

        @ray.remote()
        def f():
            return 1


def test_bundle_is_a_reserved_resource_name():
    with pytest.raises(ValueError, match="'bundle' is a reserved resource name"):
        add.options(resources={"bundle": 1})


def test_a_closure_too_large_to_ship_is_refused(ray_cluster):
    big = np.zeros(100 * 1024 * 1024, dtype=np.uint8)

    @ray.remote
    def uses_big():
        return big.size

    with pytest.raises(ValueError, match="too large.*capturing a large array"):
        uses_big.remote()


def test_the_fast_argument_check_agrees_with_a_direct_call():
    # `.remote()` answers the common positional call by counting; every shape of
    # signature must accept and refuse exactly what calling the function would.
    from oxray._private.submission import signature_of

    def plain(a, b): ...
    def defaults(a, b=1, c=2): ...
    def star(a, *rest): ...
    def keyword_only(a, *, k): ...
    def keyword_only_default(a, *, k=1): ...
    def positional_only(a, b=2, /): ...
    def anything(*args, **kwargs): ...
    def nothing(): ...

    calls = [((), {}), ((1,), {}), ((1, 2), {}), ((1, 2, 3), {}), ((1, 2, 3, 4), {}), ((1,), {"k": 2}), ((), {"a": 1})]
    for fn in (plain, defaults, star, keyword_only, keyword_only_default, positional_only, anything, nothing):
        check = signature_of(fn)
        for args, kwargs in calls:
            try:
                fn(*args, **kwargs)
                direct_ok = True
            except TypeError:
                direct_ok = False
            try:
                check.check(args, kwargs, fn.__name__)
                checked_ok = True
            except TypeError as e:
                assert f"{fn.__name__}.remote()" in str(e)
                checked_ok = False
            assert checked_ok == direct_ok, (fn.__name__, args, kwargs)


def test_underscore_remote_takes_args_kwargs_and_options(ray_cluster):
    # Ray's `_remote(args=, kwargs=, **options)`, which Ray's own tests and libraries call.
    assert ray.get(add._remote(args=[1], kwargs={"y": 2, "scale": 2}, num_cpus=0.5)) == 6
    account = Account._remote(args=["ann"], kwargs={"balance": 1}, max_restarts=1)
    assert ray.get(account.deposit.remote(2)) == 3
    with pytest.raises(ValueError, match="Invalid option keyword 'colour'"):
        add._remote(args=[1], colour="red")
    with pytest.raises(TypeError, match="missing a required argument"):
        add._remote()


@ray.remote
def call_inside(remote_callable, *args):
    """Calls `remote_callable` from a worker: a copy of the function or handle travelled there."""
    try:
        remote_callable.remote(*args)
    except TypeError as e:
        return f"TypeError: {e}"
    return "accepted"


def test_copies_of_functions_and_handles_check_calls_too(ray_cluster):
    account = Account.remote("ann")
    assert "missing a required argument" in ray.get(call_inside.remote(add))
    assert "missing a required argument" in ray.get(call_inside.remote(account.deposit))
    assert ray.get(call_inside.remote(account.deposit, 1)) == "accepted"


def test_a_signature_travels_without_its_defaults():
    # A handle's copies carry its methods' parameter shapes only: a default that cannot be
    # pickled does not stop the handle from being passed on.
    import pickle
    import threading

    from oxray._private.submission import signature_of

    unpicklable = threading.Lock()

    def take(n, guard=unpicklable, *rest, key, **more): ...

    copy = pickle.loads(pickle.dumps(signature_of(take)))
    copy.check((1,), {"key": 2}, "take")
    with pytest.raises(TypeError, match="missing a required argument: 'key'"):
        copy.check((1,), {}, "take")


def test_a_methods_invocation_decorator_rewrites_the_call(ray_cluster):
    # Ray's `__ray_invocation_decorator__`: the caller's side of a method decorator.
    def on_the_caller(f):
        def invoke(args, kwargs):
            return f([args[0], args[0]], {}), kwargs  # one argument becomes two; kwargs stay here

        return invoke

    def on_the_actor(f):
        def execute(self, b, c):
            return f(self, b + c)

        execute.__ray_invocation_decorator__ = on_the_caller
        return execute

    @ray.remote
    class Adder:
        @on_the_actor
        def plus_one(self, x):
            return x + 1

    ref, extra = Adder.remote().plus_one.remote(3, kept=True)
    assert ray.get(ref) == 7 and extra == {"kept": True}
