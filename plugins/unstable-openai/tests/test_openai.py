"""The openai backend against a real HTTP server on loopback (tests/fake_api.py): requests as the
API expects them, token ids when the server gives them, and every fault of a real API."""

import asyncio
import json
import socket
import sys
import time
from pathlib import Path

import pytest

import unstable_core
from unstable_core import ConfigError, GenerationRequest, ModelRef, RunFailed, build_component

sys.path.insert(0, str(Path(__file__).parent))
from fake_api import FakeAPI, Fault  # noqa: E402

import unstable_openai.plugin  # noqa: E402
from unstable_openai.inference import (  # noqa: E402
    ConnectionFailed,
    MalformedResponse,
    RateLimited,
    RequestRejected,
    RequestTimeout,
    ServerError,
)

OPENAI = ("openai", unstable_openai.plugin)
KEY = "sk-test-7f3a9c-SECRET-do-not-leak"
OBS = "[GAME] You are Player 0 in Kuhn Poker.\nYour available actions are: [check], [bet]"


@pytest.fixture
def api():
    with FakeAPI() as server:
        yield server


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("TEST_API_KEY", KEY)


def backend(make_plugin_system, api, **options):
    opts = {"base_url": api.base_url, "api_key_env": "TEST_API_KEY", "backoff_s": 0.0, **options}
    return build_component("inference", "openai", opts, plugins=make_plugin_system(OPENAI))


def ask(b, observation=OBS, model="some/model"):
    req = GenerationRequest(model=ModelRef(uid="api", model=model, backend="openai"), prompt=f"PROMPT {observation}",
                            observation=observation, seed=7)
    return asyncio.run(b.generate(req))


def test_chat_request_as_the_api_expects_and_untrainable_without_token_ids(make_plugin_system, api):
    b = backend(make_plugin_system, api, temperature=0.3, max_tokens=40, system_prompt="Play well.",
                extra_body={"provider": {"order": ["x"]}})
    out = ask(b)
    assert out.text == "\\boxed{[check]}" and out.trainable is False and out.completion_token_ids == []
    (req,) = api.requests
    assert req["path"] == "/v1/chat/completions" and req["auth"] == f"Bearer {KEY}"
    body = req["body"]
    assert body["model"] == "some/model" and body["messages"] == [
        {"role": "system", "content": "Play well."}, {"role": "user", "content": OBS}]
    assert (body["temperature"], body["max_tokens"], body["seed"], body["provider"]) == (0.3, 40, 7, {"order": ["x"]})
    assert body["return_token_ids"] is True and body["logprobs"] is True
    assert out.truncated is False
    assert ask(backend(make_plugin_system, api, max_tokens=2)).truncated is True  # finish_reason "length"


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_token_ids_and_logprobs_make_a_trainable_completion(make_plugin_system, endpoint):
    with FakeAPI(token_ids=True) as api:
        out = ask(backend(make_plugin_system, api, endpoint=endpoint))
        assert out.trainable and out.prompt_token_ids == [1, 2, 3] and out.completion_token_ids == [7, 8]
        assert out.logprobs == [-0.5, -0.25]
        body = api.requests[0]["body"]
        if endpoint == "completions":
            assert api.requests[0]["path"] == "/v1/completions" and body["prompt"] == f"PROMPT {OBS}" and body["logprobs"] == 0


def test_429_waits_as_retry_after_says_then_succeeds(make_plugin_system, api):
    api.faults.append(Fault(429, headers={"retry-after": "0.3"}))
    b = backend(make_plugin_system, api, backoff_s=20.0)  # Retry-After wins over the backoff
    began = time.monotonic()
    assert ask(b).text == "\\boxed{[check]}"
    assert 0.3 <= time.monotonic() - began < 20.0 and len(api.requests) == 2


def test_5xx_is_retried_with_backoff_then_fails_the_request_by_reason(make_plugin_system, api):
    api.faults.extend(Fault(500) for _ in range(3))
    b = backend(make_plugin_system, api, max_retries=2)
    with pytest.raises(ServerError):
        ask(b)
    assert len(api.requests) == 3 and b.failures == {"ServerError": 1}
    assert ask(b).text == "\\boxed{[check]}" and b.failures_in_a_row == 0  # a success resets the count


