# As Ray Serve's docs write it (getting started, model composition, batching), with one line changed.
import requests
from starlette.requests import Request

import oxray as ray
from oxray import serve


@serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0.2})
class Translator:
    def __init__(self):
        self.table = {"hello": "bonjour", "world": "monde"}

    def translate(self, text: str) -> str:
        return " ".join(self.table.get(w, w) for w in text.split())


@serve.deployment(ray_actor_options={"num_cpus": 0.2})
class Summarizer:
    def __init__(self, translator):
        self.translator = translator

    def summarize(self, text: str) -> str:
        return text.split(".")[0]

    async def __call__(self, http_request: Request) -> str:
        english: str = await http_request.json()
        summary = self.summarize(english)
        return await self.translator.translate.remote(summary)


@serve.deployment(ray_actor_options={"num_cpus": 0.2})
class BatchedModel:
    @serve.batch(max_batch_size=4, batch_wait_timeout_s=0.05)
    async def handle_batch(self, numbers: list[int]) -> list[int]:
        return [n * 2 for n in numbers]

    async def __call__(self, request: Request) -> int:
        return await self.handle_batch(int(request.query_params["n"]))


serve.run(Summarizer.bind(Translator.bind()), name="summarizer", route_prefix="/summarize")
response = requests.post("http://127.0.0.1:8000/summarize", json="hello world. and more text")
assert response.status_code == 200 and response.text == "bonjour monde", response.text

serve.run(BatchedModel.bind(), name="batched", route_prefix="/double")

results = [requests.get("http://127.0.0.1:8000/double", params={"n": n}).json() for n in range(4)]
assert results == [0, 2, 4, 6], results
print("OK", serve.status().applications["summarizer"].status)
serve.shutdown()
ray.shutdown()
