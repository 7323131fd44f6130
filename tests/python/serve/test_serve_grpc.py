"""Serve's gRPC proxy as Ray Serve's gRPC guide uses it: protos compiled with grpcio-tools, their
`add_<Service>Servicer_to_server` named in `gRPCOptions`, a deployment whose methods are the
service's, and real `grpc` clients with the `application` metadata. Unary, server-streaming and
client-streaming calls, multiplexing, `grpc_context` codes and trailing metadata, the built-in
`RayServeAPIService`, an application without a route prefix, Ray's error codes, and the
proxy's Prometheus series."""

import os
import textwrap

import grpc
import pytest

import oxray as ray
from cli_cluster import free_port, running_cluster
from oxray import serve
from oxray.serve.config import gRPCOptions
from oxray_testutil import http_get_local, metric_sum, wait_until

pytest.importorskip("grpc_tools")

PROTO = textwrap.dedent(
    """
    syntax = "proto3";
    package userdefinedprotos;

    message UserDefinedMessage {
      string name = 1;
      string origin = 2;
      int64 num = 3;
    }
    message UserDefinedResponse {
      string greeting = 1;
      int64 num = 2;
    }
    message UserDefinedMessage2 {}
    message UserDefinedResponse2 {
      string greeting = 1;
    }

    service UserDefinedService {
      rpc __call__(UserDefinedMessage) returns (UserDefinedResponse);
      rpc Multiplexing(UserDefinedMessage2) returns (UserDefinedResponse2);
      rpc Streaming(UserDefinedMessage) returns (stream UserDefinedResponse);
      rpc Sum(stream UserDefinedMessage) returns (UserDefinedResponse);
      rpc Fail(UserDefinedMessage) returns (UserDefinedResponse);
      rpc Refuse(UserDefinedMessage) returns (UserDefinedResponse);
    }
    """
)

SERVICER = "user_defined_protos_pb2_grpc.add_UserDefinedServiceServicer_to_server"


@pytest.fixture
def protos(tmp_path, monkeypatch):
    """The guide's protos compiled into a directory the driver and the cluster's workers import from."""
    from grpc_tools import protoc

    out = tmp_path / "protos"
    out.mkdir()
    (out / "user_defined_protos.proto").write_text(PROTO)
    assert (
        protoc.main(
            [
                "protoc",
                f"-I{out}",
                f"--python_out={out}",
                f"--grpc_python_out={out}",
                str(out / "user_defined_protos.proto"),
            ]
        )
        == 0
    )
    monkeypatch.syspath_prepend(str(out))
    return str(out)


@serve.deployment(ray_actor_options={"num_cpus": 0})
class GrpcDeployment:
    def __call__(self, user_message):
        from user_defined_protos_pb2 import UserDefinedResponse

        greeting = f"Hello {user_message.name} from {user_message.origin}"
        return UserDefinedResponse(greeting=greeting, num=user_message.num * 2)

    @serve.multiplexed(max_num_models_per_replica=1)
    async def get_model(self, model_id: str) -> str:
        return f"loading model: {model_id}"

    async def Multiplexing(self, user_message):  # noqa: N802 - the gRPC method's name
        from user_defined_protos_pb2 import UserDefinedResponse2

        model = await self.get_model(serve.get_multiplexed_model_id())
        return UserDefinedResponse2(greeting=f"Method2 called model, {model}")

    def Streaming(self, user_message):  # noqa: N802
        from user_defined_protos_pb2 import UserDefinedResponse

        for i in range(10):
            yield UserDefinedResponse(greeting=f"{i}: Hello {user_message.name}", num=user_message.num * 2 + i)

    def Sum(self, messages):  # noqa: N802
        from user_defined_protos_pb2 import UserDefinedResponse

        names = [m.name for m in messages]
        return UserDefinedResponse(greeting=",".join(names), num=len(names))

    def Fail(self, user_message):  # noqa: N802
        raise ValueError(f"no greeting for {user_message.name}")

    def Refuse(self, user_message, grpc_context):  # noqa: N802
        from user_defined_protos_pb2 import UserDefinedResponse

        grpc_context.set_code(grpc.StatusCode.PERMISSION_DENIED)
        grpc_context.set_details(f"{user_message.name} may not ask")
        grpc_context.set_trailing_metadata([("reason", "policy")])
        return UserDefinedResponse()


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Hidden:
    def __call__(self, user_message):
        from user_defined_protos_pb2 import UserDefinedResponse

        return UserDefinedResponse(greeting=f"hidden {user_message.name}")


