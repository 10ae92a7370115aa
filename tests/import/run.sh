#!/usr/bin/env bash
# import_models: every config of models.txt imported (octopipe import), the
# model file planned (octopipe plan), and the parameter count plan prints
# checked against the published one.  Prints a table: ours, published, the
# difference.
#   run.sh OCTOPIPE REPO_ROOT
set -u
bin=$1 root=$2
cd "$root" || exit 2
dir=tests/import
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
printf '%-18s %16s %16s %14s\n' config ours published difference
while read -r name published tol ignore; do
  case $name in ''|'#'*) continue ;; esac
  args=()
  [ "$ignore" != - ] && args=(--ignore "$ignore")
  yaml=$tmp/$name.yaml
  if ! err=$(timeout 120 "$bin" import "$dir/configs/$name.json" "${args[@]}" -o "$yaml" 2>&1 >/dev/null); then
    printf 'FAIL %s: import failed\n%s\n' "$name" "$err"; fail=$((fail + 1)); continue
  fi
  # Any cluster serves for a count; `ideal` has room for every model.
  if ! out=$(timeout 300 "$bin" plan "$yaml" --cluster ideal --devices 8 --dp 1 --schedule 1f1b --json 2>&1); then
    printf 'FAIL %s: plan failed\n%s\n' "$name" "$(printf '%s\n' "$out" | head -n 5)"; fail=$((fail + 1)); continue
  fi
  ours=$(printf '%s' "$out" | grep -o '"parameters": [0-9]*' | grep -o '[0-9]*$')
  if [ -z "$ours" ]; then
    printf 'FAIL %s: no parameter count in plan --json\n' "$name"; fail=$((fail + 1)); continue
  fi
  diff=$((ours - published))
  printf '%-18s %16s %16s %14s\n' "$name" "$ours" "$published" "$diff"
  if [ ${diff#-} -gt "$tol" ]; then
    printf 'FAIL %s: %s parameters, published %s (tolerance %s)\n' "$name" "$ours" "$published" "$tol"
    fail=$((fail + 1))
  else
    pass=$((pass + 1))
  fi
done < "$dir/models.txt"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ] && [ $pass -gt 0 ]