@pytest.mark.parametrize("fault, error, requests", [
    (Fault(200, body="{ this is not json"), MalformedResponse, 1),
    (Fault(200, body=json.dumps({"choices": []})), MalformedResponse, 1),
    (Fault(401, body=json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}"}})), RequestRejected, 1),
    (Fault(429), RateLimited, 2),
])
def test_each_fault_ends_as_its_reason(make_plugin_system, api, fault, error, requests):
    api.faults.extend([fault, fault])
    b = backend(make_plugin_system, api, max_retries=1)
    with pytest.raises(error) as info:
        ask(b)
    assert len(api.requests) == requests
    assert KEY not in str(info.value)  # a server that echoes the key: scrubbed


def test_a_slow_server_times_out(make_plugin_system, api):
    api.faults.append(Fault(delay_s=3.0))
    b = backend(make_plugin_system, api, timeout_s=0.3, max_retries=0)
    began = time.monotonic()
    with pytest.raises(RequestTimeout, match="timeout_s"):
        ask(b)
    assert time.monotonic() - began < 3.0


def test_connection_refused_and_an_api_that_stays_down_stops_the_run(make_plugin_system, api):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    b = build_component("inference", "openai", {"base_url": f"http://127.0.0.1:{port}/v1", "api_key_env": None, "backoff_s": 0.0,
                                                "max_retries": 1, "max_failures_in_a_row": 3}, plugins=make_plugin_system(OPENAI))
    for _ in range(2):
        with pytest.raises(ConnectionFailed):
            ask(b)
    with pytest.raises(RunFailed, match="3 requests failed in a row .*ConnectionFailed.*the API looks down"):
        ask(b)


def test_no_more_requests_in_flight_than_max_concurrency(make_plugin_system, api):
    api.faults.extend(Fault(delay_s=0.2) for _ in range(8))  # slow answers, so that requests pile up
    b = backend(make_plugin_system, api, max_concurrency=2)

    async def many():
        reqs = [GenerationRequest(model=ModelRef(uid="api", model="m", backend="openai"), prompt=OBS, observation=OBS, seed=i)
                for i in range(8)]
        return await asyncio.gather(*(b.generate(r) for r in reqs))

    assert len(asyncio.run(many())) == 8 and len(api.requests) == 8
    assert api.most_in_flight == 2


def test_cost_guards_stop_the_run(make_plugin_system, api):
    b = backend(make_plugin_system, api, max_requests=2)
    ask(b), ask(b)
    with pytest.raises(RunFailed, match="max_requests = 2"):
        ask(b)
    assert len(api.requests) == 2
    b = backend(make_plugin_system, api, max_requests=3, max_concurrency=8)  # many at once: still 3 requests

    async def many():
        reqs = [GenerationRequest(model=ModelRef(uid="api", model="m", backend="openai"), prompt=OBS, observation=OBS)] * 8
        return await asyncio.gather(*(b.generate(r) for r in reqs), return_exceptions=True)

    outcomes = asyncio.run(many())
    assert sum(isinstance(o, RunFailed) for o in outcomes) == 5 and len(api.requests) == 5
    b = backend(make_plugin_system, api, max_total_tokens=20)  # 13 tokens an answer, as the server reports
    ask(b), ask(b)
    with pytest.raises(RunFailed, match="max_total_tokens = 20 is reached \\(26 tokens used\\)"):
        ask(b)


def test_a_missing_key_variable_and_a_key_in_the_config_are_one_clear_error(make_plugin_system, monkeypatch, tmp_path):
    system = make_plugin_system(OPENAI)
    monkeypatch.delenv("TEST_API_KEY")
    with pytest.raises(unstable_core.PluginError, match="TEST_API_KEY \\(api_key_env\\) is not set"):
        build_component("inference", "openai", {"api_key_env": "TEST_API_KEY"}, plugins=system)
    cfg = {"name": "t", "train_envs": ["KuhnPoker-v0-train"], "opponents": ["random-valid", {"uid": "api", "backend": "openai", "model": "m"}],
           "model_sampler": {"name": "fixed"}, "backends": {"openai": {"api_key_env": KEY}}}
    with pytest.raises(ConfigError) as info:
        unstable_core.build(cfg, run_dir=tmp_path / "r", plugins=system)
    assert "backends.openai.api_key_env" in str(info.value) and "not the key itself" in str(info.value)
    assert KEY not in str(info.value)


def test_a_model_trained_through_the_api_is_refused_before_the_run(make_plugin_system, tmp_path):
    """The API serves fixed models: a training run whose model it would serve cannot publish a
    checkpoint to it, so it is one config error naming the backend, before anything starts."""
    from unstable_core.testing import toy_config, toy_plugin

    system = make_plugin_system(toy_plugin, OPENAI)
    cfg = toy_config(model={"model": "m", "backend": "openai"}, backends={"openai": {"api_key_env": "TEST_API_KEY"}})
    with pytest.raises(ConfigError, match="model: backend 'openai' serves fixed models only"):
        unstable_core.build(cfg, run_dir=tmp_path / "r", plugins=system)
    assert not (tmp_path / "r").exists()


def tournament(api, **openai_options):
    return {
        "name": "api-tournament", "seed": 1, "train_envs": ["KuhnPoker-v0-train"],
        "opponents": [{"uid": "api", "backend": "openai", "model": "google/gemini-2.0-flash-lite-001"}, "random-valid"],
        "model_sampler": {"name": "fixed"},
        "backends": {"openai": {"base_url": api.base_url, "api_key_env": "TEST_API_KEY", "backoff_s": 0.0, "max_retries": 0,
                                **openai_options}},
        "collection": {"tournament_games": 40, "num_train_games": 8, "transcripts": 1.0},
        "trackers": [{"name": "jsonl", "games": True}],
    }


def test_a_tournament_against_an_api_model_and_the_key_reaches_no_file(make_plugin_system, api, tmp_path):
    # the first answers are 401s whose body echoes the key, as some APIs do: those games fail
    api.faults.extend(Fault(401, body=json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}"}})) for _ in range(3))
    run_dir = tmp_path / "run"
    result = unstable_core.run(tournament(api), run_dir=run_dir, plugins=make_plugin_system(OPENAI))
    assert result.status == "completed" and result.games_played == 40
    assert {r.model for r in result.eval_records} == {"api", "random-valid"}
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    summary = [r for r in records if r["type"] == "summary"][-1]
    assert summary["failures"] == {"RequestRejected": 3}
    assert all(r["auth"] == f"Bearer {KEY}" for r in api.requests)  # the key was used ...
    for path in run_dir.rglob("*"):  # ... and is in no file of the run
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_a_run_against_an_api_that_is_down_stops_with_one_message(make_plugin_system, api, tmp_path):
    api.faults.extend(Fault(503) for _ in range(1000))
    with pytest.raises(RunFailed, match="5 requests failed in a row .*ServerError.*the API looks down"):
        unstable_core.run(tournament(api, max_failures_in_a_row=5), run_dir=tmp_path / "run", plugins=make_plugin_system(OPENAI))


@pytest.mark.parametrize("url", ["not a url", "file:///etc/passwd", "ftp://host/v1", "http://"])
def test_a_base_url_that_is_no_http_url_is_refused_before_any_request(url, tmp_path):
    """One line naming the key at `config check`, not 40 s of retries against nothing."""
    import subprocess
    import sys

    cfg = tmp_path / "c.toml"
    cfg.write_text('name = "x"\ntrain_envs = ["KuhnPoker-v0-train"]\n'
                   'opponents = ["random-valid", {uid = "api", model = "m", backend = "openai"}]\n'
                   f'[backends.openai]\nbase_url = "{url}"\napi_key_env = "NO_SUCH_KEY_VAR"\n')
    done = subprocess.run([sys.executable, "-m", "unstable_core.cli", "config", "check", str(cfg)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "backends.openai.base_url: expected an http:// or https:// URL" in done.stderr, done.stderr
