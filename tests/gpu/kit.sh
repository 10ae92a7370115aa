#!/bin/bash
# tests/gpu/kit.sh [--quick] BUILD_DIR OUT_DIR: the first-run kit of issue
# 19 section 4 (docs/cuda.md, "The first-run kit").
#
# Made here, after a build with the CUDA toolkit, for a machine with a GPU,
# the NVIDIA driver and the CUDA libraries (the toolkit's, or PyTorch's
# wheels) but none of the build's packages (libyaml, MPI, OpenBLAS, LLVM,
# Check, a C++ compiler): OUT_DIR holds, self-contained,
#   first_run.sh        the check itself (tests/gpu/first_run.sh)
#   bin/                dev_check (also the per-kernel timing: --time), gemm_peak,
#                       kernel_info
#   runs/hybrid-f32/    tiny-hybrid, 1 rank, --target cuda (sm_90), f32: what
#   runs/hybrid-bf16/     `octopipe compile --emit=cuda,ptx` writes (rank0,
#                         launch, the modules' .cu and .ptx, plan, corpus)
#   runs/emu-hybrid-*/  the same with --target cuda-emu (first_run.sh --emulate)
#   kernels/MODEL/      the PTX modules of Llama-3-8B and Nemotron-H-8B in bf16
#                       (not with --quick)
#   emu-modules/        dev_check's emulator modules for --emulate's kinds and
#                       its timing at small shapes, compiled here (the GPU's
#                       machine has no C++ compiler)
#   ref/                tiny-hybrid's CPU losses (5 steps), measured here
#   lib/                every non-CUDA shared library of the above (ldd),
#                       glibc's own excepted; run paths $ORIGIN-relative
#   mpi/                Open MPI's plugins and help text under its
#                       prefix-relative paths (OPAL_PREFIX=mpi), those that
#                       need no network stack (UCX, libfabric, verbs, PSM,
#                       PMIx): the kit's ranks run alone, as MPI singletons
#   MANIFEST            what built it, the glibc it needs
# The CUDA libraries (cudart, cuBLAS, NCCL, NVRTC, the driver) are not
# copied: first_run.sh finds them on the machine.  Prints the kit's size;
# fails past 60 MiB.  --quick leaves out kernels/ (ctest gpu_kit).
# Exit 0, 1 on a failure, 77 when the build has no CUDA target.
set -eu
SRC=$(cd "$(dirname "$0")/../.." && pwd)
QUICK=0
if [ "${1:-}" = --quick ]; then
	QUICK=1
	shift
