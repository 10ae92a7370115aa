#!/bin/bash
# tests/cuda/run.sh OCTOPIPE SRCDIR: the CUDA target without a GPU
# (docs/cuda.md).  Every kernel module of every model under models/ (the zoo
# and the tiny models) and of tests/e2e/tiny-falcon.yaml (parallel layers)
# compiles with NVRTC to PTX for sm_80 and sm_90; each PTX has the entry
# points of its kind's F, B and W; --emit=cuda writes the sources with the
# shapes baked in; an architecture NVRTC refuses fails with NVRTC's log as
# the error.  Prints "N passed, M failed"; the failure
# count is the exit code.
set -u
OCTO=$1
SRC=$2
# ptxas (the toolkit's, third argument) assembles the sm_90 PTX: each entry
# point declares its block size (__launch_bounds__, .maxntid) and its
# registers for a block that size fit an SM's register file; the entries
# with local memory (stack frame, spills) are listed at the end.
PTXAS=${3:-}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# The entry points each kind's PTX must hold (F, B and W of every part).
declare -A ENTRIES=(
	[embedding]="embedding_F embedding_W"
	[head]="head_F_norm head_F_lse head_F_loss head_B_dz head_B_norm head_W_scale head_W_norm"
	[attention]="attention_F_norm attention_F_ropetab attention_F_rope attention_F_core attention_B_core_q attention_B_core_kv attention_B_rope attention_B_norm attention_W_norm"
	[mlp]="mlp_F_norm mlp_F_act mlp_B_act mlp_B_norm mlp_W_scale mlp_W_norm"
	[moe]="moe_F_route moe_F_layout moe_F_gather moe_F_up moe_F_down moe_F_combine moe_F_act moe_B_route moe_B_dh moe_B_act moe_B_dx moe_B_scatter moe_W_gather moe_W_dw moe_W_dwd moe_W_norm"
	[mamba]="mamba_F_conv mamba_F_dt mamba_B_dt mamba_B_dcv mamba_B_xpre mamba_B_conv mamba_W_conv mamba_W_alog mamba_W_dtbias"
)
# Each version's scan: Mamba-2's chunked SSD (with the gated norm), Mamba-1's
# step-by-step scan (with the gate); a mamba module has one of the two sets.
MAMBA2="mamba_F_ssd_pack mamba_F_ssd_cum mamba_F_ssd_mask mamba_F_ssd_xw mamba_F_ssd_chunks mamba_F_ssd_out mamba_B_ssd_dy mamba_B_ssd_dyw mamba_B_ssd_chunks mamba_B_ssd_mask mamba_B_ssd_dt mamba_B_ssd_dx mamba_B_ssd_ad mamba_F_gnorm mamba_B_gnorm mamba_W_gnorm mamba_W_gscale"
MAMBA1="mamba_F_scan mamba_B_scan mamba_B_reduce mamba_F_gate mamba_B_gate"
# A parallel layer's module: its norm, and the attention's and the Mamba-2
# mixer's entry points under their own names.
ENTRIES[parallel]="parallel_F_norm parallel_B_norm parallel_W_scale parallel_W_norm attention_F_ropetab attention_F_rope attention_F_core attention_B_core_q attention_B_core_kv attention_B_rope ${ENTRIES[mamba]} $MAMBA2"

# registers MODEL PTX: ptxas -v's registers and local memory per entry,
# against the entry's .maxntid.  An SM holds 65536 registers, given out per
# warp in steps of 256; a block of n threads takes ceil(n / 32) warps.
registers() {
	if ! "$PTXAS" -arch=sm_90 -v "$2" -o "$TMP/k.cubin" > "$TMP/ptxas" 2>&1; then
		bad "$1 $(basename "$2"): ptxas failed"; tail -5 "$TMP/ptxas"; return
	fi
	awk -v model="$1" -v mod="$(basename "$2" .ptx)" '
		FNR == NR && /^\.visible \.entry / { e = $3; sub(/\(.*/, "", e); next }
		FNR == NR && /^\.maxntid / { n[e] = $2 + 0; next }
		FNR == NR { next }
		/Compiling entry function/ { e = $0; sub(/.*function \047/, "", e); sub(/\047 for .*/, "", e) }
		/bytes stack frame/ { stack[e] = $1; spill[e] = $5 }
		/Used [0-9]+ registers/ { match($0, /Used [0-9]+/); regs[e] = substr($0, RSTART + 5, RLENGTH - 5) }
		END {
			for (e in regs) {
				t = n[e]
				per_warp = int((regs[e] * 32 + 255) / 256) * 256
				need = int((t + 31) / 32) * per_warp
				printf "%s %s %s %d %d %d %d %d\n", (t < 1 ? "NOBOUND" : need > 65536 ? "OVER" : "ok"),
				       model, e, regs[e], t, need, stack[e], spill[e]
			}
		}' "$2" "$TMP/ptxas" > "$TMP/regs"
	if [ ! -s "$TMP/regs" ]; then bad "$1 $(basename "$2"): no entries in ptxas -v's output"; return; fi
	cat "$TMP/regs" >> "$TMP/allregs"
	while read -r verdict model e r t need stack spill; do
		case $verdict in
		ok) ok ;;
		NOBOUND) bad "$model $e: no __launch_bounds__ (.maxntid) in its PTX" ;;
		*) bad "$model $e: $r registers x $t threads need $need of an SM's 65536" ;;
		esac
	done < "$TMP/regs"
}

