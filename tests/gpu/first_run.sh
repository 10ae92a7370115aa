#!/bin/bash
# first_run.sh [--emulate] [LOG_DIR]: the first run of a GPU kit (made by
# tests/gpu/kit.sh; docs/cuda.md, "The first-run kit"), on a machine with
# an NVIDIA GPU, its driver and the CUDA libraries, and nothing else of
# the build's.  Runs from the kit's folder, wherever it lies; writes
# LOG_DIR/first_run.log (everything) and LOG_DIR/first_run.json (per step:
# name, status, seconds, key numbers); LOG_DIR defaults to ./first-run.
#
# Without a GPU it prints a SKIP line and exits 0.  With one, in order,
# each step under its own timeout, 9 minutes in all:
#   1. environment (15 s): the card, the driver, glibc; the library path
#      (the kit's lib/, /usr/local/cuda*/lib64, PyTorch's nvidia/*/lib
#      wheels, the driver's directory); every kit file's libraries found
#   2. gemm_peak (20 s): the card's cuBLAS peak, GEMM 8192^3, bf16 and f32
#   3. kernel_info (90 s): every kernel module of the kit loaded by the
#      driver; each entry point's registers and local memory
#   4. dev_check f32, then bf16 (90 s each): every kind's F/B/W on the GPU
#      against the CPU kernels (1e-5, 2e-2); a failing kind again under
#      compute-sanitizer where there is one (120 s)
#   5. tiny-hybrid, 1 rank (an MPI singleton, a 1-rank NCCL communicator),
#      5 steps in f32 then bf16 (120 s each): each step's loss within 1e-5
#      (f32) and 2e-2 (bf16), relative, of the CPU's, recorded in the kit;
#      a run that fails, once more with OCTO_COMM=mpi (no NCCL)
#   6. dev_check --time (150 s): every launch and GEMM of F, B and W of a
#      Llama-3-8B attention + MLP pair and a Nemotron-H-8B Mamba-2 layer and
#      its relu2 MLP at seq 4096, micro-batch 1, bf16, timed with events;
#      per phase, per layer, the slowest calls, the GEMMs' TFLOP/s against
#      gemm_peak's
#   7. the same with OCTO_ATTN=cudnn (60 s each): dev_check's attention and
#      parallel cases in bf16 with the attention cores through cuDNN's
#      fused attention (each core says whether cuDNN took it), then the
#      Llama-3-8B attention layer timed
# --emulate rehearses it without a GPU (ctest gpu_kit; docs/cuda.md): the
# emulator in the GPU's place (dev_check --device emu on mlp with the kit's
# compiled modules, the runs/emu-* ranks, the timing at small shapes), no
# gemm_peak or kernel_info.
# Exit 0 when every step passes (or SKIP), 1 otherwise.
set -u
K=$(cd "$(dirname "$0")" && pwd)
EMU=0
if [ "${1:-}" = --emulate ]; then
	EMU=1
	shift
fi
LOGDIR=${1:-$PWD/first-run}
BUDGET=540 # seconds, all steps together

if [ $EMU = 0 ]; then
	why=""
	if ! command -v nvidia-smi > /dev/null 2>&1; then
		why="nvidia-smi not found"
	elif ! timeout 15 nvidia-smi -L 2> /dev/null | grep -q "^GPU"; then
		why="nvidia-smi lists no device"
	fi
	if [ -n "$why" ]; then
		echo "first_run.sh: SKIP: no GPU on this machine ($why)"
		exit 0
	fi
fi
mkdir -p "$LOGDIR" || { echo "first_run.sh: error: cannot create $LOGDIR"; exit 1; }
LOGDIR=$(cd "$LOGDIR" && pwd)
LOG=$LOGDIR/first_run.log JSON=$LOGDIR/first_run.json
exec > >(tee "$LOG") 2>&1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
T0=$(date +%s)
failed=0
RESULTS=()

# ---- the environment the kit's programs run in --------------------------------
# The CUDA libraries where a machine with PyTorch keeps them: the toolkit's
# lib64, the wheels' site-packages/nvidia/*/lib, the driver's directory.
search=("$K/lib")
for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
	[ -d "$d" ] && search+=("$d")
