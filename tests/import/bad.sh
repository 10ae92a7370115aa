#!/usr/bin/env bash
# import_bad: the bad config.json corpus (bad/: each input with its first
# line of error, through expect-errors.sh), and the inputs a corpus file
# cannot be: a directory, /dev/null, a file of neither format.  Each must
# fail with a located error and exit status 1.
#   bad.sh OCTOPIPE REPO_ROOT
set -u
bin=$1 root=$2
cd "$root" || exit 2
here=$(dirname "$0")
bash "$here/../expect-errors.sh" "$bin" "$root" tests/import/bad import json
rc=$?
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
# expect INPUT FIRST-LINE: import INPUT fails with status 1 and that first line.
expect() {
  local err st
  err=$(timeout 60 "$bin" import "$1" 2>&1 >/dev/null); st=$?
  local first
  first=$(printf '%s\n' "$err" | head -n 1)
  if [ $st -ne 1 ] || [ "$first" != "$2" ]; then
    printf 'FAIL import %s: status %d\n  got:  %s\n  want: %s\n' "$1" $st "$first" "$2"
    fail=$((fail + 1))
  else
    pass=$((pass + 1))
  fi
}
mkdir "$tmp/config.json"
expect "$tmp/config.json" "$tmp/config.json:1:1: error: cannot read file: it is a directory, not a regular file"
expect /dev/null "/dev/null:1:1: error: cannot read file: it is a character device, not a regular file"
printf 'hello\n' > "$tmp/notes.txt"
expect "$tmp/notes.txt" "octopipe import: error: import reads a torch.distributed.pipelining schedule (FILE.csv) or a Hugging Face config.json; '$tmp/notes.txt' is neither"
echo "$pass passed, $fail failed (special inputs)"
[ $rc -eq 0 ] && [ $fail -eq 0 ]