def test_grpc_calls_reach_deployments_as_rays_guide_makes_them(tmp_path, monkeypatch, protos):
    from user_defined_protos_pb2 import UserDefinedMessage, UserDefinedMessage2
    from user_defined_protos_pb2_grpc import UserDefinedServiceStub

    from oxray.serve.generated.serve_pb2 import HealthzRequest, ListApplicationsRequest
    from oxray.serve.generated.serve_pb2_grpc import RayServeAPIServiceStub

    env = {"PYTHONPATH": os.pathsep.join([protos, os.environ.get("PYTHONPATH", "")])}
    with running_cluster(tmp_path / "oxray", monkeypatch, env=env) as cluster:
        cluster.start_head(num_cpus=2)
        ray.init()
        http_port, grpc_port = free_port(), free_port()
        serve.start(
            http_options={"port": http_port},
            grpc_options=gRPCOptions(port=grpc_port, grpc_servicer_functions=[SERVICER]),
        )
        serve.run(GrpcDeployment.bind(), name="app1", route_prefix="/app1")
        serve.run(Hidden.bind(), name="hidden", route_prefix=None)
        channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        stub = UserDefinedServiceStub(channel)
        app1 = (("application", "app1"),)

        response, call = stub.__call__.with_call(UserDefinedMessage(name="foo", num=30, origin="bar"), metadata=app1)
        assert call.code() == grpc.StatusCode.OK
        assert (response.greeting, response.num) == ("Hello foo from bar", 60)
        assert dict(call.trailing_metadata())["request_id"]

        # Ray's request_id metadata comes back as given.
        _, call = stub.__call__.with_call(UserDefinedMessage(name="x"), metadata=app1 + (("request_id", "rid-1"),))
        assert dict(call.trailing_metadata())["request_id"] == "rid-1"

        streamed = list(stub.Streaming(UserDefinedMessage(name="foo", num=1), metadata=app1))
        assert [r.greeting for r in streamed] == [f"{i}: Hello foo" for i in range(10)]
        assert [r.num for r in streamed] == [2 + i for i in range(10)]

        total = stub.Sum(iter([UserDefinedMessage(name=n) for n in ("a", "b", "c")]), metadata=app1)
        assert (total.greeting, total.num) == ("a,b,c", 3)

        model = stub.Multiplexing(UserDefinedMessage2(), metadata=app1 + (("multiplexed_model_id", "999"),))
        assert model.greeting == "Method2 called model, loading model: 999"

        # The application without a route prefix: gRPC reaches it, HTTP does not.
        assert stub.__call__(UserDefinedMessage(name="h"), metadata=(("application", "hidden"),)).greeting == "hidden h"
        assert http_get_local(http_port, "/")[0] == 404

        with pytest.raises(grpc.RpcError) as error:
            stub.__call__(UserDefinedMessage(name="x"), metadata=(("application", "nope"),))
        assert error.value.code() == grpc.StatusCode.NOT_FOUND
        assert "Application 'nope' not found" in error.value.details()

        with pytest.raises(grpc.RpcError) as error:
            stub.__call__(UserDefinedMessage(name="x"))  # two applications: one must be named
        assert error.value.code() == grpc.StatusCode.NOT_FOUND

        with pytest.raises(grpc.RpcError) as error:
            stub.Fail(UserDefinedMessage(name="x"), metadata=app1)
        assert error.value.code() == grpc.StatusCode.INTERNAL
        assert "no greeting for x" in error.value.details()

        with pytest.raises(grpc.RpcError) as error:
            stub.Refuse(UserDefinedMessage(name="eve"), metadata=app1)
        assert error.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert error.value.details() == "eve may not ask"
        assert dict(error.value.trailing_metadata())["reason"] == "policy"

        api = RayServeAPIServiceStub(channel)
        assert sorted(api.ListApplications(ListApplicationsRequest()).application_names) == ["app1", "hidden"]
        assert api.Healthz(HealthzRequest()).message == "success"

        def counted():
            text = cluster.metrics_text()
            ok = metric_sum(text, "ray_serve_num_grpc_requests_total", application="app1", status_code="OK")
            return ok == 5 and text  # __call__ twice, Streaming, Sum and Multiplexing

        text = wait_until(lambda: f"the gRPC series:\n{cluster.metrics_text()[-3000:]}", counted, timeout=60)
        errors = metric_sum(text, "ray_serve_num_grpc_error_requests_total", application="app1")
        assert errors == 2, text[-3000:]  # Fail (INTERNAL) and Refuse (its own PERMISSION_DENIED)
        assert metric_sum(text, "ray_serve_num_grpc_requests_total", status_code="PERMISSION_DENIED") == 1
        assert metric_sum(text, "ray_serve_num_grpc_requests_total", status_code="NOT_FOUND") == 2
        channel.close()
        serve.shutdown()