done
for py in python3 python; do
	command -v $py > /dev/null 2>&1 || continue
	sites=$(timeout 10 $py -c 'import site, sys
p = site.getsitepackages() + [site.getusersitepackages()] + sys.path
print("\n".join(x for x in p if x))' 2> /dev/null)
	for s in $sites; do
		for d in "$s"/nvidia/*/lib; do
			[ -d "$d" ] && search+=("$d")
		done
	done
	break
done
drv=$(ldconfig -p 2> /dev/null | awk '/libcuda\.so\.1 / {print $NF; exit}')
[ -n "$drv" ] && search+=("$(dirname "$drv")")
for d in /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu /usr/lib64; do
	[ -d "$d" ] && search+=("$d")
done
# Once each, in that order.
LD_LIBRARY_PATH=$(printf '%s\n' "${search[@]}" | awk '!seen[$0]++' | paste -sd:)
export LD_LIBRARY_PATH
# Open MPI from the kit, each rank a singleton (no mpirun, no daemon).
export OPAL_PREFIX=$K/mpi
export OMPI_MCA_mca_base_component_path=$K/mpi/$(cat "$K/mpi/component-path" 2> /dev/null)
export OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_btl=self OMPI_MCA_pml=ob1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_NUM_THREADS=1 TMPDIR=$TMP

# ---- steps ----------------------------------------------------------------------
S0=$T0
step() {
	S0=$(date +%s)
	echo
	echo "== $* ($((S0 - T0)) s)"
}
# record NAME STATUS NUMBERS: one step's result (NUMBERS a JSON object's
# members, or empty), printed and kept for the JSON.
record() {
	local s=$(($(date +%s) - S0))
	echo "$(echo "$2" | tr a-z A-Z): $1 ($s s)"
	[ "$2" = fail ] && failed=$((failed + 1))
	RESULTS+=("{\"step\": \"$1\", \"status\": \"$2\", \"seconds\": $s${3:+, $3}}")
	write_json
}
write_json() {
	{
		echo "{\"kit\": \"$(sed -n 's/^source: //p' "$K/MANIFEST" 2> /dev/null)\","
		echo " \"mode\": \"$([ $EMU = 1 ] && echo emulate || echo gpu)\","
		echo " \"started\": \"$(date -u -d @"$T0" +%Y-%m-%dT%H:%M:%SZ)\","
		echo " \"failed\": $failed,"
		echo " \"steps\": ["
		local i n=${#RESULTS[@]}
		for ((i = 0; i < n; i++)); do
			echo "  ${RESULTS[i]}$([ $i -lt $((n - 1)) ] && echo ,)"
		done
		echo " ]}"
	} > "$JSON"
}
# limit S: S seconds, or what is left of the budget if less (at least 1).
limit() {
	local left=$((BUDGET - ($(date +%s) - T0)))
	[ $left -lt "$1" ] && echo $((left > 1 ? left : 1)) || echo "$1"
}
jstr() { printf '"%s"' "$(echo "$1" | sed 's/\\/\\\\/g; s/"/\\"/g' | tr -d '\n')"; }

echo "first-run kit: $K"
cat "$K/MANIFEST" 2> /dev/null
[ $EMU = 1 ] && echo "rehearsal: the emulator in the GPU's place"

step "1. environment and libraries"
ARCH=sm_90
if [ $EMU = 0 ]; then
	timeout 10 nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader |
		tee "$TMP/smi"
	gpu=$(head -1 "$TMP/smi" | cut -d, -f1 | sed 's/^ *//')
	drvv=$(head -1 "$TMP/smi" | cut -d, -f2 | tr -d ' ')
	cc=$(head -1 "$TMP/smi" | cut -d, -f3 | tr -d ' .')
	ARCH=sm_${cc:-90}
	[ "$ARCH" = sm_90 ] || echo "warning: the kit's modules are for sm_90 (H100, H200); this card is $ARCH"
	# CUDA 13's runtime (and NVRTC 13's PTX) needs driver 580 or later.
	[ "${drvv%%.*}" -ge 580 ] 2> /dev/null ||
		echo "warning: driver $drvv: the kit's CUDA 13 libraries need 580 or later"
fi
echo "glibc: $(getconf GNU_LIBC_VERSION 2> /dev/null); $(uname -srm)"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
missing=0
for f in "$K"/bin/* "$K"/runs/*/rank*; do
	[ $EMU = 1 ] || case $f in */runs/emu-*) continue ;; esac
	[ $EMU = 0 ] || case $f in */runs/emu-*|*/bin/dev_check) ;; *) continue ;; esac
	nf=$(timeout 5 ldd "$f" 2>&1 | grep -E "not found|GLIBC.*not found") && {
		echo "  ${f#"$K"/}: $nf"
		missing=$((missing + 1))
	}
