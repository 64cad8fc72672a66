"""Option models shared by the hf backend and learners (pydantic only: cheap to import)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from unstable_core import AdapterShape, ChosenComponents

SEVEN_PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class LoraOptions(BaseModel):
    """LoRA through peft; defaults are UnstableBaselines' (rank 32, alpha 32, dropout 0, the seven projections)."""

    model_config = ConfigDict(extra="forbid")

    rank: int = Field(32, ge=1, description="LoRA rank r.")
    alpha: float = Field(32, gt=0, description="LoRA alpha (scaling = alpha / rank).")
    dropout: float = Field(0.0, ge=0, lt=1, description="LoRA dropout.")
    target_modules: list[str] = Field(default_factory=lambda: list(SEVEN_PROJECTIONS), description="Module names that get adapters.")
    modules_to_save: list[str] = Field(
        default_factory=list,
        description="Modules trained whole and saved in the adapter beside the LoRA weights (peft's modules_to_save; "
        "a name matches a module whose path ends with it). E.g. ['model.norm'], the final RMSNorm gain: with it "
        "frozen, LoRA can only turn the last hidden state, not lengthen it, which caps how sure the next token can be. "
        "Served by hf; vLLM serves LoRA weights only.",
    )


class ModelLoadOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dtype: Literal["float32", "bfloat16", "float16", "float64"] = Field("float32", description="Weights dtype.")
    device: str = Field("auto", description="'cpu', 'cuda', 'cuda:1', or 'auto' (cuda if available).")
    trust_remote_code: bool = Field(False, description="Let transformers run code shipped with the model (off unless you set it).")
    cache_dir: str | None = Field(None, description="Where 'tiny:' models are built (default $UNSTABLE_CACHE or ~/.cache/unstable).")


class HFInferenceOptions(ModelLoadOptions):
    model_config = ConfigDict(extra="forbid")

    max_tokens: int = Field(32, ge=1, description="Most tokens generated per completion.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling threshold.")
    batch_wait_ms: float = Field(20.0, ge=0, description="How long requests gather before a batch is served.")
    max_batch_size: int = Field(64, ge=1, description="Most prompts in one generate call.")
    max_loras: int = Field(4, ge=1, description="Adapters kept resident at once (least recently used evicted).")
    mixed_adapters: bool = Field(
        True, description="Serve the requests of several adapters of one base model in one generate call (each LoRA "
        "layer adds every row's own adapter; at most max_loras adapters a call); false: one call per adapter."
    )
    share_prompt_prefixes: bool = Field(
        True,
        description="Prefill a prompt prefix that prompts of a batch share once (cached, then continued per prompt), "
        "not once per prompt; false: one left-padded batch.",
    )
    max_prompt_tokens: int | None = Field(None, ge=1, description="Keep only the last N prompt tokens (None: all).")
    seed: int = Field(0, description="Base seed of sampling.")
    lora: LoraOptions = Field(default_factory=LoraOptions, description="LoRA shape (must match the learner's).")


class LearnerOptions(ModelLoadOptions):
    """Options every learner built on ``unstable_hf.training.LoraLearner`` has; an algorithm's
    options subclass it and add their own."""

    model_config = ConfigDict(extra="forbid")

    lr: float = Field(1e-5, gt=0, description="AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    mini_batch_size: int = Field(1, ge=1, description="Steps per forward/backward; the batch is split in such chunks (gradient accumulation).")
    mini_batch_tokens: int | None = Field(
        None, ge=1,
        description="Also cap each chunk at this many tokens (None: steps only): with prefix sharing every token its "
                    "steps share counted once, without it rows x the longest step. A step longer than this is a chunk "
                    "of its own. Bounds a forward's memory by tokens (its shared rows are padded to the widest, a few more "
                    "positions), so that short steps share a chunk and long ones do not.",
    )
    max_train_len: int | None = Field(None, ge=2, description="Truncate prompt + completion to this many tokens (the prompt loses its beginning).")
    grad_clip: float = Field(1.0, gt=0, description="Global gradient-norm clip (the logged grad_norm is before clipping).")
    gradient_checkpointing: bool = Field(False, description="Recompute activations in backward to save memory.")
    temperature: float = Field(1.0, gt=0,
        description="Temperature of the training logprobs: the one the trained model is sampled at (the inference "
                    "backend's temperature, or the model's own options), which config check requires.")
    logprob_chunk_size: int | None = Field(None, ge=1, description="Tokens per logprob chunk (None: chosen from free memory).")
    lora: LoraOptions = Field(default_factory=LoraOptions, description="LoRA shape (must match the inference backend's).")
    normalizer: Literal["max_generation_len", "tokens"] = Field(
        "max_generation_len",
        description="Divide each sequence's logprob sum by the constant max_generation_len (Dr. GRPO, UnstableBaselines) or by its token count.",
    )
    max_generation_len: int = Field(4096, ge=1, description="The constant normaliser.")
    data_parallel: int = Field(1, ge=1, le=64,
        description="Learner processes: each takes a shard of every batch (whole games) and the gradients are summed "
                    "before the one optimizer step all take, as one learner on the whole batch would (torch.distributed: "
                    "gloo on the CPU, nccl on CUDA with rank r on cuda:r). 1: one process. docs/gpu.md#a-data-parallel-learner")
    data_parallel_timeout_s: float = Field(600, gt=0, description="How long a rank waits for the others in a collective before it fails.")
    prefix_sharing: bool = Field(True,
        description="Forward every token the steps of a chunk share once (prefix tries, ancestor attention masks); false: one padded row per step.")
    prefix_budget: int = Field(2048, ge=16, description="Most tokens in one prefix-shared row.")
    prefix_layout: Literal["masks", "segments", "auto"] = Field(
        "masks",
        description="How prefix-shared steps are forwarded: 'masks' prefix tries packed in rows with ancestor attention "
                    "masks (the faster on most batches measured), 'segments' each group's common prefix forwarded once "
                    "with a KV cache and its suffixes as one batch against it (not with gradient_checkpointing: "
                    "transformers drops the cache there), 'auto' both timed on the first chunks of training, then the "
                    "faster per token on this model and device; the choice comes from timings, so two 'auto' runs may "
                    "differ in rounding where a sync run is otherwise reproducible (docs/performance.md).",
    )
    prefix_attention: Literal["auto", "dense", "flex"] = Field(
        "auto",
        description="How prefix-shared rows restrict attention to ancestors: 'dense' additive 4D masks (any device; attention "
                    "costs W^2 per row), 'flex' FlexAttention block masks (CUDA only: attention over the blocks a token's "
                    "ancestors are in, the lowest peak memory), 'auto' dense (block masks cannot train on a CPU, were slower "
                    "than dense masks on an H100 in float32 and within 5 % of them in bfloat16: docs/performance.md).",
    )


def check_device(options: Any, components: ChosenComponents) -> None:
    """``check_run`` of the hf backend and the hf learners: with the ``local`` executor (every role
    on this machine) a ``device`` of 'cuda' or 'cuda:N' needs that GPU here. With another executor
    the roles may run elsewhere, and the machine they land on says."""
    device = getattr(options, "device", "auto")
    if components.executor != "local" or not device.startswith("cuda"):
        return
    suffix = device.partition(":")[2]
    if device.partition(":")[0] != "cuda" or (suffix and not suffix.isdigit()):
        raise ValueError(f"device {device!r}: expected 'cuda' or 'cuda:N' (or 'cpu', 'auto')")
    import torch

    index = int(suffix or 0)
    if not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: this machine has no CUDA GPU (torch {torch.__version__}); use 'auto' or 'cpu'")
    if index >= torch.cuda.device_count():
        raise ValueError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s)")


