#!/usr/bin/env bash
# Runs every input of a corpus directory through one octopipe command and
# checks that it fails cleanly: exit status 1, the first line of stderr equal
# to the .err file beside the input, no sanitizer report, no hang.  An input
# may have a .args file beside it: options put after the input (one line,
# split at blanks; paths relative to the repository, special files such as
# /dev/zero allowed), for errors that only flags or other files reach;
# without one, the DEFAULT_ARGS given after EXT.
#   expect-errors.sh OCTOPIPE REPO_ROOT DIR COMMAND EXT [DEFAULT_ARGS...]
set -u
bin=$1 root=$2 dir=$3 cmd=$4 ext=$5
shift 5
defaults=("$@")
cd "$root" || exit 2
pass=0 fail=0
for input in "$dir"/*."$ext"; do
  want_file=${input%.*}.err
  if [ ! -f "$want_file" ]; then
    echo "FAIL $input: no $want_file"; fail=$((fail + 1)); continue
  fi
  extra=("${defaults[@]}")
  args_file=${input%.*}.args
  if [ -f "$args_file" ]; then read -r -a extra < "$args_file"; fi
  err=$(timeout 120 "$bin" "$cmd" "$input" "${extra[@]}" 2>&1 >/dev/null)
  rc=$?
  first=$(printf '%s\n' "$err" | head -n 1)
  want=$(head -n 1 "$want_file")
  if [ $rc -ne 1 ]; then
    echo "FAIL $input: exit status $rc, expected 1"; printf '%s\n' "$err" | head -n 5
    fail=$((fail + 1))
  elif [ "$first" != "$want" ]; then
    printf 'FAIL %s:\n  got:  %s\n  want: %s\n' "$input" "$first" "$want"
    fail=$((fail + 1))
  elif printf '%s' "$err" | grep -q -e AddressSanitizer -e LeakSanitizer -e 'runtime error'; then
    echo "FAIL $input: sanitizer report"; printf '%s\n' "$err" | head -n 20
    fail=$((fail + 1))
  else
    pass=$((pass + 1))
  fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