done
timeout 5 ldd "$K/bin/dev_check" | grep -E "libcudart|libcublas|libnccl" | sed 's/^[[:space:]]*/  /'
nvrtc=""
for d in ${LD_LIBRARY_PATH//:/ }; do
	for l in "$d"/libnvrtc.so.[0-9]*; do
		[ -e "$l" ] && case $l in *builtins*|*alt*) ;; *) nvrtc=$l; break 2 ;; esac
	done
done
echo "  NVRTC: ${nvrtc:-not found}"
nums="\"missing\": $missing, \"nvrtc\": $(jstr "${nvrtc:-}")"
[ $EMU = 0 ] && nums="$nums, \"gpu\": $(jstr "$gpu"), \"driver\": $(jstr "$drvv"), \"arch\": \"$ARCH\""
if [ $missing = 0 ] && { [ $EMU = 1 ] || [ -n "$nvrtc" ]; }; then
	record environment pass "$nums"
else
	record environment fail "$nums"
fi

step "2. gemm_peak: the card's cuBLAS peak (GEMM 8192^3)"
if [ $EMU = 1 ]; then
	echo "(rehearsal: no cuBLAS)"
	record gemm_peak skip ""
elif timeout "$(limit 20)" "$K/bin/gemm_peak" 8192 > "$TMP/peak" 2>&1; then
	cat "$TMP/peak"
	bf=$(sed -n 's/^peak bf16 \([0-9.]*\) TFLOP.*/\1/p' "$TMP/peak")
	f32=$(sed -n 's/^peak f32 \([0-9.]*\) TFLOP.*/\1/p' "$TMP/peak")
	record gemm_peak pass "\"bf16_tflops\": ${bf:-null}, \"f32_tflops\": ${f32:-null}"
else
	cat "$TMP/peak"
	record gemm_peak fail ""
fi

step "3. kernel modules: registers and local memory per entry point"
if [ $EMU = 1 ]; then
	echo "(rehearsal: no driver to load PTX)"
	record kernel_info skip ""
else
	mods=$(ls "$K"/runs/hybrid-*/*.ptx "$K"/kernels/*/*.ptx 2> /dev/null)
	timeout "$(limit 90)" "$K/bin/kernel_info" $mods > "$TMP/ki" 2>&1
	rc=$?
	grep -E "^module |^kernel_info" "$TMP/ki"
	echo "  the most registers and local memory:"
	grep -E " regs " "$TMP/ki" | sort -k4,4n | tail -3 | sed 's/^/    /'
	grep -E " regs " "$TMP/ki" | sort -k6,6n | tail -3 | sed 's/^/    /'
	cp "$TMP/ki" "$LOGDIR/kernel_info.txt"
	nl=$(sed -n 's/^kernel_info: \([0-9]*\) modules loaded, \([0-9]*\) failed/\1/p' "$TMP/ki")
	nf=$(sed -n 's/^kernel_info: \([0-9]*\) modules loaded, \([0-9]*\) failed/\2/p' "$TMP/ki")
	maxr=$(awk '/ regs / {if ($4 > m) m = $4} END {print m + 0}' "$TMP/ki")
	maxl=$(awk '/ regs / {if ($6 > m) {m = $6; k = $1 "." $2}} END {print m + 0, k}' "$TMP/ki")
	n="\"modules\": ${nl:-0}, \"failed\": ${nf:-null}, \"max_regs\": $maxr, \"max_local\": ${maxl%% *}, \"max_local_at\": $(jstr "${maxl#* }")"
	[ $rc = 0 ] && record kernel_info pass "$n" || { tail -5 "$TMP/ki"; record kernel_info fail "$n"; }
fi

step "4. dev_check: every kind's F/B/W against the CPU kernels"
if [ $EMU = 1 ]; then
	DEVICE=(--device emu --modules "$TMP/emu-modules")
	KINDS=(mlp) # what the kit compiled modules for; every kind is ctest dev_check's
	cp -r "$K/emu-modules" "$TMP/emu-modules"
else
	DEVICE=(--device cuda --gpu-arch "$ARCH")
	KINDS=()
fi
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2> /dev/null | head -1)
for mode in f32 bf16; do
	flag=()
	[ $mode = bf16 ] && flag=(--bf16)
	timeout "$(limit 90)" "$K/bin/dev_check" "${DEVICE[@]}" "${flag[@]}" "${KINDS[@]}" > "$TMP/dc" 2>&1
	rc=$?
	cp "$TMP/dc" "$LOGDIR/dev_check-$mode.txt"
	ok=$(grep -c ' ok$' "$TMP/dc")
	bad=$(grep -c ' FAIL$' "$TMP/dc")
	worst=$(awk '/max rel err/ {print $(NF-1)}' "$TMP/dc" | sort -g | tail -1)
	awk '/max rel err/ {print $(NF-1), $0}' "$TMP/dc" | sort -g | tail -3 | cut -d' ' -f2- | sed 's/^/  worst: /'
	n="\"ok\": $ok, \"failed\": $bad, \"worst_rel_err\": ${worst:-null}, \"exit\": $rc"
	if [ $rc = 0 ]; then
		record "dev_check_$mode" pass "$n"
		continue
	fi
	[ $rc = 124 ] && echo "  timed out"
	grep -v ' ok$' "$TMP/dc" | tail -20
	record "dev_check_$mode" fail "$n"
	# The failing kinds once more, under compute-sanitizer where there is one.
	kinds=$(awk '/ FAIL$/ {print $1}' "$TMP/dc" | sort -u | tr '\n' ' ')
	if [ $EMU = 0 ] && [ -n "$sanitizer" ] && [ -n "$kinds" ]; then
		step "4b. dev_check $mode $kinds under compute-sanitizer"
		timeout "$(limit 120)" "$sanitizer" --print-limit 20 "$K/bin/dev_check" "${DEVICE[@]}" \
			"${flag[@]}" $kinds > "$TMP/san" 2>&1
		rc=$?
		cp "$TMP/san" "$LOGDIR/sanitizer-$mode.txt"
		grep -E "=========|FAIL" "$TMP/san" | head -30
		record "sanitizer_$mode" "$([ $rc = 0 ] && echo pass || echo fail)" "\"kinds\": $(jstr "$kinds"), \"exit\": $rc"
	fi
