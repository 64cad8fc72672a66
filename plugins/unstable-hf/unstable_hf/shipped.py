"""Tiny models shipped built: the specs that the examples and the documented figures use.

A tiny model's warm start is float training, and float sums come out differently on another CPU
(other vector widths add in another order), so one spec built on two machines gives two models:
the OpenSpiel Kuhn poker example's warm start measured exploitability 0.3737 where it was built
for the docs and 0.3673 on another machine, and every figure downstream inherits the difference.
The specs that the examples and the documented figures use are therefore built once and shipped
with unstable-hf under ``unstable_hf/shipped_models/`` (about 2 MB each): ``ensure_tiny`` copies
a shipped build whose cache key matches into the cache, checks every file against the manifest's
SHA-256 each time it hands the folder out (a folder that does not match is replaced by the
shipped one), and builds only other specs. ``UNSTABLE_TINY_BUILD=local`` builds every spec here
instead, into ``tiny-KEY-local``.

    python -m unstable_hf.shipped SPEC [SPEC ...]    build SPECs here and ship them (maintainers)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: where the shipped builds lie: a folder ``tiny-KEY`` each, and the manifest
FOLDER = Path(__file__).parent / "shipped_models"
MANIFEST = FOLDER / "manifest.json"
#: set to "local" to build every spec on this machine instead of taking a shipped build
BUILD_ENV = "UNSTABLE_TINY_BUILD"


@dataclass(frozen=True)
class ShippedBuild:
    key: str
    spec: str
    source: Path  #: the shipped folder
    files: dict[str, str]  #: file name -> SHA-256


def builds_locally() -> bool:
    """Whether ``UNSTABLE_TINY_BUILD=local`` asks for every tiny model to be built here."""
    return os.environ.get(BUILD_ENV, "").strip().lower() == "local"


def manifest() -> dict[str, ShippedBuild]:
    """The shipped builds by cache key (empty where none is shipped)."""
    if not MANIFEST.is_file():
        return {}
    entries = json.loads(MANIFEST.read_text())["models"]
    return {key: ShippedBuild(key, e["spec"], FOLDER / f"tiny-{key}", dict(e["files"])) for key, e in entries.items()}


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def mismatched(folder: Path, files: dict[str, str]) -> list[str]:
    """The manifest's files that `folder` lacks or holds with another SHA-256, and files it holds
    beyond them."""
    bad = [name for name, digest in files.items() if not (folder / name).is_file() or file_digest(folder / name) != digest]
    extra = sorted(p.name for p in folder.iterdir() if p.name not in files) if folder.is_dir() else []
    return bad + extra


def shipped_build(key: str) -> ShippedBuild | None:
    """The shipped build of cache key `key`, its files checked, or None where none is shipped (or
    ``UNSTABLE_TINY_BUILD=local``). A damaged shipped build raises ValueError naming its files."""
    if builds_locally():
        return None
    build = manifest().get(key)
    if build is None:
        return None
    if bad := mismatched(build.source, build.files):
        raise ValueError(f"tiny model tiny-{key} ({build.spec}) shipped with unstable-hf is damaged: {', '.join(bad)} "
                         f"not as its manifest says ({MANIFEST}); reinstall unstable-hf, or set {BUILD_ENV}=local "
                         "to build it on this machine")
    return build


def install(build: ShippedBuild, final: Path) -> Path:
    """`final` holding exactly the shipped build: kept where every file matches, otherwise (absent,
    damaged, or built on this machine before the build was shipped) replaced atomically."""
    if final.is_dir() and not mismatched(final, build.files):
        return final
    replaced = final.exists()
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-shipped-", dir=final.parent))
    try:
        for name in build.files:
            shutil.copyfile(build.source / name, tmp / name)
        if replaced:
            old = Path(tempfile.mkdtemp(prefix=".tiny-old-", dir=final.parent))
            os.replace(final, old / final.name)
            shutil.rmtree(old, ignore_errors=True)
        try:
            os.replace(tmp, final)
        except OSError:  # another process installed it first
            if mismatched(final, build.files):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if replaced:
        logging.getLogger(__name__).warning("%s did not match the build shipped with unstable-hf: replaced by it", final)
    return final


def ship(spec_text: str, cache: Path) -> ShippedBuild:
    """Build `spec_text` on this machine (in `cache`, or taken from it where built there before) and
    add it to the shipped builds, with the machine it was built on in the manifest."""
    import tokenizers
    import torch
    import transformers

    from .tiny import TinySpec, ensure_tiny

    spec = TinySpec.parse(spec_text)
    built = ensure_tiny(spec, cache, local=True)
    key = spec.key()
    target = FOLDER / f"tiny-{key}"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(built, target)
    files = {p.name: file_digest(p) for p in sorted(target.iterdir())}
    data = json.loads(MANIFEST.read_text()) if MANIFEST.is_file() else {"models": {}}
    data["models"][key] = {
        "spec": spec_text,
        "files": files,
        "built_on": {"machine": platform.machine(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                     "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
                     "torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__},
    }
    MANIFEST.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return ShippedBuild(key, spec_text, target, files)


def main(argv: list[str] | None = None) -> None:
    from .loading import cache_root

    specs = sys.argv[1:] if argv is None else argv
    if not specs:
        sys.exit("usage: python -m unstable_hf.shipped SPEC [SPEC ...]")
    for spec in specs:
        build = ship(spec, cache_root())
        print(f"shipped tiny-{build.key}: {spec}")


if __name__ == "__main__":
    main()
