#!/usr/bin/env bash
# Every model of the zoo (and every good input of tests/good) plans at several device counts, its plan verifies,
# and its IR text prints back unchanged through `octopipe opt`.
#   run.sh OCTOPIPE REPO_ROOT
# OCTO_TEST_QUICK=1 (the sanitizer build) plans at 1 and 4 devices, the
# baselines at P=4, M=8 only, and the tuned plans with an effort of 200
# plans judged a tuner: the same code paths, which is what the sanitizers
# add to the full pass.
set -u
bin=$1 root=$2
cd "$root" || exit 2
pass=0 fail=0
devices="1 2 4 8" shapes=("4 8" "8 16") effort=()
if [ "${OCTO_TEST_QUICK:-0}" = 1 ]; then devices="1 4" shapes=("4 8") effort=(--tune-effort 200); fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The good inputs fix their own device count (a given placement).
for model in models/*.yaml tests/good/*.yaml; do
  case $model in tests/good/*) devs=own ;; *) devs=$devices ;; esac
  for dev in $devs; do
    name="$model --devices $dev"
    flags=(--devices "$dev" --dp 1 --schedule 1f1b)
    [ "$dev" = own ] && flags=()
    if ! timeout 300 "$bin" plan "$model" "${flags[@]}" --verify-each -o "$tmp/p.opir" >"$tmp/log" 2>&1; then
      echo "FAIL $name: plan failed"; head -n 5 "$tmp/log"; fail=$((fail + 1)); continue
    fi
    if ! timeout 300 "$bin" opt "$tmp/p.opir" -o "$tmp/q.opir" >"$tmp/log" 2>&1 ||
       ! cmp -s "$tmp/p.opir" "$tmp/q.opir"; then
      echo "FAIL $name: IR does not print back unchanged"; head -n 5 "$tmp/log"
      fail=$((fail + 1)); continue
    fi
    pass=$((pass + 1))
  done
done
# The tuner on each model's own cluster, the data-parallel degree searched
# (the default): a plan that verifies and prints back, or, for a model too
# big for it, the error that names the device.
for model in models/*.yaml; do
  if timeout 300 "$bin" plan "$model" "${effort[@]}" --verify-each -o "$tmp/p.opir" >"$tmp/log" 2>&1; then
    if timeout 300 "$bin" opt "$tmp/p.opir" -o "$tmp/q.opir" >/dev/null 2>&1 && cmp -s "$tmp/p.opir" "$tmp/q.opir"; then
      pass=$((pass + 1))
    else
      echo "FAIL $model (tuned): IR does not print back unchanged"; fail=$((fail + 1))
    fi
  elif grep -q "error: the model does not fit\(: in the best plan found, device D[0-9]* needs\| with any data-parallel degree\)" "$tmp/log"; then
    pass=$((pass + 1))
  else
    echo "FAIL $model (tuned): plan failed"; head -n 5 "$tmp/log"; fail=$((fail + 1))
  fi
done
# Every baseline plan of the zoo at P=4, M=8 and P=8, M=16, lowered and
# proven deadlock-free for both backends (the default pipeline ends in
# comm, verify and memplan; the IR must carry the proof for its backend).
for model in models/*.yaml; do
  for pm in "${shapes[@]}"; do
    set -- $pm
    for sched in 1f1b i1f1b zbh1 zbh2 zbv; do
      for be in nccl mpi; do
        name="$model --devices $1 --microbatches $2 --schedule $sched --backend $be"
        if ! timeout 300 "$bin" plan "$model" --devices "$1" --dp 1 --microbatches "$2" --schedule $sched \
             --backend $be -o "$tmp/p.opir" >"$tmp/log" 2>&1; then
          # A schedule may not apply (too few layers for 2 chunks per device, m % p): say so.
          if grep -q "cannot cut\|multiple of" "$tmp/log"; then continue; fi
          echo "FAIL $name: plan failed"; head -n 5 "$tmp/log"; fail=$((fail + 1)); continue
        fi
        if grep -q "^proof $be steps=" "$tmp/p.opir"; then pass=$((pass + 1)); else
          echo "FAIL $name: no proof for $be in the IR"; fail=$((fail + 1)); fi
      done
    done
  done
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
