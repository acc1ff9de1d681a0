"""The stack floor: a FastAPI app on uvicorn, same TLS and HTTP stack as gpuguard, that allows everything.

Why it exists next to the all-off gpuguard config: the all-off config is the honest framework
ceiling (it still validates the envelope, copies the object, builds the workload view and logs
a line), while this app only reads the body, takes the uid with orjson and answers.  The gap
between the two is gpuguard's own per-request plumbing; the gap between this and a C server
is the Python HTTP/TLS stack.  ``python bench/allow_app.py --port P --cert F --key F``.
"""

from __future__ import annotations

import argparse
import sys

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response


def create_app() -> FastAPI:
    """The allow-everything app: same FastAPI routing and response path as gpuguard, no envelope model."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    answered = {"reviews": 0}  # read by bench/apiserver.py to prove the webhook is (or is no longer) called

    async def allow(request: Request) -> Response:
        answered["reviews"] += 1
        review = orjson.loads(await request.body())
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"], "allowed": True}}
        return Response(content=orjson.dumps(body), media_type="application/json")

    app.add_api_route("/mutate", allow, methods=["POST"])
    app.add_api_route("/validate", allow, methods=["POST"])

    @app.get("/stats")
    async def stats() -> Response:
        return Response(content=orjson.dumps(answered), media_type="application/json")

    @app.get("/readyz")
    async def readyz() -> Response:
        return Response(content=b'{"status":"ready"}', media_type="application/json")

    return app


def main(argv: list[str] | None = None) -> int:
    """Serve the app over TLS on 127.0.0.1 with uvicorn, as gpuguard serves (no access log, long keep-alive)."""
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    args = parser.parse_args(argv)
    uvicorn.run(create_app(), host="127.0.0.1", port=args.port, ssl_certfile=args.cert, ssl_keyfile=args.key,
                access_log=False, log_level="warning", server_header=False, timeout_keep_alive=100)
    return 0


if __name__ == "__main__":
    sys.exit(main())
