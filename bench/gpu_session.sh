#!/usr/bin/env bash
# What a GPU machine without network runs, from the repository root (docs/gpu.md):
#   1. installs the wheels carried in .whl/ (pydantic, textarena and their needs) and the core
#      with the hf and reinforce plugins (editable, no dependencies: torch, transformers and peft
#      come with the machine);
#   2. runs bench/gpu_check.py (QUICK=1: --quick; SHAPES=a,b: --shapes), keeping the built models;
#   3. runs examples/qwen3-1.7b-gpu-hf.toml on the random-weight 1.7B model for 3 updates with
#      short completions: the whole loop on the GPU.
# Output goes to stdout and to $OUT (or ./gpu-out): log, gpu_check.json, the run's metrics.
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/log") 2>&1
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . -e plugins/unstable-hf -e plugins/unstable-reinforce || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
MODELS=/tmp/gpu-models
timeout "${CHECK_S:-330}" python3 bench/gpu_check.py ${QUICK:+--quick} ${STACKS_S:+--stacks-after $STACKS_S} ${SHAPES:+--shapes $SHAPES} --keep-models "$MODELS" --json "$OUT/gpu_check.json"
echo "gpu_check exit status $?"
[ -d "$MODELS/qwen3-1.7b" ] || { echo "no 1.7B model built: the example is skipped"; exit 0; }
t0=$(date +%s)
timeout "${EXAMPLE_S:-180}" python3 -c "from unstable_core.entry import main; main()" run examples/qwen3-1.7b-gpu-hf.toml --run-dir /tmp/gpu-run \
  --set model.model="$MODELS/qwen3-1.7b" --set inference.max_tokens=32 --set learner.max_generation_len=32 \
  --set collection.num_train_games=16 --set training.batch_size=32 --set buffer.capacity=64 \
  --set training.learning_steps=3 --set training.eval_every=3 --set collection.eval_games=4 --set collection.num_eval_games=4
echo "example exit status $? after $(( $(date +%s) - t0 )) s"
cp /tmp/gpu-run/metrics.jsonl "$OUT/example-metrics.jsonl" 2>/dev/null
nvidia-smi --query-gpu=memory.used --format=csv,noheader
