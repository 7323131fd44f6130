"""Ray's `serve.generated`: the messages and client stub of Serve's built-in gRPC service
(`ray.serve.RayServeAPIService`), which every gRPC proxy answers."""
