#!/bin/bash
# tests/gpu/run.sh [--emulate] [BUILD_DIR]: the GPU check of issue 8
# section 4 (docs/cuda.md), for a machine with an NVIDIA GPU.
#
# --emulate rehearses it without a GPU (ctest gpu_check_rehearsal): the
# built BUILD_DIR as it is, the emulator in the GPU's place (--target
# cuda-emu, dev_check --device emu), small shapes instead of seq 4096, no
# NVRTC or cuBLAS steps, one kind in step 3 and 3 steps in step 4 (what the
# emulator checks beyond that is other tests' part); so the script's own
# logic is tested where no GPU is.
#
# Without a GPU (no nvidia-smi, or no device listed) it says so and exits 0.
# With one, in order, each step printing PASS or FAIL:
#   1. build (cmake, -DOCTO_WERROR=ON) into BUILD_DIR (default build-gpu)
#   2. kernels: every module of the tiny models and of the zoo compiles with
#      NVRTC for this card's architecture
#   3. every kind's F/B/W on the GPU against the CPU kernels on random inputs
#      (tests/dev/dev_check --device cuda): relative error (max |gpu - cpu| /
#      max |cpu| per output) at most 1e-5 in f32 and 2e-2 in bf16
#   4. tiny-hybrid trained 5 steps on the GPU: 1 rank (a 1-rank NCCL
#      communicator) and 4 ranks sharing the GPU (OCTO_COMM=mpi), f32, each
#      step's loss within 1e-5 (relative) of the CPU run's; and in bf16
#      within 2e-2; with 2 GPUs or more (NCCL takes one rank per device),
#      tiny-dense deterministic at --dp 2 on 2 ranks (an NCCL communicator
#      per DP group) against 1 rank: the same losses, bit for bit; and in
#      bf16 with the attention cores through cuDNN (OCTO_ATTN=cudnn), 1 and 4
#      ranks: within 2e-2 of the CPU's, the same losses bit for bit
#   5. profile (octopipe profile --target cuda) of a Llama-3-8B-shaped layer
#      pair (attention + mlp, GQA 32/8, ffn 14336) and a Nemotron-H-8B Mamba-2
#      layer (+ its relu2 mlp) at seq 4096, bf16 -> BUILD_DIR/gpu-profile-*.yaml
#   6. the card's cuBLAS peak (tests/gpu/gemm_peak.c, GEMM 8192^3, median of
#      10) and the achieved TFLOP/s of the profiled layers against it
# Exit 0 when every step passes, 1 otherwise.  Budget: under 8 minutes on an
# H100/H200 (the build is most of it).
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
EMU=0
if [ "${1:-}" = --emulate ]; then
	EMU=1
	shift
fi
BUILD=${1:-$SRC/build-gpu}
if [ $EMU = 1 ]; then
	command -v mpirun > /dev/null 2>&1 || { echo "SKIP: mpirun not found"; exit 77; }
elif ! command -v nvidia-smi > /dev/null 2>&1; then
	echo "tests/gpu/run.sh: SKIP: no GPU on this machine (nvidia-smi not found)"
	exit 0
elif ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
	echo "tests/gpu/run.sh: SKIP: no GPU on this machine (nvidia-smi lists no device)"
	exit 0
fi
if [ $EMU = 1 ]; then
	echo "rehearsal: the emulator in the GPU's place, small shapes"
	ARCH=emu
	TARGET=(--target cuda-emu)
	DEVICE=(--device emu)
	SEQ=64 HID=128 VOCAB=512 VOCAB2=512 FFN=256 FFN2=256
	# Every kind on the emulator is ctest dev_check's and dev_check_bf16's
	# part, and tiny-hybrid's emulated losses against the CPU's are
	# e2e_device_emu's: here one kind and 3 steps run the script's logic.
	KINDS=(mlp) STEPS=3
	HEADS="heads: 4, kv_heads: 2, head_dim: 32"
	MAMBA="state: 16, expand: 2, conv: 4, heads: 4, head_dim: 64, groups: 2"
