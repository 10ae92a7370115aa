#!/bin/bash
# tests/gpu/kit_check.sh BUILD_DIR: ctest gpu_kit (docs/cuda.md, "The
# first-run kit").  Makes the kit from BUILD_DIR (kit.sh --quick) in a
# temporary folder and checks that it needs nothing of the build:
#   - every ELF file in it has only $ORIGIN-relative run paths;
#   - first_run.sh --emulate passes with LD_LIBRARY_PATH cleared and, in a
#     mount namespace where one can be had (unshare), the source tree, the
#     build tree and Open MPI's plugin folder hidden under empty mounts, and
#     the system's copy of every library the kit carries (libmpi, OpenBLAS,
#     ...) under /dev/null.
# Exit 0, 1 on a failure, 77 (skip) without the CUDA toolkit in the build,
# patchelf, mpirun or Open MPI's ompi_info.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$1" && pwd)
for t in patchelf mpirun ompi_info; do
	command -v $t > /dev/null 2>&1 || { echo "SKIP: $t not found"; exit 77; }
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
bash "$SRC/tests/gpu/kit.sh" --quick "$BUILD" "$TMP/kit"
rc=$?
[ $rc = 77 ] && exit 77
[ $rc = 0 ] || { echo "FAIL: kit.sh (exit $rc)"; exit 1; }

fail=0
while read -r f; do
	head -c 4 "$f" | grep -q ELF || continue
	rp=$(readelf -d "$f" | sed -n 's/.*(R[UN]*PATH).*\[\(.*\)\]/\1/p')
	case $rp in
	'$ORIGIN'|'$ORIGIN/'*) ;;
	'') ;; # the emulator's modules: libc and libm only
	*) echo "FAIL: ${f#"$TMP"/}: run path '$rp'"; fail=1 ;;
	esac
done < <(find "$TMP/kit" -type f)

# What to hide: the trees, Open MPI's plugins and help text, and the
# system's copy of every library the kit carries (/dev/null over it).
hide=("$BUILD" "$SRC")
hide+=("$(ompi_info --path pkglibdir --parsable | sed -n 's/^path:pkglibdir://p')"
	"$(ompi_info --path pkgdatadir --parsable | sed -n 's/^path:pkgdatadir://p')")
for l in "$TMP"/kit/lib/*; do
	p=$(ldconfig -p | awk -v l="$(basename "$l")" '$1 == l {print $NF; exit}')
	[ -n "$p" ] && hide+=("$(readlink -f "$p")")
done
cmd='for d in "$@"; do
	if [ -d "$d" ]; then mount -t tmpfs none "$d"; elif [ -f "$d" ]; then mount --bind /dev/null "$d"; fi
done'
cmd="$cmd"'; env -u LD_LIBRARY_PATH "$KIT/first_run.sh" --emulate "$LOGS"'
export KIT=$TMP/kit LOGS=$TMP/logs
if unshare -m true 2> /dev/null; then
	ns=(unshare -m)
elif unshare -rm true 2> /dev/null; then
	ns=(unshare -rm)
else
	ns=()
	echo "(no mount namespace here: the trees stay visible; LD_LIBRARY_PATH cleared)"
fi
if [ ${#ns[@]} -gt 0 ]; then
	echo "hidden: ${hide[*]}"
	# Sorted so that a folder inside another is mounted over first.
	mapfile -t hide < <(printf '%s\n' "${hide[@]}" | awk 'NF' | sort -u -r)
	"${ns[@]}" bash -c "$cmd" hide "${hide[@]}"
else
	bash -c "$cmd" hide
fi
rc=$?
[ $rc = 0 ] || { echo "FAIL: first_run.sh --emulate (exit $rc)"; fail=1; }
for s in environment dev_check_f32 dev_check_bf16 tiny_hybrid_f32 tiny_hybrid_bf16 kernel_time; do
	grep -q "\"step\": \"$s\", \"status\": \"pass\"" "$LOGS/first_run.json" 2> /dev/null ||
		{ echo "FAIL: first_run.json: step $s did not pass"; fail=1; }
done
[ $fail = 0 ] && echo "gpu_kit: the kit ($(du -sh "$TMP/kit" | cut -f1)) runs with none of the build's files"
exit $fail