# tiny-falcon (tests/e2e): the parallel layers, which no model under models/ has.
for y in "$SRC"/models/*.yaml "$SRC"/tests/e2e/tiny-falcon.yaml; do
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
			ver=""
			if [ "$kind" = mamba ]; then
				grep -q "^.visible .entry mamba_F_gnorm(" "$p" && ver=$MAMBA2 || ver=$MAMBA1
			fi
			for e in ${ENTRIES[$kind]} $ver optim_adamw optim_store optim_scale acc_store col_sum; do
				grep -q "^.visible .entry $e(" "$p" || miss="$miss $e"
			done
			[ -z "$miss" ] && ok || bad "$m $arch $(basename "$p"): missing entries:$miss"
			[ "$arch" = sm_90 ] && [ -n "$PTXAS" ] && registers "$m" "$p"
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

# RoPE scaling (tests/e2e/tiny-rope.yaml): the modules compile with their
# tables of inverse frequencies, and carry the factors of cos and sin and of
# the scores (DeepSeek's mscale_all_dim 0.707 at factor 40: 1.5896...).
if "$OCTO" compile "$SRC/tests/e2e/tiny-rope.yaml" --target cuda --emit=ptx --gpu-arch sm_90 \
	--schedule 1f1b -o "$TMP/rope" > "$TMP/log" 2>&1 &&
	"$OCTO" compile "$SRC/tests/e2e/tiny-rope.yaml" --target cuda --emit=cuda -o "$TMP/rsrc" \
	> "$TMP/log" 2>&1 && grep -q "QK_SCALE = (float)1.5896" "$TMP"/rsrc/attention_*.cu &&
	grep -q "__device__ const double ROPE_INV_FREQ\[4\] = {1, " "$TMP"/rsrc/attention_*.cu; then ok; else
	bad "tiny-rope: the modules of RoPE scaling do not compile or lack its constants"; tail -20 "$TMP/log"; fi

# The shared experts' gate (tests/e2e/tiny-qwen-moe.yaml): the moe modules
# compile with its entries.
out=$TMP/qmoe
if "$OCTO" compile "$SRC/tests/e2e/tiny-qwen-moe.yaml" --target cuda --emit=ptx --gpu-arch sm_90 \
	--schedule 1f1b -o "$out" > "$TMP/log" 2>&1; then
	miss=""
	for e in moe_F_sgate moe_B_sgate; do
		cat "$out"/moe_*.ptx | grep -q "^.visible .entry $e(" || miss="$miss $e"
	done
	[ -z "$miss" ] && ok || bad "tiny-qwen-moe: no PTX module has:$miss"
else
	bad "tiny-qwen-moe: compile failed"; tail -20 "$TMP/log"
fi

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
# OCTO_ATTN: a value other than own or cudnn is refused before the device
# is looked for (cudnn itself is checked in the first-run kit, step 7).
OCTO_ATTN=flash timeout 600 "$TMP/one/rank0" --steps 2 > "$TMP/run" 2>&1
rc=$?
[ $rc != 0 ] && [ $rc != 124 ] &&
	grep -q "octopipe rank 0: error: OCTO_ATTN=flash: the attention core runs OctoPipe's kernels (own, the default) or cuDNN's fused attention (cudnn)" "$TMP/run" &&
	ok || bad "OCTO_ATTN=flash: rc $rc: $(head -2 "$TMP/run")"
# A CPU-ranks plan file (lowered for mpi) is refused by the CUDA target.
"$OCTO" plan "$SRC/models/tiny-dense.yaml" --dp 1 --backend mpi -o "$TMP/mpi.opir" > /dev/null 2>&1
"$OCTO" compile "$TMP/mpi.opir" --target cuda -o "$TMP/r" > "$TMP/log" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "lowered for mpi, but CUDA ranks talk through NCCL" "$TMP/log" && ok ||
	bad ".opir lowered for mpi: rc $rc: $(tail -2 "$TMP/log")"

if [ -s "$TMP/allregs" ]; then
	echo "sm_90 entries with local memory (model entry: registers, threads, stack bytes, spill bytes):"
	sort -k7,7nr "$TMP/allregs" | awk '$7 > 0 { printf "  %s %s: %d, %d, %d, %d\n", $2, $3, $4, $5, $7, $8 }' | head -20
fi
echo "$pass passed, $fail failed"
exit $fail
