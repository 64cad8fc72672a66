"""A small OpenAI-compatible HTTP server on loopback for the tests: scripted faults (slow, 429
with Retry-After, 500, malformed JSON, 401 echoing the key) and, when no fault is queued, a chat
or completions answer that picks the first move the observation offers."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BRACKETED = re.compile(r"\[([^\[\]]{1,40})\]")


def first_move(text: str) -> str:
    lines = [ln for ln in text.splitlines() if "available" in ln.lower() and BRACKETED.search(ln)]
    found = BRACKETED.findall(lines[-1] if lines else text)
    return f"\\boxed{{[{found[0]}]}}" if found else "no move"


class Fault:
    def __init__(self, status: int = 200, body: str | None = None, headers: dict[str, str] | None = None, delay_s: float = 0.0):
        self.status, self.body, self.headers, self.delay_s = status, body, headers or {}, delay_s


class FakeAPI:
    """``faults``: answers given in order before the normal ones; ``requests``: every request
    body received, with its Authorization header; ``token_ids``: answer with vLLM's token ids."""

    def __init__(self, token_ids: bool = False) -> None:
        self.faults: deque[Fault] = deque()
        self.requests: list[dict[str, Any]] = []
        self.token_ids = token_ids
        self.lock = threading.Lock()
        self.in_flight = self.most_in_flight = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                with api.lock:
                    api.requests.append({"path": self.path, "auth": self.headers.get("authorization"), "body": body})
                    fault = api.faults.popleft() if api.faults else None
                    api.in_flight += 1
                    api.most_in_flight = max(api.most_in_flight, api.in_flight)
                try:
                    answer = self._answer(fault, body)
                finally:
                    with api.lock:  # before the answer goes out: the client may send its next request at once
                        api.in_flight -= 1
                self._send(*answer)

            def _answer(self, fault: Fault | None, body: dict[str, Any]) -> tuple[int, str, dict[str, str]]:
                if fault is not None:
                    time.sleep(fault.delay_s)  # a slow server
                    if fault.body is not None or fault.status != 200:
                        return fault.status, fault.body or json.dumps({"error": {"message": "fault"}}), fault.headers
                return 200, json.dumps(api.answer(self.path, body)), {}

            def _send(self, status: int, text: str, headers: dict[str, str]) -> None:
                data = text.encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except BrokenPipeError:  # the client gave up (its timeout)
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def answer(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        usage = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
        finish = "length" if body.get("max_tokens", 3) < 3 else "stop"  # every answer takes 3 tokens
        if path.endswith("/chat/completions"):
            text = first_move(body["messages"][-1]["content"])
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
            out = {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"], "choices": [choice], "usage": usage}
            if self.token_ids:
                out["prompt_token_ids"] = [1, 2, 3]
                choice["token_ids"] = [7, 8]
                choice["logprobs"] = {"content": [{"token": "a", "logprob": -0.5, "bytes": None, "top_logprobs": []},
                                                  {"token": "b", "logprob": -0.25, "bytes": None, "top_logprobs": []}]}
            return out
        text = first_move(body["prompt"])
        choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
        if self.token_ids:
            choice.update(prompt_token_ids=[1, 2, 3], token_ids=[7, 8],
                          logprobs={"tokens": ["a", "b"], "token_logprobs": [-0.5, -0.25], "top_logprobs": None, "text_offset": [0, 1]})
        return {"id": "c", "object": "text_completion", "created": 0, "model": body["model"], "choices": [choice], "usage": usage}

    def __enter__(self) -> FakeAPI:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
