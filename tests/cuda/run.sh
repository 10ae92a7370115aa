#!/bin/bash
# tests/cuda/run.sh OCTOPIPE SRCDIR: the CUDA target without a GPU
# (docs/cuda.md).  Every kernel module of every model under models/ (the zoo
# and the tiny models) compiles with NVRTC to PTX for sm_80 and sm_90; each
# PTX has the entry points of its kind's F, B and W; --emit=cuda writes the
# sources with the shapes baked in; an architecture NVRTC refuses fails
# with NVRTC's log as the error.  Prints "N passed, M failed"; the failure
# count is the exit code.
set -u
OCTO=$1
SRC=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# The entry points each kind's PTX must hold (F, B and W of every part).
declare -A ENTRIES=(
	[embedding]="embedding_F embedding_W"
	[head]="head_F_norm head_F_lse head_F_loss head_B_dz head_B_norm head_W_scale head_W_norm"
	[attention]="attention_F_norm attention_F_rope attention_F_core attention_B_core_q attention_B_core_kv attention_B_rope attention_B_norm attention_W_norm"
	[mlp]="mlp_F_norm mlp_F_act mlp_B_act mlp_B_norm mlp_W_scale mlp_W_norm"
	[moe]="moe_F_route moe_F_layout moe_F_gather moe_F_combine moe_F_act moe_B_route moe_B_act moe_B_scatter moe_W_gather moe_W_norm"
	[mamba]="mamba_F_conv mamba_F_dt mamba_F_scan mamba_B_scan mamba_B_reduce mamba_B_dt mamba_B_dcv mamba_B_xpre mamba_B_conv mamba_W_conv mamba_W_alog mamba_W_dtbias"
)

