"""The `openai` backend: completions from an OpenAI-compatible API (OpenRouter, OpenAI, a `vllm
serve`), for fixed opponents and evaluated models.

Each request goes through: the cost guard (``max_requests``, ``max_total_tokens``), a semaphore
(``max_concurrency``), the client call with its own timeout, and retries with exponential
backoff and jitter on 429, 5xx, timeouts and connection errors (a ``Retry-After`` header wins).
A request that still fails fails its game, with the reason as the error's type
(``RateLimited``, ``ServerError``, ...); ``max_failures_in_a_row`` such failures stop the run
(``RunFailed``): the API is down. The API key is read from the environment variable the options
name and scrubbed from every message this backend raises.
"""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

from unstable_core import Completion, GenerationRequest, RunFailed

from .options import OpenAIOptions

MAX_RETRY_AFTER_S = 300.0


class OpenAIRequestFailed(Exception):
    """A request that failed after its retries; subclasses name the reason."""


class RateLimited(OpenAIRequestFailed):
    pass


class ServerError(OpenAIRequestFailed):
    pass


class RequestTimeout(OpenAIRequestFailed):
    pass


class ConnectionFailed(OpenAIRequestFailed):
    pass


class MalformedResponse(OpenAIRequestFailed):
    pass


class RequestRejected(OpenAIRequestFailed):
    """A 4xx other than 429 (a bad model name, a bad key): not retried."""


def read_api_key(options: OpenAIOptions) -> str | None:
    if options.api_key_env is None:
        return None
    key = os.environ.get(options.api_key_env, "")
    if not key:
        raise ValueError(f"the environment variable {options.api_key_env} (api_key_env) is not set: it must hold the API key")
    return key


def retry_after_s(exc: Any) -> float | None:
    """Seconds a 429/503 response asks to wait (``Retry-After`` in seconds), or None."""
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return min(MAX_RETRY_AFTER_S, max(0.0, float(value))) if value is not None else None
    except ValueError:
        return None


