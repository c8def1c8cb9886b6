"""The ``example-labels`` service: a tiny label-review HTTP service (``mlsandbox.services`` entry point).

Started by the local backend at ``up`` as ``python -m mlsandbox_plugin_example.labels --port N``; answers
``GET /health`` and ``GET /info`` (the sandbox and object-store endpoint it was given through its env).
"""

from __future__ import annotations

import argparse
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from mlsandbox.plugins import ServiceSpec

SERVICE = ServiceSpec(
    argv=["{python}", "-m", "mlsandbox_plugin_example.labels", "--port", "{port}"],
    health_url="http://127.0.0.1:{port}/health",
    env={"EXAMPLE_LABELS_SANDBOX": "{sandbox}", "EXAMPLE_LABELS_S3_URL": "{s3_url}"},
    start="up",
    start_timeout_s=20,
    description="label review queue (example plug-in)",
)


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/health":
            body: dict[str, object] = {"ok": True}
        elif self.path == "/info":
            body = {
                "service": "example-labels",
                "sandbox": os.environ.get("EXAMPLE_LABELS_SANDBOX"),
                "s3_url": os.environ.get("EXAMPLE_LABELS_S3_URL"),
                "pid": os.getpid(),
            }
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # quiet access log
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    ThreadingHTTPServer(("127.0.0.1", args.port), _Handler).serve_forever()


if __name__ == "__main__":
    main()
