#!/bin/sh
# rt_deps.sh [BUILD]: the file graph of libocto_rt from its object files
# (the members of BUILD/runtime/libocto_rt.a; BUILD defaults to build).
# For each object, the other objects that define a symbol it leaves
# undefined ("A -> B": A calls B); then a check that the graph has no
# circle (tsort finds one as a loop: exit 1).
set -eu
lib=${1:-build}/runtime/libocto_rt.a
[ -f "$lib" ] || { echo "rt_deps: no $lib (build octo_rt first)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# nm -A: "LIB:MEMBER: [ADDR] TYPE SYMBOL"; the member's name without .c.o
nm -A -g --defined-only "$lib" | awk -F'[: ]+' 'NF >= 5 { sub(/\.c\.o$/, "", $2); print $NF, $2 }' |
	sort -u >"$tmp/def"
nm -A -u "$lib" | awk -F'[: ]+' '{ sub(/\.c\.o$/, "", $2); print $NF, $2 }' | sort -u >"$tmp/undef"
ar t "$lib" | sed 's/\.c\.o$//' | sort >"$tmp/objs"
# undefined in A, defined in B: the edge A B
join "$tmp/undef" "$tmp/def" | awk '$2 != $3 { print $2, $3 }' | sort -u >"$tmp/edges"
awk '{ e[$1] = e[$1] " " $2 } END { for (a in e) print a " ->" e[a] }' "$tmp/edges" | sort
# every object once, so that a file without edges is in the order too
awk '{ print $1, $1 }' "$tmp/objs" >>"$tmp/edges"
if tsort "$tmp/edges" >"$tmp/order" 2>"$tmp/err"; then
	echo "no circle among the $(wc -l <"$tmp/objs") files; callers before callees:"
	tr '\n' ' ' <"$tmp/order"
	echo
else
	echo "CIRCLE among the files:"
	cat "$tmp/err"
	exit 1
fi