def test_grpc_options_are_checked():
    with pytest.raises(ValueError, match="import paths"):
        gRPCOptions(grpc_servicer_functions=["nodots"])
    with pytest.raises(ValueError, match="port"):
        gRPCOptions(port=70000)
    with pytest.raises(NotImplementedError, match="enable_reflection"):
        gRPCOptions(grpc_servicer_functions=[SERVICER], enable_reflection=True)
    assert gRPCOptions().to_wire() is None, "no servicer functions: no gRPC proxy"
    assert gRPCOptions(port=9001, grpc_servicer_functions=[SERVICER]).to_wire()["port"] == 9001


def test_a_config_with_grpc_options_put_through_the_rest_api_serves_grpc(tmp_path, monkeypatch, protos):
    import json

    from user_defined_protos_pb2 import UserDefinedMessage
    from user_defined_protos_pb2_grpc import UserDefinedServiceStub

    from oxray_testutil import http_call

    with open(os.path.join(protos, "grpc_app.py"), "w") as f:
        f.write("from test_serve_grpc import GrpcDeployment\n\napp = GrpcDeployment.bind()\n")
    env = {"PYTHONPATH": os.pathsep.join([protos, os.environ.get("PYTHONPATH", "")])}
    with running_cluster(tmp_path / "oxray", monkeypatch, env=env) as cluster:
        cluster.start_head(num_cpus=2)
        grpc_port = free_port()
        config = {
            "http_options": {"port": free_port()},
            "grpc_options": {"port": grpc_port, "grpc_servicer_functions": [SERVICER], "enable_reflection": False},
            "applications": [{"name": "app1", "route_prefix": "/app1", "import_path": "grpc_app:app"}],
        }
        url = f"{cluster.dashboard_url}/api/serve/applications/"
        status, body = http_call("PUT", url, token=cluster.token, body=json.dumps(config).encode())
        assert status == 200, body

        def running():
            _, body = http_call("GET", url, token=cluster.token)
            details = json.loads(body)
            app = details.get("applications", {}).get("app1")
            return app is not None and app["status"] == "RUNNING" and details

        details = wait_until("app1 RUNNING", running, timeout=120)
        assert details["grpc_options"] == {"port": grpc_port, "grpc_servicer_functions": [SERVICER]}
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            reply = UserDefinedServiceStub(channel).__call__(UserDefinedMessage(name="cfg", origin="yaml", num=2))
        assert (reply.greeting, reply.num) == ("Hello cfg from yaml", 4)
        reflect = {**config, "grpc_options": {**config["grpc_options"], "enable_reflection": True}}
        status, body = http_call("PUT", url, token=cluster.token, body=json.dumps(reflect).encode())
        assert status == 400 and "enable_reflection" in body, (status, body)