for y in "$SRC"/models/*.yaml; do
	m=$(basename "$y" .yaml)
	for arch in sm_80 sm_90; do
		out=$TMP/$m-$arch
		if ! "$OCTO" compile "$y" --target cuda --emit=ptx --gpu-arch $arch --schedule 1f1b \
			-o "$out" > "$TMP/log" 2>&1; then
			bad "$m $arch: compile failed"; tail -20 "$TMP/log"; continue
		fi
		n=$(ls "$out"/*.ptx 2>/dev/null | wc -l)
		[ "$n" -ge 2 ] || { bad "$m $arch: $n PTX modules"; continue; }
		for p in "$out"/*.ptx; do
			kind=$(basename "$p" .ptx); kind=${kind%_*}
			grep -q "^.target sm_${arch#sm_}" "$p" || { bad "$m $arch $(basename "$p"): wrong .target"; continue; }
			miss=""
			for e in ${ENTRIES[$kind]} optim_adamw optim_store; do
				grep -q "^.visible .entry $e(" "$p" || miss="$miss $e"
			done
			[ -z "$miss" ] && ok || bad "$m $arch $(basename "$p"): missing entries:$miss"
		done
	done
done

# The attention options (tests/e2e/tiny-qwen.yaml): modules of layers with
# qkv_bias or qk_norm carry their entries, and each module its base.
out=$TMP/qwen
if "$OCTO" compile "$SRC/tests/e2e/tiny-qwen.yaml" --target cuda --emit=ptx --gpu-arch sm_90 \
	--schedule 1f1b -o "$out" > "$TMP/log" 2>&1; then
	miss=""
	for e in attention_F_bias attention_W_bias attention_F_qhnorm attention_F_khnorm \
		attention_B_hnorm attention_W_hnorm; do
		cat "$out"/attention_*.ptx | grep -q "^.visible .entry $e(" || miss="$miss $e"
	done
	[ -z "$miss" ] && ok || bad "tiny-qwen: no PTX module has:$miss"
else
	bad "tiny-qwen: compile failed"; tail -20 "$TMP/log"
fi
if "$OCTO" compile "$SRC/tests/e2e/tiny-qwen.yaml" --target cuda --emit=cuda -o "$TMP/qsrc" \
	> "$TMP/log" 2>&1 && grep -q "ROPE_THETA = 1000000;" "$TMP"/qsrc/attention_*.cu &&
	grep -q "ROPE_THETA = 50000;" "$TMP"/qsrc/attention_*.cu; then ok; else
	bad "tiny-qwen --emit=cuda: the modules' rope bases are not the layers'"; fi

# --emit=cuda: the sources, shapes baked in as constants.
out=$TMP/src
if "$OCTO" compile "$SRC/models/tiny-hybrid.yaml" --target cuda --emit=cuda -o "$out" > "$TMP/log" 2>&1 &&
	grep -q "static constexpr int H = 64;" "$out"/attention_*.cu && ! ls "$out"/*.ptx > /dev/null 2>&1; then
	ok
else
	bad "--emit=cuda: no sources with baked-in shapes"; tail -5 "$TMP/log"
fi

# An architecture NVRTC does not know: its log, as an error, exit 1.
"$OCTO" compile "$SRC/models/tiny-dense.yaml" --target cuda --emit=ptx --gpu-arch sm_12 \
	-o "$TMP/bad" > "$TMP/log" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q "error: cuda: NVRTC failed to compile .* for sm_12" "$TMP/log"; then ok; else
	bad "bad --gpu-arch: rc $rc"; tail -5 "$TMP/log"; fi

# A malformed --gpu-arch is a usage error.
"$OCTO" compile "$SRC/models/tiny-dense.yaml" --target cuda --gpu-arch volta -o "$TMP/bad2" > "$TMP/log" 2>&1
rc=$?
if [ $rc != 0 ] && grep -q "gpu-arch takes sm_XX" "$TMP/log"; then ok; else bad "--gpu-arch volta: rc $rc"; fi

# Rank executables: the PTX of each rank's layers embedded, the CUDA
# libraries linked (run path to the toolkit), --help without MPI or GPU;
# run without a device: "no CUDA device: ...", a non-zero exit.  (With a
# device: two steps train.)
out=$TMP/exe
if "$OCTO" compile "$SRC/models/tiny-hybrid.yaml" --target cuda -o "$out" > "$TMP/log" 2>&1 &&
	[ -x "$out/rank0" ] && [ -x "$out/rank3" ] && [ -x "$out/launch" ]; then ok; else
	bad "compile tiny-hybrid --target cuda: no rank executables"; tail -5 "$TMP/log"; fi
for r in 0 1 2 3; do
	n=$(strings "$out/rank$r" 2>/dev/null | grep -c '^.visible .entry')
	"$out/rank$r" --help > "$TMP/help" 2>&1
	if [ "$n" -gt 0 ] && grep -q "rank $r of 4 .*compiled by octopipe for CUDA ranks" "$TMP/help" &&
		grep -q "deadlock-free under nccl" "$TMP/help" &&
		grep -q "its layers run on a GPU (sm_90); kernel modules: [1-9]" "$TMP/help"; then ok; else bad "rank$r: $n PTX entries embedded, --help: $(head -2 "$TMP/help")"; fi
done
ldd "$out/rank0" | grep -q "libnccl.so" && ldd "$out/rank0" | grep -q "libcublas.so" &&
	! ldd "$out/rank0" | grep -q "not found" && ok || bad "rank0: CUDA libraries not linked: $(ldd "$out/rank0" | grep -E 'not found|cuda')"
"$OCTO" compile "$SRC/models/tiny-dense.yaml" --devices 1 --target cuda -o "$TMP/one" > "$TMP/log" 2>&1 ||
	bad "compile tiny-dense on 1 device"
gpu=0
command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q "^GPU" && gpu=1
for comm in nccl mpi; do
	OCTO_COMM=$comm timeout 600 "$TMP/one/rank0" --steps 2 > "$TMP/run" 2>&1
	rc=$?
	if [ $gpu = 0 ]; then
		[ $rc != 0 ] && [ $rc != 124 ] && grep -q "octopipe rank 0: error: no CUDA device: " "$TMP/run" && ok ||
			bad "OCTO_COMM=$comm rank0 without a GPU: rc $rc: $(head -3 "$TMP/run")"
	else
		[ $rc = 0 ] && grep -q "^step 2 loss" "$TMP/run" && ok ||
			bad "OCTO_COMM=$comm rank0 with a GPU: rc $rc: $(tail -3 "$TMP/run")"
	fi
done
# A CPU-ranks plan file (lowered for mpi) is refused by the CUDA target.
"$OCTO" plan "$SRC/models/tiny-dense.yaml" --dp 1 --backend mpi -o "$TMP/mpi.opir" > /dev/null 2>&1
"$OCTO" compile "$TMP/mpi.opir" --target cuda -o "$TMP/r" > "$TMP/log" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "lowered for mpi, but CUDA ranks talk through NCCL" "$TMP/log" && ok ||
	bad ".opir lowered for mpi: rc $rc: $(tail -2 "$TMP/log")"

echo "$pass passed, $fail failed"
exit $fail
