"""Write docs/config.md from the RunConfig models: `python tools/gen_config.py`."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from unstable_core.config import RunConfig
from unstable_core.types import EnvSpec

DOCS = Path(__file__).resolve().parent.parent / "docs"

HEADER = """# Run config reference

Generated from `unstable_core/config.py` by `python tools/gen_config.py`; do not edit by hand.

A run is one TOML file. A section per component picks it by `name`; the section's other keys are
that component's options, validated by the component's own model (see
`unstable components show KIND NAME`, or `unstable config schema` for everything as JSON
Schema). `--set a.b=c` overrides any key; the value is parsed as TOML (`--set
training.learning_steps=10`, `--set 'opponents=["greedy"]'`), and an integer indexes a list
(`--set train_envs.0.num_actors=2`). Errors name the file, the key path, what was expected and
what was found, and exit with status 2.

Component sections: `env`, `env_sampler`, `model_sampler`, `rater`, `buffer`, `learner`,
`inference`, `executor` (tables), `trackers` and `reward.final` / `reward.step` /
`reward.sampling` (lists of tables).
"""


def default(field) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value = field.default_factory()
        if isinstance(value, BaseModel):
            return f"`{value.model_dump()}`" if len(str(value.model_dump())) < 60 else "(table)"
        if isinstance(value, list) and value and isinstance(value[0], BaseModel):
            return f"`{[v.model_dump() for v in value]}`"
        return f"`{value!r}`"
    return "" if field.default is PydanticUndefined else f"`{field.default!r}`"


def table(model: type[BaseModel], prefix: str) -> list[str]:
    lines = ["| key | type | default | description |", "|---|---|---|---|"]
    nested = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        typ = getattr(ann, "__name__", None) or str(ann).replace("typing.", "").replace("unstable_core.config.", "").replace("unstable_core.types.", "")
        typ = typ.replace(" | ", " or ")
        lines.append(f"| `{prefix}{name}` | {typ} | {default(field)} | {field.description or ''} |")
        sub = ann if isinstance(ann, type) and issubclass(ann, BaseModel) and ann.__name__ != "ComponentChoice" else None
        if sub is not None:
            nested.append((name, sub))
    return lines, nested


def main(out_dir: Path = DOCS) -> None:
    """Write the page into ``out_dir`` (default: docs/)."""
    out = [HEADER, "## Top level", ""]
    lines, nested = table(RunConfig, "")
    out += lines + [""]
    for name, sub in nested:
        out += [f"## `[{name}]`", ""]
        out += table(sub, f"{name}.")[0] + [""]
    from unstable_core.config import ModelConfig, OpponentConfig

    out += ["## `[model]`", ""] + table(ModelConfig, "model.")[0] + [""]
    out += ["## `[[opponents]]`", "", "A plain string `\"greedy\"` means `{uid = \"greedy\", backend = \"scripted\", model = \"greedy\"}`.", ""]
    out += table(OpponentConfig, "opponents[].")[0] + [""]
    out += ["## `[[train_envs]]` and `[[eval_envs]]` (EnvSpec)", "", "A plain string is an env id with every other key at its default.", ""]
    out += table(EnvSpec, "train_envs[].")[0] + [""]
    (out_dir / "config.md").write_text("\n".join(out).rstrip() + "\n")


if __name__ == "__main__":
    main()