else
	nvidia-smi -L
	cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
	ARCH=sm_${cc:-90}
	TARGET=(--target cuda --gpu-arch "$ARCH")
	DEVICE=(--device cuda --gpu-arch "$ARCH")
	SEQ=4096 HID=4096 VOCAB=128256 VOCAB2=131072 FFN=14336 FFN2=21504
	KINDS=() STEPS=5
	HEADS="heads: 32, kv_heads: 8, head_dim: 128"
	MAMBA="state: 128, expand: 2, conv: 4, heads: 128, head_dim: 64, groups: 8"
fi
echo "architecture: $ARCH"
T0=$(date +%s)
failed=0
step() { echo; echo "== $* ($(($(date +%s) - T0)) s)"; }
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export MPIRUN_EXTRA="-x OCTO_COMM -x OPENBLAS_NUM_THREADS"

step "1. build"
if [ $EMU = 1 ]; then
	[ -x "$BUILD/octopipe" ] && [ -x "$BUILD/tests/dev/dev_check" ] && pass "the build in $BUILD" ||
		{ fail "no build in $BUILD"; exit 1; }
elif cmake -S "$SRC" -B "$BUILD" -DOCTO_WERROR=ON > "$TMP/cmake.log" 2>&1 &&
	cmake --build "$BUILD" -j"$(nproc)" > "$TMP/build.log" 2>&1; then
	pass "build"
	grep -q "CUDA toolkit: " "$TMP/cmake.log" || { fail "the CUDA toolkit was not found (OCTO_CUDA_ROOT)"; exit 1; }
else
	tail -30 "$TMP/cmake.log" "$TMP/build.log"
	fail "build"
	exit 1
fi
OCTO=$BUILD/octopipe

step "2. kernels: NVRTC for $ARCH"
ok=1
[ $EMU = 1 ] && echo "(rehearsal: NVRTC is ctest cuda_kernels' part)"
for y in "$SRC"/models/*.yaml; do
	[ $EMU = 1 ] && break
	"$OCTO" compile "$y" --target cuda --emit=ptx --gpu-arch "$ARCH" --schedule 1f1b \
		-o "$TMP/k-$(basename "$y" .yaml)" > "$TMP/k.log" 2>&1 || { ok=0; tail -20 "$TMP/k.log"; }
	rm -rf "$TMP/k-$(basename "$y" .yaml)"
done
[ $EMU = 1 ] || { [ $ok = 1 ] && pass "every kernel module of every model compiles for $ARCH" || fail "NVRTC"; }

step "3. every kind's F/B/W on the GPU against the CPU kernels (f32 1e-5, bf16 2e-2)"
for mode in "" --bf16; do
	if timeout 300 "$BUILD/tests/dev/dev_check" "${DEVICE[@]}" $mode "${KINDS[@]}" > "$TMP/dc.log" 2>&1; then
		pass "dev_check ${mode:---f32}: $(grep -c ' ok$' "$TMP/dc.log") outputs within the threshold"
	else
		grep -v ' ok$' "$TMP/dc.log" | tail -30
		fail "dev_check ${mode:---f32}"
	fi
	awk '/max rel err/ {print $(NF-1), $0}' "$TMP/dc.log" | sort -g | tail -3 | cut -d' ' -f2- | sed 's/^/  worst: /'
done

step "4. tiny-hybrid on the GPU: losses against the CPU run"
# train DIR LOG COMM NRANKS: STEPS steps; "STEP HEXLOSS" lines in LOG.losses.
train() {
	OCTO_COMM=$3 timeout 300 "$1/launch" --steps $STEPS > "$2" 2>&1 || { tail -15 "$2"; return 1; }
	sed -n 's/^step \([0-9]*\) loss [^ ]* (\([^)]*\)).*/\1 \2/p' "$2" > "$2.losses"
	[ "$(wc -l < "$2.losses")" = $STEPS ] || { tail -15 "$2"; return 1; }
}
# close A B TOL: every step's loss of A within TOL (relative) of B's.
close() {
	join "$1.losses" "$2.losses" | while read -r s a b; do printf '%.17g %.17g\n' "$a" "$b"; done |
		awk -v tol="$3" -v steps=$STEPS '{e = ($1 - $2) / $2; if (e < 0) e = -e; if (e > w) w = e; n++}
			END {printf "largest relative difference %.2e over %d steps\n", w, n; exit !(n == steps && w <= tol)}'
}
"$OCTO" compile "$SRC/models/tiny-hybrid.yaml" --devices 1 -o "$TMP/cpu1" > "$TMP/c.log" 2>&1 &&
	train "$TMP/cpu1" "$TMP/cpu.log" mpi 1 || fail "the CPU reference run"
