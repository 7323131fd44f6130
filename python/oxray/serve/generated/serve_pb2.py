"""The messages of Ray Serve's built-in gRPC service (`ray.serve.RayServeAPIService`):
`ListApplicationsRequest`/`ListApplicationsResponse` (`application_names`) and
`HealthzRequest`/`HealthzResponse` (`message`), built from their descriptors at import (they
need the `protobuf` package). They live in a descriptor pool of their own, so Ray's generated
module of the same names can be imported beside them."""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_FIELD = descriptor_pb2.FieldDescriptorProto


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(name="oxray/serve/serve.proto", package="ray.serve", syntax="proto3")
    messages = {
        "ListApplicationsRequest": [],
        "ListApplicationsResponse": [("application_names", 1, _FIELD.LABEL_REPEATED)],
        "HealthzRequest": [],
        "HealthzResponse": [("message", 1, _FIELD.LABEL_OPTIONAL)],
    }
    for name, fields in messages.items():
        message = proto.message_type.add(name=name)
        for field, number, label in fields:
            message.field.add(name=field, number=number, label=label, type=_FIELD.TYPE_STRING, json_name=field)
    service = proto.service.add(name="RayServeAPIService")
    for method in ("ListApplications", "Healthz"):
        service.method.add(
            name=method, input_type=f".ray.serve.{method}Request", output_type=f".ray.serve.{method}Response"
        )
    return proto


_POOL = descriptor_pool.DescriptorPool()
DESCRIPTOR = _POOL.Add(_file())

ListApplicationsRequest = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("ray.serve.ListApplicationsRequest")
)
ListApplicationsResponse = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("ray.serve.ListApplicationsResponse")
)
HealthzRequest = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("ray.serve.HealthzRequest"))
HealthzResponse = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("ray.serve.HealthzResponse"))
