# As Ray Serve's docs write a FastAPI ingress (http guide), with one line changed.
import requests
from fastapi import FastAPI

import oxray as ray
from oxray import serve

app = FastAPI()


@serve.deployment(ray_actor_options={"num_cpus": 0.2})
@serve.ingress(app)
class MyFastAPIDeployment:
    @app.get("/")
    def root(self):
        return "Hello, world!"

    @app.post("/{subpath}")
    def root_subpath(self, subpath: str):
        return f"Hello from {subpath}!"


serve.run(MyFastAPIDeployment.bind(), route_prefix="/hello")
resp = requests.get("http://localhost:8000/hello")
assert resp.json() == "Hello, world!"
resp = requests.post("http://localhost:8000/hello/Serve")
assert resp.json() == "Hello from Serve!"
print("OK")
serve.shutdown()
ray.shutdown()
