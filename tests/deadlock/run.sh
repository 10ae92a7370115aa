#!/usr/bin/env bash
# Deadlock corpus: each NAME.opir is a lowered program that `octopipe verify`
# must accept (exit 0, "deadlock-free") or reject (exit 1, with its cycle or
# the structural error); its first line "; EXPECT: STATUS" gives the exit
# status and NAME.expected the whole output (stdout and stderr), byte for
# byte.  docs/deadlock.md explains the proof and each program.
#   run.sh OCTOPIPE REPO_ROOT [--update]
# --update rewrites the expected files: read the diff before committing it.
set -u
bin=$1 root=$2 update=${3:-}
cd "$root" || exit 2
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for input in tests/deadlock/*.opir; do
  [ -e "$input" ] || continue
  expected=${input%.*}.expected
  want_rc=$(sed -n '1s/^; EXPECT: \([0-9][0-9]*\)$/\1/p' "$input")
  if [ -z "$want_rc" ]; then
    echo "FAIL $input: no '; EXPECT: STATUS' first line"; fail=$((fail + 1)); continue
  fi
  timeout 300 "$bin" verify "$input" >"$tmp/out" 2>&1
  rc=$?
  if [ "$update" = --update ]; then
    cp "$tmp/out" "$expected"
  fi
  if [ $rc -ne "$want_rc" ]; then
    echo "FAIL $input: exit status $rc, expected $want_rc"; head -n 10 "$tmp/out"
    fail=$((fail + 1)); continue
  fi
  if [ ! -f "$expected" ]; then
    echo "FAIL $input: no $expected"; fail=$((fail + 1)); continue
  fi
  if ! diff -u "$expected" "$tmp/out" >"$tmp/diff"; then
    echo "FAIL $input: output differs from $expected"; head -n 40 "$tmp/diff"
    fail=$((fail + 1)); continue
  fi
  if grep -q -e AddressSanitizer -e LeakSanitizer -e 'runtime error' "$tmp/out"; then
    echo "FAIL $input: sanitizer report"; head -n 20 "$tmp/out"
    fail=$((fail + 1)); continue
  fi
  pass=$((pass + 1))
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
