"""Options of the `openai` inference backend."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from unstable_core import SECRET_ERROR

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class OpenAIOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    base_url: str = Field("https://openrouter.ai/api/v1", description="The API's base URL (OpenRouter, OpenAI, a `vllm serve` at http://host:port/v1).")
    api_key_env: str | None = Field(
        "OPENROUTER_API_KEY", description="Name of the environment variable that holds the API key (never the key itself); "
        "None: no key (a local server).")
    endpoint: Literal["chat", "completions"] = Field(
        "chat", description="chat: /chat/completions with the observation as the user message; completions: /completions "
        "with the template's rendered prompt.")
    system_prompt: str | None = Field(None, description="chat: a system message before the observation.")
    temperature: float = Field(0.7, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int = Field(256, ge=1, description="Largest completion per request.")
    send_seeds: bool = Field(
        True, description="Send each request's seed (derived from the run seed, game and turn): a server that honours seeds "
        "(vLLM, OpenAI) then samples reproducibly.")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="More JSON fields for every request (e.g. OpenRouter's `provider`).")
    token_ids: bool = Field(
        True, description="Ask for token ids and logprobs (vLLM's server gives them: the completion is then trainable); "
        "hosted APIs that ignore it give neither, and their completions are marked not trainable.")
    timeout_s: float = Field(60.0, gt=0, description="Per-request timeout.")
    max_retries: int = Field(4, ge=0, description="Retries of a request after a 429, a 5xx, a timeout or a connection error.")
    backoff_s: float = Field(1.0, ge=0, description="First retry delay; doubled each retry, with jitter (Retry-After wins when given).")
    max_backoff_s: float = Field(30.0, ge=0, description="Longest wait before a retry.")
    max_concurrency: int = Field(16, ge=1, description="Requests in flight at once, per backend.")
    max_requests: int | None = Field(None, ge=1, description="Cost guard: requests per run; past it the run stops with a message.")
    max_total_tokens: int | None = Field(
        None, ge=1, description="Cost guard: prompt + completion tokens per run, as the API reports them (the requests in "
        "flight when it is reached still finish).")
    max_failures_in_a_row: int = Field(
        20, ge=1, description="Requests that fail in a row (after their retries) before the run stops: the API is down.")

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, v: str) -> str:
        from urllib.parse import urlsplit

        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise PydanticCustomError("base_url", "expected an http:// or https:// URL with a host, e.g. http://localhost:8000/v1")
        return v

    @field_validator("api_key_env")
    @classmethod
    def _a_variable_name(cls, v: str | None) -> str | None:
        if v is not None and not ENV_NAME.match(v):
            # a key pasted here must not be echoed by the error message
            raise PydanticCustomError(SECRET_ERROR, "must be the name of an environment variable (e.g. OPENROUTER_API_KEY), "
                                      "not the key itself")
        return v