for run in "1 nccl" "4 mpi"; do
	set -- $run
	if "$OCTO" compile "$SRC/models/tiny-hybrid.yaml" --devices "$1" "${TARGET[@]}" \
		-o "$TMP/g$1" > "$TMP/c.log" 2>&1 && train "$TMP/g$1" "$TMP/g$1.log" "$2" "$1"; then
		if r=$(close "$TMP/g$1.log" "$TMP/cpu.log" 1e-5); then
			pass "$1 rank(s), OCTO_COMM=$2, f32: $r"
		else
			fail "$1 rank(s), OCTO_COMM=$2, f32: $r"
			paste "$TMP/g$1.log.losses" "$TMP/cpu.log.losses"
		fi
	else
		tail -5 "$TMP/c.log"
		fail "$1 rank(s), OCTO_COMM=$2: compile or training"
	fi
done
cmp -s "$TMP/g1.log.losses" "$TMP/g4.log.losses" && echo "  (1 and 4 ranks: identical losses, bit for bit)"
if "$OCTO" compile "$SRC/models/tiny-hybrid.yaml" --dtype bf16 --devices 1 "${TARGET[@]}" \
	-o "$TMP/gb" > "$TMP/c.log" 2>&1 && train "$TMP/gb" "$TMP/gb.log" nccl 1 &&
	r=$(close "$TMP/gb.log" "$TMP/cpu.log" 2e-2); then
	pass "1 rank, bf16 against the f32 CPU run: $r"
else
	fail "1 rank, bf16: ${r:-compile or training failed}"
fi
# The attention cores through cuDNN's fused attention (OCTO_ATTN=cudnn,
# bf16; docs/cuda.md): taken by cuDNN (each core says so), within 2e-2 of
# the f32 CPU run, and 1 rank and 4 ranks the same losses bit for bit (its
# B is deterministic).  The emulator has no cuDNN: not rehearsed.
if [ $EMU = 0 ]; then
	if "$OCTO" compile "$SRC/models/tiny-hybrid.yaml" --dtype bf16 --devices 4 "${TARGET[@]}" \
		-o "$TMP/gb4" > "$TMP/c.log" 2>&1 && OCTO_ATTN=cudnn train "$TMP/gb" "$TMP/gc1.log" nccl 1 &&
		OCTO_ATTN=cudnn train "$TMP/gb4" "$TMP/gc4.log" mpi 4; then
		grep -h "attention core" "$TMP/gc1.log" "$TMP/gc4.log" | sort | uniq -c | sed 's/^/  /'
		if grep -q "cuDNN declines" "$TMP/gc1.log" "$TMP/gc4.log"; then
			fail "OCTO_ATTN=cudnn: cuDNN declined a core (above)"
		elif ! r=$(close "$TMP/gc1.log" "$TMP/cpu.log" 2e-2); then
			fail "OCTO_ATTN=cudnn, 1 rank, bf16 against the f32 CPU run: $r"
		elif ! cmp -s "$TMP/gc1.log.losses" "$TMP/gc4.log.losses"; then
			fail "OCTO_ATTN=cudnn: 1 and 4 ranks' losses differ"
			paste "$TMP/gc1.log.losses" "$TMP/gc4.log.losses"
		else
			pass "OCTO_ATTN=cudnn, bf16: $r; 1 and 4 ranks the same losses, bit for bit"
		fi
	else
		tail -5 "$TMP/c.log"
		fail "OCTO_ATTN=cudnn: compile or training"
	fi
fi
# Data parallelism: NCCL's all-reduce of exact digits (docs/cuda.md); the
# rehearsal runs it on the emulator's NCCL stand-in.
ngpu=2
[ $EMU = 1 ] || ngpu=$(nvidia-smi -L | grep -c "^GPU")
if [ "$ngpu" -lt 2 ]; then
	echo "  (data parallelism not run: $ngpu GPU, and NCCL takes one rank per device)"