class OpenAIInference:
    tokenizer = None

    def __init__(self, options: OpenAIOptions, api_key: str | None) -> None:
        import openai

        self.options = options
        self._secret = api_key
        # retries are ours (backoff with jitter, Retry-After, counted failures): the client makes none
        self.client = openai.AsyncOpenAI(base_url=options.base_url, api_key=api_key or "no-key", timeout=options.timeout_s,
                                         max_retries=0)
        self._semaphore: asyncio.Semaphore | None = None
        self.rng = random.Random()
        self.requests = 0
        self.total_tokens = 0
        self.failures_in_a_row = 0
        self.failures: dict[str, int] = {}

    # -- the contract ---------------------------------------------------------------------------
    async def generate(self, request: GenerationRequest) -> Completion:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.options.max_concurrency)
        async with self._semaphore:
            self._check_budget()  # in here, so that requests waiting for a slot cannot all pass it at once
            self.requests += 1
            try:
                completion = await self._with_retries(request)
            except OpenAIRequestFailed as exc:
                self.failures[type(exc).__name__] = self.failures.get(type(exc).__name__, 0) + 1
                self.failures_in_a_row += 1
                if self.failures_in_a_row >= self.options.max_failures_in_a_row:
                    raise RunFailed(self.scrub(
                        f"inference 'openai' at {self.options.base_url}: {self.failures_in_a_row} requests failed in a row "
                        f"(last: {type(exc).__name__}: {exc}); the API looks down")) from None
                raise
        self.failures_in_a_row = 0
        return completion

    def load_checkpoint(self, checkpoint: Any) -> int:
        raise RuntimeError("inference 'openai' serves fixed models by name; it cannot load a checkpoint")

    def close(self) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            try:
                asyncio.run(self.client.close())
            except Exception:  # connections of a loop that has ended: they went with it
                pass
        # closed from inside the running loop (the local executor's shutdown): the connections go with it

    # -- requests -------------------------------------------------------------------------------
    def _check_budget(self) -> None:
        o = self.options
        if o.max_requests is not None and self.requests >= o.max_requests:
            raise RunFailed(f"inference 'openai': the cost guard max_requests = {o.max_requests} is reached")
        if o.max_total_tokens is not None and self.total_tokens >= o.max_total_tokens:
            raise RunFailed(f"inference 'openai': the cost guard max_total_tokens = {o.max_total_tokens} is reached "
                            f"({self.total_tokens} tokens used)")

    async def _with_retries(self, request: GenerationRequest) -> Completion:
        import openai

        o = self.options
        failure: OpenAIRequestFailed
        for attempt in range(o.max_retries + 1):
            try:
                return await self._call(request)
            except openai.RateLimitError as exc:
                failure, wait = RateLimited(self.scrub(str(exc))), retry_after_s(exc)
            except openai.InternalServerError as exc:
                failure, wait = ServerError(self.scrub(str(exc))), retry_after_s(exc)
            except openai.APITimeoutError:
                failure, wait = RequestTimeout(f"no answer within {o.timeout_s} s (timeout_s)"), None
            except openai.APIConnectionError as exc:
                failure, wait = ConnectionFailed(self.scrub(f"{o.base_url}: {exc.__cause__ or exc}")), None
            except openai.APIStatusError as exc:  # 400, 401, 404, ...: asking again will not help
                raise RequestRejected(self.scrub(f"HTTP {exc.status_code}: {exc}")) from None
            except (openai.APIResponseValidationError, ValueError, TypeError, KeyError, IndexError) as exc:
                raise MalformedResponse(self.scrub(f"{type(exc).__name__}: {exc}")) from None
            if attempt == o.max_retries:
                raise failure
            if wait is None:
                wait = min(o.max_backoff_s, o.backoff_s * 2**attempt) * (0.5 + 0.5 * self.rng.random())
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")

    async def _call(self, request: GenerationRequest) -> Completion:
        o = self.options
        extra = dict(o.extra_body)
        if o.token_ids:
            extra.setdefault("return_token_ids", True)  # vLLM's server; others ignore unknown fields or refuse them
        common: dict[str, Any] = {"model": request.model.model, "temperature": o.temperature, "top_p": o.top_p,
                                  "max_tokens": o.max_tokens, "extra_body": extra}
        if o.send_seeds:
            common["seed"] = request.seed
        if o.endpoint == "chat":
            messages: list[Any] = ([{"role": "system", "content": o.system_prompt}] if o.system_prompt else [])
            messages.append({"role": "user", "content": request.observation or request.prompt})
            if o.token_ids:
                common["logprobs"] = True
            response = await self.client.chat.completions.create(messages=messages, **common)
        else:
            if o.token_ids:
                common["logprobs"] = 0
            response = await self.client.completions.create(prompt=request.prompt, **common)
        if not hasattr(response, "model_dump"):  # the client hands back the body when it is not JSON
            raise ValueError(f"the response is not a JSON object: {str(response)[:80]!r}")
        return self._completion(response.model_dump())

    def _completion(self, data: dict[str, Any]) -> Completion:
        usage = data.get("usage") or {}
        self.total_tokens += int(usage.get("total_tokens") or 0)
        choice = data["choices"][0]
        if self.options.endpoint == "chat":
            text = (choice.get("message") or {}).get("content") or ""
            prompt_ids = data.get("prompt_token_ids")
            content = (choice.get("logprobs") or {}).get("content") or []
            logprobs = [float(c["logprob"]) for c in content]
        else:
            text = choice.get("text") or ""
            prompt_ids = choice.get("prompt_token_ids")
            logprobs = [float(x) for x in ((choice.get("logprobs") or {}).get("token_logprobs") or [])]
        ids = choice.get("token_ids")
        trainable = bool(prompt_ids) and ids is not None and len(logprobs) == len(ids)
        truncated = choice.get("finish_reason") == "length"
        if not trainable:
            return Completion(text=text, trainable=False, truncated=truncated)
        assert prompt_ids is not None  # trainable
        return Completion(text=text, prompt_token_ids=list(prompt_ids), completion_token_ids=list(ids), logprobs=logprobs,
                          truncated=truncated)

    def scrub(self, text: str) -> str:
        """``text`` with the API key taken out."""
        return text.replace(self._secret, "***") if self._secret else text
