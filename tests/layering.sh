#!/usr/bin/env bash
# The layering of the sources, checked two ways.
#   layering.sh REPO_ROOT BUILD_DIR
#
# 1. Includes.  ir/ is the bottom; frontend/ and passes/ sit on it; codegen/
#    on those; tools/ on everything.  runtime/ stands alone: it depends on
#    nothing of the compiler, and the compiler may use it.  Every
#    `#include "NAME"` is resolved by the header's file name to the
#    directory that holds it (the script checks that the names are unique
#    across directories); names not in the tree (system or generated
#    headers, e.g. the build's codegen/cg_config.h) are not checked.
# 2. Objects.  Within the runtime library (every libocto_rt*.a of the build),
#    "object A uses a symbol that object B defines" (nm) must have no cycle.
#    A cycle is printed with, for each step A -> B, one symbol A takes from B.
#
# One line per violation, then a summary; exit 1 if any, 2 on a usage error.
set -u
root=${1:?usage: layering.sh REPO_ROOT BUILD_DIR}
build=${2:?usage: layering.sh REPO_ROOT BUILD_DIR}
build=$(cd "$build" && pwd) || exit 2
cd "$root" || exit 2

# What each directory may include besides itself.
declare -A may=(
  [ir]=""
  [frontend]="ir"
  [passes]="ir runtime"
  [codegen]="ir frontend passes runtime"
  [tools]="ir frontend passes codegen runtime"
  [runtime]=""
)
dirs="ir frontend passes codegen tools runtime"
rules=$(for d in $dirs; do echo "$d ${may[$d]}"; done)

# shellcheck disable=SC2086
headers=$(find $dirs -type f \( -name '*.h' -o -name '*.inc' \) | sort)
# shellcheck disable=SC2086
sources=$(find $dirs -type f \( -name '*.c' -o -name '*.h' -o -name '*.inc' -o -name '*.cu' \) | sort)
if [ -z "$sources" ]; then
  echo "layering: no sources under $root ($dirs)" >&2
  exit 2
fi

include_violations=$(
  # shellcheck disable=SC2086
  awk -v rules="$rules" -v headers="$headers" '
    function layer(path) { sub(/\/.*/, "", path); return path }
    function base(path) { sub(/.*\//, "", path); return path }
    BEGIN {
      n = split(rules, line, "\n")
      for (i = 1; i <= n; i++) {
        m = split(line[i], w, " ")
        for (j = 2; j <= m; j++) ok[w[1], w[j]] = 1
      }
      n = split(headers, h, "\n")
      for (i = 1; i <= n; i++) {
        b = base(h[i])
        if ((b in where) && layer(where[b]) != layer(h[i]))
          print h[i] ": header name also used by " where[b] " (includes cannot be resolved)"
        where[b] = h[i]
      }
    }
    /^[ \t]*#[ \t]*include[ \t]*"/ {
      name = $0
      sub(/^[^"]*"/, "", name); sub(/".*/, "", name)
      b = base(name)
      if (!(b in where)) next
      from = layer(FILENAME); to = layer(where[b])
      if (from != to && !((from, to) in ok))
        print FILENAME ": includes " where[b] " (" from " may not depend on " to ")"
    }' $sources
)

# The runtime objects: "USER DEFINER SYMBOL" for each use of a symbol that
# another object of the library defines.
shopt -s nullglob
libs=("$build"/runtime/libocto_rt*.a)
if [ ${#libs[@]} -eq 0 ]; then
  echo "layering: no runtime library (libocto_rt*.a) in $build/runtime: build it first" >&2
  exit 2
fi
# nm -P -A: "LIB[MEMBER]: NAME TYPE ...".  Uppercase types but U are
# definitions; U and the weak undefined w, v are uses.
if ! symbols=$(nm -P -A "${libs[@]}"); then
  echo "layering: nm failed on ${libs[*]}" >&2
  exit 2
fi
edges=$(printf '%s\n' "$symbols" | awk '
  {
    obj = $1; sub(/^.*\[/, "", obj); sub(/\]:$/, "", obj); sub(/\.c\.o$/, ".o", obj)
    if ($3 == "U" || $3 == "w" || $3 == "v") { nuse++; user[nuse] = obj; usym[nuse] = $2 }
    else if ($3 ~ /^[A-Z]$/) def[$2] = obj
  }
  END {
    for (i = 1; i <= nuse; i++)
      if ((usym[i] in def) && def[usym[i]] != user[i]) print user[i], def[usym[i]], usym[i]
  }' | sort -k1,1 -k2,2 -k3,3)

# For every object, the shortest cycle through it (breadth first), each
# cycle printed once, starting at its least object, with the symbol that
# makes each step.
cycles=$(printf '%s\n' "$edges" | awk '
  NF == 3 {
    if (!(($1, $2) in via)) { nadj[$1]++; adj[$1, nadj[$1]] = $2; via[$1, $2] = $3 }
    if (!($1 in seen)) { seen[$1] = 1; nodes[++nn] = $1 }
  }
  END {
    for (s = 1; s <= nn; s++) {
      src = nodes[s]
      split("", parent); head = 1; tail = 0; found = ""
      queue[++tail] = src; parent[src] = ""
      while (head <= tail && found == "") {
        u = queue[head++]
        for (k = 1; k <= nadj[u]; k++) {
          v = adj[u, k]
          if (v == src) { found = u; break }
          if (!(v in parent)) { parent[v] = u; queue[++tail] = v }
        }
      }
      if (found == "") continue
      # The path src .. found, then back to src.
      n = 0
      for (x = found; x != src; x = parent[x]) rev[++n] = x
      cyc[1] = src
      for (i = 1; i <= n; i++) cyc[i + 1] = rev[n + 1 - i]
      len = n + 1
      least = 1
      for (i = 2; i <= len; i++) if (cyc[i] < cyc[least]) least = i
      text = ""; syms = ""
      for (i = 0; i < len; i++) {
        a = cyc[(least + i - 1) % len + 1]; b = cyc[(least + i) % len + 1]
        text = text a " -> "
        syms = syms (i ? ", " : "") a ":" via[a, b]
      }
      text = text cyc[least]
      if (!(text in done)) { done[text] = 1; print "runtime: cycle " text " (" syms ")" }
    }
  }' | sort)

status=0
for v in "$include_violations" "$cycles"; do
  [ -n "$v" ] && { printf '%s\n' "$v"; status=1; }
done
count=$(printf '%s\n%s\n' "$include_violations" "$cycles" | grep -c .)
if [ "$status" = 0 ]; then
  echo "layering: ok (includes of $(echo "$sources" | wc -l) files; ${#libs[@]} runtime libraries)"
else
  echo "layering: $count violation$([ "$count" = 1 ] || echo s)"
fi
exit $status
