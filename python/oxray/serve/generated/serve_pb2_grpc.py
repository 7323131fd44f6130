"""The client stub of Ray Serve's built-in gRPC service, as Ray's generated module has it:
`RayServeAPIServiceStub(channel)` with `ListApplications` and `Healthz` (needs `grpcio`)."""

from __future__ import annotations

from oxray.serve.generated import serve_pb2

_SERVICE = "/ray.serve.RayServeAPIService/"


class RayServeAPIServiceStub:
    def __init__(self, channel):
        self.ListApplications = channel.unary_unary(
            _SERVICE + "ListApplications",
            request_serializer=serve_pb2.ListApplicationsRequest.SerializeToString,
            response_deserializer=serve_pb2.ListApplicationsResponse.FromString,
        )
        self.Healthz = channel.unary_unary(
            _SERVICE + "Healthz",
            request_serializer=serve_pb2.HealthzRequest.SerializeToString,
            response_deserializer=serve_pb2.HealthzResponse.FromString,
        )
