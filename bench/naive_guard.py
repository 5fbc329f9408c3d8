"""The guard most teams would write first, as the benchmark's Python baseline.

FastAPI + transformers: render and tokenize the chat with
AutoTokenizer.apply_chat_template(tokenize=True), refuse a prompt of
>= --limit tokens with SGLang's 400, otherwise forward the body unchanged to
the upstream with httpx. One uvicorn worker, as such a sidecar is usually run.
It is a baseline to measure, not a safe guard (it checks chat only and trusts
everything else it is sent).

Usage: python bench/naive_guard.py --tokenizer DIR --upstream URL --limit N --port P
"""

import argparse
import os

# Read at import time by huggingface_hub: hub lookups would only slow the start
# (and fail: the benchmark runs offline).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402
import uvicorn  # noqa: E402
from fastapi import FastAPI, Request  # noqa: E402
from fastapi.responses import JSONResponse, Response  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402


def build_app(tokenizer_dir: str, upstream: str, limit: int) -> FastAPI:
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    client = httpx.AsyncClient(
        base_url=upstream,
        timeout=httpx.Timeout(600.0),
        limits=httpx.Limits(max_connections=256, max_keepalive_connections=256),
    )
    app = FastAPI()

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        raw = await request.body()
        body = await request.json()
        ids = tokenizer.apply_chat_template(
            body["messages"], tokenize=True, add_generation_prompt=True
        )
        # transformers 5 returns a BatchEncoding unless return_dict=False.
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        n = len(ids)
        if n >= limit:
            return JSONResponse(
                status_code=400,
                content={
                    "object": "error",
                    "message": f"The input ({n} tokens) is longer than the model's "
                    f"context length ({limit} tokens).",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                },
            )
        upstream_response = await client.post(
            "/v1/chat/completions",
            content=raw,
            headers={"content-type": "application/json"},
        )
        return Response(
            content=upstream_response.content,
            status_code=upstream_response.status_code,
            media_type=upstream_response.headers.get("content-type"),
        )

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--limit", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = build_app(args.tokenizer, args.upstream, args.limit)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