elif "$OCTO" compile "$SRC/models/tiny-dense.yaml" --devices 1 --deterministic "${TARGET[@]}" 	-o "$TMP/dp1" > "$TMP/c.log" 2>&1 && train "$TMP/dp1" "$TMP/dp1.log" nccl 1 &&
	"$OCTO" compile "$SRC/models/tiny-dense.yaml" --devices 2 --dp 2 --deterministic "${TARGET[@]}" 	-o "$TMP/dp2" > "$TMP/c.log" 2>&1 && train "$TMP/dp2" "$TMP/dp2.log" nccl 2; then
	if cmp -s "$TMP/dp1.log.losses" "$TMP/dp2.log.losses"; then
		pass "tiny-dense --dp 2 --deterministic on 2 ranks (NCCL): 1 rank's losses, bit for bit"
	else
		fail "tiny-dense --dp 2 --deterministic: losses differ from 1 rank's"
		paste "$TMP/dp1.log.losses" "$TMP/dp2.log.losses"
	fi
else
	tail -5 "$TMP/c.log"
	fail "tiny-dense --dp 2 --deterministic: compile or training"
fi

step "5. profile at seq $SEQ (bf16): Llama-3-8B layers, Nemotron-H-8B Mamba layer"
cat > "$TMP/llama-layer.yaml" << EOF
model: {name: llama-3-8b-layer, hidden: $HID, vocab: $VOCAB, seq: $SEQ, dtype: bf16}
layers:
  - kind: embedding
  - {kind: attention, $HEADS}
  - {kind: mlp, ffn: $FFN, activation: swiglu}
  - kind: head
training: {microbatch_size: 1, microbatches: 2, steps: 1}
cluster: h100-sxm
EOF
cat > "$TMP/nemotron-layer.yaml" << EOF
model: {name: nemotron-h-8b-layer, hidden: $HID, vocab: $VOCAB2, seq: $SEQ, dtype: bf16}
layers:
  - kind: embedding
  - {kind: mamba, version: 2, $MAMBA}
  - {kind: mlp, ffn: $FFN2, activation: relu2}
  - kind: head
training: {microbatch_size: 1, microbatches: 2, steps: 1}
cluster: h100-sxm
EOF
for m in llama nemotron; do
	out=$BUILD/gpu-profile-$m.yaml
	if OCTO_COMM=mpi timeout 600 "$OCTO" profile "$TMP/$m-layer.yaml" "${TARGET[@]}" \
		-o "$out" > "$TMP/p.log" 2>&1 &&
		"$OCTO" plan "$TMP/$m-layer.yaml" --devices 2 --profile "$out" > "$TMP/p.log" 2>&1; then
		pass "$m: $out"
		grep -E '^  [0-9]+: \{f:' "$out" | sed 's/^/  /'
	else
		tail -15 "$TMP/p.log"
		fail "profile $m"
	fi
done

step "6. cuBLAS peak and achieved TFLOP/s"
if [ $EMU = 1 ]; then
	echo "(rehearsal: no cuBLAS)"
	for m in llama nemotron; do
		grep '^#   L[12]: ' "$BUILD/gpu-profile-$m.yaml" 2>/dev/null | sed 's/^#  /   /'
	done
elif cc -std=c11 -O2 -I/usr/local/cuda/include "$SRC/tests/gpu/gemm_peak.c" -o "$TMP/gemm_peak" \
	-L/usr/local/cuda/lib64 -lcublas -lcudart -Wl,-rpath,/usr/local/cuda/lib64 &&
	timeout 120 "$TMP/gemm_peak" 8192 > "$TMP/peak.log" 2>&1; then
	cat "$TMP/peak.log"
	pass "cuBLAS peak measured"
	peak=$(sed -n 's/^peak bf16 \([0-9.]*\) TFLOP.*/\1/p' "$TMP/peak.log")
	for m in llama nemotron; do
		out=$BUILD/gpu-profile-$m.yaml
		[ -s "$out" ] || continue
		echo "  $m (bf16 peak ${peak:-?} TFLOP/s): layer F, B, W achieved TFLOP/s"
		grep '^#   L[12]: ' "$out" | sed 's/^#  /   /'
	done
else
	cat "$TMP/peak.log" 2>/dev/null
	fail "cuBLAS peak"
fi

echo
echo "gpu check: $failed failed ($(($(date +%s) - T0)) s)"
[ $failed -gt 0 ] && exit 1
exit 0
