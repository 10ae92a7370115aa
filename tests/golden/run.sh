#!/usr/bin/env bash
# Golden IR tests: each input (NAME.opir or NAME.yaml) names its command in
# a first-line comment "; RUN: ARGS" (or "# RUN: ARGS" in YAML); the output
# of `octopipe ARGS INPUT` must equal NAME.expected byte for byte.  An
# expected file that is one IR module must also print back unchanged
# through `octopipe opt` (the text form is lossless).
#   run.sh OCTOPIPE REPO_ROOT [--update]
# --update rewrites the expected files: read the diff before committing it.
set -u
bin=$1 root=$2 update=${3:-}
cd "$root" || exit 2
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for input in tests/golden/*.opir tests/golden/*.yaml; do
  [ -e "$input" ] || continue
  expected=${input%.*}.expected
  args=$(sed -n '1s/^[;#] RUN: //p' "$input")
  if [ -z "$args" ]; then
    echo "FAIL $input: no RUN line"; fail=$((fail + 1)); continue
  fi
  # shellcheck disable=SC2086
  # The tuner's progress lines (stderr, once a second) depend on the
  # machine's speed, not on the plan: they are not part of the output.
  timeout 300 "$bin" $args "$input" >"$tmp/raw" 2>&1
  rc=$?
  grep -v '^tune: [0-9.]* s, ' "$tmp/raw" >"$tmp/out"
  if [ "$update" = --update ]; then
    cp "$tmp/out" "$expected"
  fi
  if [ $rc -ne 0 ]; then
    echo "FAIL $input: exit status $rc"; head -n 5 "$tmp/out"; fail=$((fail + 1)); continue
  fi
  if ! diff -u "$expected" "$tmp/out" >"$tmp/diff"; then
    echo "FAIL $input: output differs from $expected"; head -n 40 "$tmp/diff"
    fail=$((fail + 1)); continue
  fi
  if [ "$(grep -c '^octopipe-ir ' "$expected")" = 1 ] && ! grep -q '^; \*\*\*' "$expected"; then
    timeout 300 "$bin" opt "$expected" >"$tmp/again" 2>&1
    if ! cmp -s "$expected" "$tmp/again"; then
      echo "FAIL $expected: does not print back unchanged"; diff -u "$expected" "$tmp/again" | head -n 20
      fail=$((fail + 1)); continue
    fi
  fi
  pass=$((pass + 1))
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