done

step "5. tiny-hybrid, 1 rank, 5 steps: losses against the CPU's"
STEPS=$(wc -l < "$K/ref/tiny-hybrid.losses")
pre=""
[ $EMU = 1 ] && pre=emu-
for run in "f32 1e-5" "bf16 2e-2"; do
	set -- $run
	d=$K/runs/${pre}hybrid-$1
	(cd "$d" && timeout "$(limit 120)" ./rank0 --steps "$STEPS") > "$TMP/t-$1" 2>&1
	rc=$?
	cp "$TMP/t-$1" "$LOGDIR/tiny-hybrid-$1.txt"
	sed -n 's/^step \([0-9]*\) loss [^ ]* (\([^)]*\)).*/\1 \2/p' "$TMP/t-$1" > "$TMP/t-$1.losses"
	cmp=$(join "$TMP/t-$1.losses" "$K/ref/tiny-hybrid.losses" | while read -r s a b; do
		printf '%s %.17g %.17g\n' "$s" "$a" "$b"
	done | awk -v tol="$2" -v steps="$STEPS" '
		{ e = ($2 - $3) / $3; if (e < 0) e = -e; if (e > w) w = e; n++
		  printf "  step %d loss %.9g (CPU %.9g) relative difference %.2e\n", $1, $2, $3, e > "/dev/stderr" }
		END { printf "%.3e %d\n", w, n; exit !(n == steps && w <= tol) }')
	ok=$?
	w=${cmp% *} n=${cmp#* }
	ms=$(sed -n 's/^summary: .*mean step \([0-9.]*\) ms.*/\1/p' "$TMP/t-$1")
	nums="\"steps\": ${n:-0}, \"worst_rel_diff\": ${w:-null}, \"tolerance\": $2, \"mean_step_ms\": ${ms:-null}, \"exit\": $rc"
	if [ $rc = 0 ] && [ $ok = 0 ]; then
		echo "  largest relative difference $w over $n steps (at most $2)"
		record "tiny_hybrid_$1" pass "$nums"
	else
		[ $rc = 124 ] && echo "  timed out"
		tail -15 "$TMP/t-$1"
		record "tiny_hybrid_$1" fail "$nums"
		# Once more without NCCL (host copies over MPI), to tell a failure of
		# the 1-rank NCCL communicator from one of the device's.
		if [ $EMU = 0 ] && [ $rc != 0 ]; then
			(cd "$d" && OCTO_COMM=mpi timeout "$(limit 120)" ./rank0 --steps "$STEPS") > "$TMP/m-$1" 2>&1
			rc=$?
			cp "$TMP/m-$1" "$LOGDIR/tiny-hybrid-$1-mpi.txt"
			grep -E "^step |error" "$TMP/m-$1" | tail -8
			record "tiny_hybrid_$1_without_nccl" "$([ $rc = 0 ] && echo pass || echo fail)" "\"exit\": $rc"
		fi
	fi
done

step "6. every launch and GEMM timed (cudaEvents): Llama-3-8B, Nemotron-H-8B layers, seq 4096, bf16"
if [ $EMU = 1 ]; then
	TIME=(--device emu --modules "$TMP/emu-modules" --time --small --bf16)
	echo "(rehearsal: small shapes on the emulator, the host's clock)"
else
	TIME=(--device cuda --gpu-arch "$ARCH" --time --bf16)
fi
timeout "$(limit 150)" "$K/bin/dev_check" "${TIME[@]}" > "$TMP/kt" 2>&1
rc=$?
cp "$TMP/kt" "$LOGDIR/kernel_time.txt"
grep -E "^phase |^layer |error" "$TMP/kt"
echo "  the slowest calls:"
grep "^call " "$TMP/kt" | awk '{for (i = 1; i <= NF; i++) if ($i == "ms") {print $(i-1), $0; break}}' |
	sort -gr | head -8 | cut -d' ' -f2- | sed 's/^call /    /'
layers=$(sed -n 's/^layer \(.*\) F+B+W \([0-9.]*\) ms$/\1=\2/p' "$TMP/kt" |
	awk -F= '{printf "%s\"%s\": %s", (NR > 1 ? ", " : ""), $1, $2}')
# The GEMMs together: their FLOPs (2mnk, from "GEMM MxNxK") over their time.
gt=$(awk '/^call .* GEMM / {for (i = 1; i <= NF; i++) {if ($i == "ms") ms += $(i-1)
		if ($i == "GEMM") {split($(i+1), d, "x"); f += 2 * d[1] * d[2] * d[3]}}}
	END {if (ms > 0) printf "%.1f", f / (ms * 1e9); else print "null"}' "$TMP/kt")
n="\"layers_ms\": {$layers}, \"gemm_tflops\": $gt, \"exit\": $rc"
if [ -n "${bf:-}" ] && [ "$gt" != null ]; then
	n="$n, \"gemm_fraction_of_peak\": $(awk -v g="$gt" -v p="$bf" 'BEGIN {printf "%.3f", g / p}')"
	echo "  GEMMs: $gt TFLOP/s on average, of the card's $bf (gemm_peak)"
fi
if [ $rc = 0 ]; then
	record kernel_time pass "$n"
else
	[ $rc = 124 ] && echo "  timed out (the layers done so far are above)"
	tail -5 "$TMP/kt"
	record kernel_time fail "$n"
fi

step "7. cuDNN's fused attention (OCTO_ATTN=cudnn): the attention cores checked, then timed"
if [ $EMU = 1 ]; then
	echo "  (rehearsal: the emulator has no cuDNN)"
	record cudnn_attention skip ""
else
	# Each core says whether cuDNN took it ("through cuDNN") or declined it
	# (why, from cuDNN); a declined core runs OctoPipe's kernels, which
	# step 4 checked.
	OCTO_ATTN=cudnn timeout "$(limit 60)" "$K/bin/dev_check" "${DEVICE[@]}" --bf16 attn par \
		> "$TMP/cd" 2>&1
	rc=$?
	cp "$TMP/cd" "$LOGDIR/dev_check-cudnn.txt"
	took=$(grep -c "through cuDNN" "$TMP/cd")
	declined=$(grep -c "cuDNN declines" "$TMP/cd")
	grep -E "attention core|FAIL|error" "$TMP/cd" | sort | uniq -c | head -20
	worst=$(awk '/max rel err/ {print $(NF-1)}' "$TMP/cd" | sort -g | tail -1)
	OCTO_ATTN=cudnn timeout "$(limit 60)" "$K/bin/dev_check" --device cuda --gpu-arch "$ARCH" \
		--time --bf16 attn > "$TMP/ct" 2>&1
	trc=$?
	cp "$TMP/ct" "$LOGDIR/kernel_time-cudnn.txt"
	grep -E "^phase |^layer |library attention|attention_.*core|error" "$TMP/ct"
	n="\"cores_through_cudnn\": $took, \"cores_declined\": $declined, \"worst_rel_err\": ${worst:-null}, \"exit\": $rc, \"time_exit\": $trc"
	record cudnn_attention "$([ $rc = 0 ] && [ $trc = 0 ] && echo pass || echo fail)" "$n"
fi

echo
echo "first run: $failed failed ($(($(date +%s) - T0)) s); $LOG, $JSON"
[ $failed -gt 0 ] && exit 1
exit 0