def check_learner(options: LearnerOptions, components: ChosenComponents) -> None:
    """``check_run`` of the learners built on ``LoraLearner``: ``check_device``, the learner's
    ``temperature`` equal to the one the trained model is sampled at (``check_temperature``), and
    no importance sampling of choices drawn from a nucleus (``check_choice_nucleus``)."""
    check_device(options, components)
    check_temperature(options, components)
    check_choice_nucleus(options, components)


def check_choice_nucleus(options: LearnerOptions, components: ChosenComponents) -> None:
    """With ``collection.answers = "choice"`` the backend draws among the offered answers with their
    probabilities under its sampling, the top-p nucleus renormalised (``choosing.py``); a learner's
    ``importance_sampling`` divides the learner's ``pi(c)``, of the full tempered softmax, by that:
    with ``top_p`` below 1 the ratio is not 1 at identical weights (an answer outside the nucleus
    has probability 0 there, one inside more than its softmax share; where every answer is outside
    they are drawn alike). Refused, naming the keys; ``top_p = 1`` or no importance sampling pass."""
    if components.answers != "choice" or not getattr(options, "importance_sampling", False):
        return
    if (found := served_option(components, "top_p")) is None:
        return
    key, served = found
    if isinstance(served, int | float) and not isinstance(served, bool) and served < 1:
        raise ValueError(f'importance_sampling with collection.answers = "choice" and {key} = {served}: the backend draws '
                         f"the choices from the top-p nucleus, which the learner's pi(c) does not apply, so the ratios "
                         f"would not be 1 at identical weights; set {key} = 1 or importance_sampling = false")


def served_option(components: ChosenComponents, name: str) -> tuple[str, Any] | None:
    """The sampling option ``name`` the trained model is served with, and the key that sets it:
    ``[model] options.NAME`` where set, else its backend's numeric ``NAME``; None where neither."""
    inference = components.get("inference")
    if name in components.model_options:
        return f"model.options.{name}", components.model_options[name]
    if inference is not None and isinstance(getattr(inference, name, None), int | float):
        return f"inference.{name}", getattr(inference, name)
    return None


def check_temperature(options: LearnerOptions, components: ChosenComponents) -> None:
    """The learner's logprobs are of the tempered distribution ``softmax(z / temperature)``; the
    trained model's completions are drawn at ``[model] options.temperature`` where set, else at
    its backend's ``temperature``. Apart, the learner differentiates (and importance-weights
    against) another policy than the one that played: refused, naming both keys. A backend
    without a ``temperature`` option is not compared."""
    import math

    if (found := served_option(components, "temperature")) is None:
        return
    key, served = found
    if not isinstance(served, int | float) or isinstance(served, bool):
        return  # the model's options are validated by its backend, which names a bad value
    if served == 0:
        raise ValueError(f"{key} = 0: the trained model is played greedily, from no distribution the learner's logprobs "
                         f"(temperature = {options.temperature}) describe; set {key} = {options.temperature}")
    if not math.isclose(served, options.temperature, rel_tol=1e-9, abs_tol=1e-12):
        raise ValueError(f"temperature = {options.temperature} differs from {key} = {served}, the temperature the trained "
                         f"model is sampled at: the learner's logprobs and importance ratios would be of another policy "
                         f"than the one that played; set learner.temperature = {served}")


def lora_adapter(options: LearnerOptions) -> AdapterShape:
    """The adapter a ``LoraLearner`` writes with these options: its ``LearnerSpec.adapter``."""
    lora = options.lora
    return AdapterShape(rank=lora.rank, alpha=lora.alpha, target_modules=list(lora.target_modules),
                        modules_to_save=list(lora.modules_to_save))