fi
[ $# = 2 ] || { echo "usage: tests/gpu/kit.sh [--quick] BUILD_DIR OUT_DIR" >&2; exit 1; }
BUILD=$(cd "$1" && pwd)
OUT=$2
OCTO=$BUILD/octopipe
die() { echo "kit.sh: error: $*" >&2; exit 1; }
if [ ! -x "$BUILD/tests/gpu/gemm_peak" ] || [ ! -x "$BUILD/tests/gpu/kernel_info" ]; then
	echo "kit.sh: SKIP: $BUILD was built without the CUDA toolkit (no tests/gpu/gemm_peak)"
	exit 77
fi
[ -x "$OCTO" ] && [ -x "$BUILD/tests/dev/dev_check" ] || die "no build in $BUILD"
command -v mpirun > /dev/null || die "mpirun not found (the CPU reference run needs it)"
command -v ompi_info > /dev/null || die "ompi_info not found (Open MPI's plugin directory)"
command -v patchelf > /dev/null || die "patchelf not found (apt-get install patchelf)"
rm -rf "$OUT"
mkdir -p "$OUT"/{bin,lib,runs,kernels,ref,emu-modules}
OUT=$(cd "$OUT" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
STEPS=5
ARCH=sm_90 # H100 and H200

echo "kit: rank programs"
hybrid=$SRC/models/tiny-hybrid.yaml
compile() { # DIR ARGS...
	local d=$1
	shift
	"$OCTO" compile "$hybrid" --devices 1 "$@" -o "$OUT/runs/$d" > "$TMP/c.log" 2>&1 ||
		{ tail -20 "$TMP/c.log"; die "compile $d"; }
	rm -f "$OUT/runs/$d/timeline.svg"
}
compile hybrid-f32 --target cuda --gpu-arch $ARCH --emit=cuda,ptx
compile hybrid-bf16 --target cuda --gpu-arch $ARCH --emit=cuda,ptx --dtype bf16
compile emu-hybrid-f32 --target cuda-emu
compile emu-hybrid-bf16 --target cuda-emu --dtype bf16

echo "kit: tiny-hybrid's CPU losses ($STEPS steps)"
"$OCTO" compile "$hybrid" --devices 1 -o "$TMP/cpu" > "$TMP/c.log" 2>&1 || { tail -20 "$TMP/c.log"; die "compile cpu"; }
timeout 600 "$TMP/cpu/launch" --steps $STEPS > "$TMP/cpu.log" 2>&1 || { tail -20 "$TMP/cpu.log"; die "the CPU run"; }
sed -n 's/^step \([0-9]*\) loss [^ ]* (\([^)]*\)).*/\1 \2/p' "$TMP/cpu.log" > "$OUT/ref/tiny-hybrid.losses"
[ "$(wc -l < "$OUT/ref/tiny-hybrid.losses")" = $STEPS ] || { cat "$TMP/cpu.log"; die "no $STEPS losses in the CPU run"; }

if [ $QUICK = 0 ]; then
	echo "kit: the kernel modules of Llama-3-8B and Nemotron-H-8B (bf16, $ARCH)"
	for m in llama-3-8b nemotron-h-8b; do
		"$OCTO" compile "$SRC/models/$m.yaml" --target cuda --gpu-arch $ARCH --dtype bf16 \
			--emit=ptx -o "$TMP/$m" > "$TMP/c.log" 2>&1 || { tail -20 "$TMP/c.log"; die "compile $m"; }
		mkdir -p "$OUT/kernels/$m"
		cp "$TMP/$m"/*.ptx "$OUT/kernels/$m/"
	done
fi

echo "kit: the emulator's modules of dev_check (first_run.sh --emulate: mlp, --time --small)"
for args in mlp "--bf16 mlp" "--bf16 --time --small"; do
	"$BUILD/tests/dev/dev_check" --modules "$OUT/emu-modules" $args > "$TMP/dc.log" 2>&1 ||
		{ tail -20 "$TMP/dc.log"; die "dev_check $args"; }
done
rm -f "$OUT/emu-modules"/*.cpp "$OUT/emu-modules"/*.log

cp "$BUILD/tests/dev/dev_check" "$BUILD/tests/gpu/gemm_peak" "$BUILD/tests/gpu/kernel_info" "$OUT/bin/"
cp "$SRC/tests/gpu/first_run.sh" "$OUT/"

echo "kit: libraries"
# Left to the machine: glibc's own libraries and the dynamic loader, GCC's
# run-time libraries (every distribution has them, and cuBLAS needs the
# machine's own), and the CUDA libraries (the toolkit's, the driver's,
# PyTorch's wheels).
SYSTEM='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libutil|libresolv|libstdc\+\+|libgcc_s)\.'
CUDA='^lib(cuda|cudart|cublas|cublasLt|nccl|nvrtc|nvrtc-builtins|nvJitLink|cudnn[a-z_]*)\.so'
# Open MPI's plugins that load a network stack the kit's one-rank runs
# do not use (and whose libraries would be most of the kit's size).
NETWORK='^lib(ucp|ucs|uct|ucm|fabric|ibverbs|rdmacm|psm|psm2|psm_infinipath|infinipath|efa|pmix|munge|nl-3|nl-route-3)\.'
# deps FILE...: "NAME PATH" of every library they load, as ldd resolves it.
deps() { for f in "$@"; do ldd "$f"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u; }
elves() { find "$OUT/bin" "$OUT/runs" "$OUT/lib" "$OUT/mpi" -type f 2>/dev/null |
	while read -r f; do head -c 4 "$f" | grep -q ELF && echo "$f"; done; }

prefix=$(ompi_info --path prefix --parsable | sed -n 's/^path:prefix://p')
pkglib=$(ompi_info --path pkglibdir --parsable | sed -n 's/^path:pkglibdir://p')
pkgdata=$(ompi_info --path pkgdatadir --parsable | sed -n 's/^path:pkgdatadir://p')
[ -d "$pkglib" ] && [ -n "$prefix" ] || die "Open MPI's plugin directory not found (ompi_info --path pkglibdir)"
rel=${pkglib#"$prefix"/}
mkdir -p "$OUT/mpi/$rel"
for p in "$pkglib"/mca_*.so; do
	deps "$p" | awk '{print $1}' | grep -Eq "$NETWORK" && continue
	cp -L "$p" "$OUT/mpi/$rel/"
done
if [ -d "$pkgdata" ]; then
	mkdir -p "$OUT/mpi/${pkgdata#"$prefix"/}"
	cp -rL "$pkgdata"/. "$OUT/mpi/${pkgdata#"$prefix"/}/"
fi
echo "$rel" > "$OUT/mpi/component-path"

# The closure: copy what the kit's files load, then what those load.
while :; do
	more=0
	while read -r name path; do
		echo "$name" | grep -Eq "$SYSTEM|$CUDA" && continue
		[ -e "$OUT/lib/$name" ] && continue
		cp -L "$path" "$OUT/lib/$name"
		more=1
	done < <(deps $(elves))
	[ $more = 0 ] && break
done

# glibc 2.36's arc4random (libevent's, under Open MPI) for a machine with
# an older glibc (Ubuntu 22.04 has 2.35): the references lose their
# version, and libkitcompat (getrandom) defines them; where glibc has them,
# glibc, loaded first, gives them.
for l in "$OUT"/lib/libevent_core*.so*; do
	objdump -T "$l" | grep -q 'GLIBC_2.36.*arc4random' || continue
	cc -shared -fPIC -O2 -o "$OUT/lib/libkitcompat.so" -x c - << 'EOF' || die "libkitcompat"
#include <stddef.h>
#include <stdint.h>
#include <sys/random.h>
void arc4random_buf(void *p, size_t n)
{
	for (size_t got = 0; got < n;) {
		ssize_t r = getrandom((char *)p + got, n - got, 0);
		if (r > 0)
			got += (size_t)r;
	}
}
uint32_t arc4random(void)
{
	uint32_t v;
	arc4random_buf(&v, sizeof v);
	return v;
}
EOF
	patchelf --clear-symbol-version arc4random --clear-symbol-version arc4random_buf \
		--add-needed libkitcompat.so "$l" || die "patchelf $l"
done

# Debug information off the copies; run paths relative to each file.
mapfile -t ELVES < <(elves)
for f in "${ELVES[@]}"; do
	chmod u+w "$f"
	strip --strip-debug "$f" 2> /dev/null || true
	dir=$(dirname "$f")
	up=$(realpath --relative-to="$dir" "$OUT/lib")
	case $dir in
	"$OUT/lib") rp='$ORIGIN' ;;
	*) rp="\$ORIGIN/$up" ;;
	esac
	patchelf --set-rpath "$rp" "$f" || die "patchelf $f"
done

# What the machine must give: the highest glibc symbol version needed.
glibc=$(for f in "${ELVES[@]}"; do objdump -T "$f" 2> /dev/null; done |
	grep -o 'GLIBC_[0-9.]*' | sort -t. -k1,1 -k2,2n -k3,3n -u | tail -1)
{
	echo "octopipe first-run kit (tests/gpu/kit.sh)"
	echo "source: $(git -C "$SRC" describe --always --dirty 2> /dev/null || echo unknown)"
	echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), $(ldd --version | head -1)"
	echo "architecture: $ARCH"
	echo "needs: $glibc or later; the NVIDIA driver; libcudart, libcublas, libnccl, libnvrtc"
	echo "cuda sonames: $(deps "${ELVES[@]}" | awk '{print $1}' | grep -E "$CUDA" | sort -u | tr '\n' ' ')"
} > "$OUT/MANIFEST"

size=$(du -sm "$OUT" | cut -f1)
echo "kit: $OUT, $(du -sh "$OUT" | cut -f1) ($(find "$OUT" -type f | wc -l) files, $(ls "$OUT/lib" | wc -l) libraries); needs $glibc"
[ "$size" -le 60 ] || die "the kit is ${size} MiB, over 60"
echo "run there: $(basename "$OUT")/first_run.sh (--emulate without a GPU)"
