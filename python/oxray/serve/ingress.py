"""`@serve.ingress(app)`: a deployment class that serves an ASGI app (FastAPI, a FastAPI
`APIRouter`, any ASGI callable, or a function that builds one when the replica starts). As in
Ray, the app is frozen (cloudpickled) when the class is decorated, and routes written as methods
of the class get the replica's object as `self`."""

from __future__ import annotations

import collections
import inspect
import io

from oxray import cloudpickle

_APP_ATTRIBUTE = "__oxray_serve_asgi_app__"


def ingress(app):
    """Ray's `serve.ingress`: decorates a class whose replicas serve `app` over HTTP."""

    def decorator(cls):
        if not inspect.isclass(cls):
            raise ValueError("@serve.ingress must be used with a class.")
        if "__call__" in vars(cls):
            raise ValueError("Classes passed to @serve.ingress may not have __call__ method.")
        setattr(cls, _APP_ATTRIBUTE, _freeze(app))
        return cls

    return decorator


def _freeze(app) -> bytes:
    """`app` cloudpickled, with Starlette's `State` (`app.state`) by its contents: its
    `__getattr__` makes it unpicklable as it is (Ray registers the same serializer)."""
    pickler_class = cloudpickle.CloudPickler
    try:
        from starlette.datastructures import State

        class AppPickler(cloudpickle.CloudPickler):
            # Read when the pickler is made, so a class attribute.
            dispatch_table = collections.ChainMap(
                {State: lambda state: (State, (state._state,))}, cloudpickle.CloudPickler.dispatch_table
            )

        pickler_class = AppPickler
    except ImportError:
        pass
    out = io.BytesIO()
    pickler = pickler_class(out, protocol=5)
    pickler.dump(app)
    return out.getvalue()


def build_asgi_app(target):
    """The ASGI app a replica's object serves, or None when its class is not an ingress."""
    frozen = getattr(type(target), _APP_ATTRIBUTE, None)
    if frozen is None:
        builder = getattr(target, "__serve_build_asgi_app__", None)
        return builder() if builder is not None else None
    app = cloudpickle.loads(frozen)
    try:
        from fastapi import APIRouter, FastAPI
    except ImportError:
        FastAPI = APIRouter = None  # noqa: N806 - the classes' own names
    if APIRouter is not None and isinstance(app, APIRouter):
        router, app = app, FastAPI()
        app.include_router(router)
    elif FastAPI is None or not isinstance(app, FastAPI):
        if inspect.isfunction(app) and not inspect.signature(app).parameters:
            app = app()  # a builder, called at replica start
        return app
    _bind_class_routes(app, target)
    return app


def _bind_class_routes(app, target) -> None:
    """Routes whose endpoints are the class's own functions are rebuilt around the replica's
    bound methods, so FastAPI sees no `self` parameter (Ray's class-based views)."""
    from fastapi.routing import APIRoute, APIWebSocketRoute

    classes = type(target).__mro__
    parameters = [p for p in inspect.signature(APIRoute.__init__).parameters if p not in ("self", "path", "endpoint")]
    for i, route in enumerate(app.router.routes):
        endpoint = getattr(route, "endpoint", None)
        name = getattr(endpoint, "__name__", None)
        # By the class's name and the method's: a class pickled by value loses its full
        # `__qualname__` (it is defined in a function), the functions keep theirs.
        qualname = getattr(endpoint, "__qualname__", "")
        if not any(name in vars(c) and qualname.endswith(f"{c.__name__}.{name}") for c in classes):
            continue
        bound = getattr(target, endpoint.__name__)
        if isinstance(route, APIRoute):
            kwargs = {p: getattr(route, p) for p in parameters if hasattr(route, p)}
            app.router.routes[i] = APIRoute(route.path, bound, **kwargs)
        elif isinstance(route, APIWebSocketRoute):
            app.router.routes[i] = APIWebSocketRoute(route.path, bound, name=route.name)
    app.openapi_schema = None
