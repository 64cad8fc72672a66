"""The plugin examples of the README and docs/ run as written, and a typo in one of their options
is refused by the check with the option it was meant to be."""

import re
import types
from pathlib import Path

import pytest

import unstable_core
from unstable_core import ConfigError

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", "docs/writing-a-plugin.md", "docs/samplers.md", "docs/writing-an-algorithm.md", "docs/grouped-rollouts.md"]


def plugin_examples():
    for page in PAGES:
        text = (ROOT / page).read_text()
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", text, re.S)):
            if "@hookimpl" in block and "def unstable_" in block:
                yield pytest.param(page, block, id=f"{page}#{i}")


def typo(name: str) -> str:
    return name[:-1] if len(name) > 3 else name + "x"


@pytest.mark.parametrize("page, code", list(plugin_examples()))
def test_an_options_typo_in_a_documented_example_is_refused_with_a_did_you_mean(make_plugin_system, page, code):
    if "unstable_hf" in code:
        pytest.importorskip("unstable_hf")
    module = types.ModuleType("doc_example")
    # a block that imports its own package's modules (from .options import ...) runs as part of a
    # package the page names, where one is installed
    packages = [None, *dict.fromkeys(re.findall(r"\bunstable_[a-z_]+\b", (ROOT / page).read_text()))]
    for package in packages:
        module.__dict__["__package__"] = package
        try:
            exec(compile(code, page, "exec"), module.__dict__)
            break
        except ImportError as exc:
            reason = exc
    else:
        pytest.skip(f"{page}: {reason}")
    system = make_plugin_system(module)
    specs = [spec for name, hook in vars(module).items() if name.startswith("unstable_") and callable(hook)
             for spec in hook()]
    assert specs, f"{page}: the example registers no component"
    for spec in specs:
        fields = list(spec.config.model_fields)
        if not fields:
            continue
        wrong = typo(fields[0])
        with pytest.raises(ConfigError, match=rf"{wrong}: unknown option of {spec.kind} '{spec.name}'; did you mean '{fields[0]}'\?"):
            unstable_core.build_component(spec.kind, spec.name, {wrong: None}, plugins=system)


def test_the_rloo_example_trains_on_a_grouped_batch(tmp_path):
    pytest.importorskip("unstable_hf")
    import math

    from transformers import AutoTokenizer

    from unstable_core import Batch, BuildContext, ModelRef
    from unstable_hf.testing import build_fast_tiny, self_play_steps

    text = (ROOT / "docs/writing-an-algorithm.md").read_text()
    code = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "class RLOO(" in b)
    module = types.ModuleType("rloo_example")
    exec(compile(code, "writing-an-algorithm.md", "exec"), module.__dict__)
    path = build_fast_tiny(tmp_path)
    steps = self_play_steps(AutoTokenizer.from_pretrained(path), n=48)
    steps = [s.model_copy(update={"group_id": s.game_idx // 4 * 4, "group_index": s.game_idx % 4}) for s in steps]
    [spec] = module.unstable_learners()
    options = spec.config(device="cpu", lr=1e-2, lora={"rank": 4, "alpha": 8})
    learner = spec.factory(options, BuildContext(model=ModelRef(uid="base", kind="base", model=path)))
    metrics = learner.update(Batch(steps=steps, learner_version=0))
    assert learner.version == 1 and all(math.isfinite(v) for v in metrics.values())
    expected = unstable_core.group_advantages(steps, baseline="leave-one-out")
    assert metrics["advantage_abs"] == pytest.approx(sum(map(abs, expected)) / len(steps))
    assert metrics["grad_norm"] > 0 and metrics["clipped_frac"] == 0.0  # on policy: no ratio is clipped


def _packings():
    try:
        from unstable_hf.testing import MATRIX, PACKINGS, packing_id
    except ImportError:  # the core alone: the test skips itself
        return [pytest.param(None, id="no-hf")]
    return [pytest.param(p, id=packing_id(p), marks=() if p == (True, True, "masks") else MATRIX) for p in PACKINGS]


@pytest.mark.parametrize("packing", _packings())
def test_the_rloo_example_s_gradient_equals_finite_differences(tmp_path_factory, packing):
    """The consistency matrix's row of the documented RLOO learner: its loss gradient (float64
    model, rollout logprobs off the model's, so the clipped ratio is away from 1) equals central
    differences of the same loss under every packing (``unstable_hf.testing.PACKINGS``)."""
    pytest.importorskip("unstable_hf")
    from transformers import AutoTokenizer

    from unstable_core import BuildContext, ModelRef
    from unstable_hf.testing import build_fast_tiny, check_directional_derivatives, off_policy, randomize_trainable, whole_games

    text = (ROOT / "docs/writing-an-algorithm.md").read_text()
    code = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "class RLOO(" in b)
    module = types.ModuleType("rloo_example")
    exec(compile(code, "writing-an-algorithm.md", "exec"), module.__dict__)
    path = build_fast_tiny(tmp_path_factory.getbasetemp() / "unstable-hf-fast-tiny")
    steps = off_policy(path, whole_games(AutoTokenizer.from_pretrained(path), n=24), seed=1)
    steps = [s.model_copy(update={"group_id": s.game_idx // 2 * 2, "group_index": s.game_idx % 2}) for s in steps]
    checkpointing, shared, layout = packing
    [spec] = module.unstable_learners()
    options = spec.config(device="cpu", dtype="float64", lora={"rank": 4, "alpha": 8}, max_generation_len=16, mini_batch_size=8,
                          gradient_checkpointing=checkpointing, prefix_sharing=shared, prefix_layout=layout)
    learner = spec.factory(options, BuildContext(model=ModelRef(uid="base", kind="base", model=path)))
    randomize_trainable(learner)
    check_directional_derivatives(learner, steps)
