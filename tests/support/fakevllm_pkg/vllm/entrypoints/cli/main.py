"""`python -m vllm.entrypoints.cli.main serve MODEL --port P ...` of the stand-in vLLM: /health, then
/v1/completions with token-ID prompts and return_token_ids."""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from vllm import next_tokens, write_report


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        return None

    def _answer(self, code: int, doc: object) -> None:
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(200 if self.path == "/health" else 404, {})

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompts = request["prompt"]
        choices = [{"index": i, "token_ids": next_tokens(p, request["max_tokens"])} for i, p in enumerate(prompts)]
        self._answer(200, {"choices": list(reversed(choices))})


def main() -> None:
    args = sys.argv[1:]
    assert args[0] == "serve"
    port = int(args[args.index("--port") + 1])
    print("INFO init engine (profile, create kv cache, warmup model) took 2.50 s", flush=True)
    write_report()
    HTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
