#!/usr/bin/env bash
# trains.sh OCTOPIPE REPO_ROOT: a torch schedule, imported, compiles and
# trains to the same bits as OctoPipe's own plans (plan independence,
# docs/codegen.md): tests/interop/torch's ZB-H1 with comm actions on 2 CPU
# ranks and its interleaved 1F1B (2 stages a rank), 3 steps each, against a
# 1-rank plan of the same model and micro-batches: the loss of every step
# and the final model hash, bit for bit.
# Exit 0 all agree, 1 a mismatch or a failure, 77 (skip) without mpirun.
set -u
bin=$1 root=$2
cd "$root" || exit 2
if ! command -v mpirun >/dev/null 2>&1; then
  echo "SKIP: mpirun not found"; exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 OCTO_COMM_TIMEOUT=${OCTO_COMM_TIMEOUT:-300}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
model=models/tiny-hybrid.yaml steps=3
pass=0 fail=0

# The losses and the hash a run prints: "step N loss L (HEX)", "model hash H".
bits() { grep -o -E '^step [0-9]+ loss [^ ]+ \([^)]*\)|^model hash [0-9a-fx]+' "$1"; }

for spec in "zbh1-2rank-4mb-comms 4" "interleaved-1f1b-2rank-4stage-4mb 4"; do
  set -- $spec
  name=$1 mb=$2
  "$bin" compile $model --devices 1 --microbatches "$mb" --dp 1 --schedule 1f1b -o "$tmp/ref-$name" \
    > "$tmp/out" 2>&1 && "$tmp/ref-$name/launch" --steps $steps > "$tmp/ref-$name.log" 2>&1 ||
    { echo "FAIL the 1-rank reference of $name:"; tail -n 5 "$tmp/out" "$tmp/ref-$name.log"; fail=$((fail + 1)); continue; }
  if ! "$bin" import "tests/interop/torch/$name.csv" --model $model --backend mpi -o "$tmp/$name.opir" \
       > "$tmp/out" 2>&1 || ! "$bin" compile "$tmp/$name.opir" -o "$tmp/$name" > "$tmp/out" 2>&1 ||
     ! "$tmp/$name/launch" --steps $steps > "$tmp/$name.log" 2>&1; then
    echo "FAIL $name: import, compile or run:"; tail -n 5 "$tmp/out" "$tmp/$name.log"; fail=$((fail + 1)); continue
  fi
  if [ "$(bits "$tmp/$name.log" | wc -l)" -ne $((steps + 1)) ] ||
     [ "$(bits "$tmp/$name.log")" != "$(bits "$tmp/ref-$name.log")" ]; then
    echo "FAIL $name: not the 1-rank run's bits:"; diff <(bits "$tmp/ref-$name.log") <(bits "$tmp/$name.log") | head
    fail=$((fail + 1))
  else
    pass=$((pass + 1))
  fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
