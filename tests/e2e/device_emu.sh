#!/usr/bin/env bash
# device_emu.sh OCTOPIPE SRCDIR: the CUDA target's rank programs, end to end,
# without a GPU (docs/cuda.md).  `compile --target cuda-emu` builds the same
# programs as `--target cuda` -- the device attached, the buffers on it, F,
# B and W as GEMMs and launches of the generated kernels -- with the kernels
# compiled for the host and run by the emulator.  For tiny-dense and
# tiny-hybrid (f32), with 1 rank and with several ranks under different
# schedules:
#   - every step's loss is within 1e-5 (relative) of the CPU target's,
#   - every device run's losses and final model hash are identical bit for
#     bit to the 1-rank device run's (the device executor is deterministic,
#     so the plan does not change the result there either);
#   - with clipping by the global norm (--clip, below every step's norm):
#     the CPU target's clipped losses within 1e-5, every plan's losses,
#     gradient norms (the metrics' 17 digits) and hash the 1-rank run's,
#     and step 2 on differ from the unclipped run's (the clip acts);
# and tiny-hybrid in bf16 trains within 2e-2 of the f32 CPU losses.
# OCTO_TEST_QUICK=1 (the sanitizer build, where the emulator is some 20x
# slower) keeps tiny-dense on 1 and 2 ranks, 2 steps, and the resume; the
# kernels of every kind are checked there by dev_check.
#
# Exit 0 all agree, 1 a mismatch or a failure, 77 (skip) without mpirun.
set -u
octopipe=$1
src=$(cd "$2" && pwd)
quick=${OCTO_TEST_QUICK:-0}
steps=3
models="dense hybrid"
plans=("2 zbh1" "4 tuned")
if [ "$quick" = 1 ]; then
	steps=2 models=dense plans=("2 zbh1")
fi
. "$(dirname "${BASH_SOURCE[0]}")/env.sh" # skips without mpirun; $tmp, removed at exit
fail=0

# run NAME MODEL ARGS...: compile into $tmp/NAME and train; leaves
# $tmp/NAME.losses ("STEP HEXLOSS" lines) and $tmp/NAME.hash.
run() {
	local name=$1 model=$2
	shift 2
	if ! "$octopipe" compile "$model" "$@" -o "$tmp/$name" >"$tmp/$name.compile" 2>&1; then
		echo "FAIL: $name: compile failed:"
		tail -8 "$tmp/$name.compile" | sed 's/^/    /'
		fail=1
		return 1
	fi
	train "$name" "$name"
}

# train NAME DIR [ARGS...]: train the programs of $tmp/DIR (OCTO_COMM as
# set) into $tmp/NAME.losses, $tmp/NAME.hash and $tmp/NAME.norms (the
# metrics' gradient norms: none without clipping).
train() {
	local name=$1 dir=$2
	shift 2
	if ! MPIRUN_EXTRA="-x OCTO_COMM" timeout 600 "$tmp/$dir/launch" --steps "$steps" \
	       --metrics "$tmp/$name.jsonl" "$@" >"$tmp/$name.log" 2>&1; then
		echo "FAIL: $name: the job failed:"
		tail -15 "$tmp/$name.log" | sed 's/^/    /'
		fail=1
		return 1
	fi
	sed -n 's/^step \([0-9]*\) loss [^ ]* (\([^)]*\)).*/\1 \2/p' "$tmp/$name.log" >"$tmp/$name.losses"
	sed -n 's/^model hash \(0x[0-9a-f]*\) .*/\1/p' "$tmp/$name.log" >"$tmp/$name.hash"
	grep -o '"grad_norm": [^,}]*' "$tmp/$name.jsonl" >"$tmp/$name.norms" 2>/dev/null
	if [ "$(wc -l <"$tmp/$name.losses")" -ne "$steps" ] || [ ! -s "$tmp/$name.hash" ]; then
		echo "FAIL: $name: no $steps losses and a model hash in the output:"
		tail -15 "$tmp/$name.log" | sed 's/^/    /'
		fail=1
		return 1
	fi
}

# close NAME REF TOL: every step's loss of NAME within TOL (relative) of REF's.
close() {
	local worst
	worst=$(join "$tmp/$1.losses" "$tmp/$2.losses" | while read -r s a b; do
		printf '%.17g %.17g\n' "$a" "$b"
	done | awk -v tol="$3" '
		{ e = ($1 - $2) / $2; if (e < 0) e = -e; if (e > w) w = e; n++ }
		END { if (n == 0) { print "none"; exit } printf "%.2e %s\n", w, (w <= tol ? "ok" : "FAIL") }')
	echo "  $1 against $2: largest relative loss difference $worst (threshold $3)"
	case $worst in *ok) ;; *) fail=1 ;; esac
}

# same NAME REF: identical losses, gradient norms and model hash, bit for
# bit.
same() {
	if cmp -s "$tmp/$1.losses" "$tmp/$2.losses" && cmp -s "$tmp/$1.hash" "$tmp/$2.hash" &&
	   cmp -s "$tmp/$1.norms" "$tmp/$2.norms"; then
		echo "  $1: losses$(grep -q "[0-9]" "$tmp/$1.norms" && echo ", gradient norms") and model hash identical to $2's"
	else
		echo "FAIL: $1: losses, gradient norms or model hash differ from $2's:"
		paste "$tmp/$1.losses" "$tmp/$2.losses" | sed 's/^/    /'
		paste "$tmp/$1.norms" "$tmp/$2.norms" | sed 's/^/    /'
		echo "    hash $(cat "$tmp/$1.hash") vs $(cat "$tmp/$2.hash")"
		fail=1
	fi
}

for model in $models; do
	y=$src/models/tiny-$model.yaml
	echo "tiny-$model:"
	run "$model-cpu" "$y" --devices 1 || continue
	run "$model-emu-1" "$y" --target cuda-emu --devices 1 || continue
	# report.md names the target it was compiled for (it said "CPU ranks"
	# for every target).
	for t in "cpu:on 1 CPU rank" "emu-1:on 1 emulated-CUDA rank"; do
		if ! head -1 "$tmp/$model-${t%%:*}/report.md" | grep -q "${t#*:}"; then
			echo "FAIL: $model-${t%%:*}: report.md does not say '${t#*:}': $(head -1 "$tmp/$model-${t%%:*}/report.md")"
			fail=1
		fi
	done
	close "$model-emu-1" "$model-cpu" 1e-5
	for plan in "${plans[@]}"; do
		set -- $plan
		if run "$model-emu-$1-$2" "$y" --target cuda-emu --devices "$1" --schedule "$2" \
		       --tune-budget 2; then
			same "$model-emu-$1-$2" "$model-emu-1"
		fi
	done
	# The communicators of a GPU's ranks: values through host copies
	# (OCTO_COMM=mpi), and NCCL's grouped semantics (OCTO_COMM=nccl).
	set -- ${plans[-1]}
	for comm in mpi nccl; do
		if [ -x "$tmp/$model-emu-$1-$2/launch" ] &&
		   OCTO_COMM=$comm train "$model-emu-$1-$2-$comm" "$model-emu-$1-$2"; then
			same "$model-emu-$1-$2-$comm" "$model-emu-1"
		fi
	done
done

# Clipping on the device's ranks: the norm summed exactly on the host from
# the device's gradients, the scale on the device.  0.5 is below every
# step's norm of both models.
clip=0.5
for model in $models; do
	[ -s "$tmp/$model-emu-1.losses" ] && [ -x "$tmp/$model-cpu/launch" ] || continue
	echo "tiny-$model, --clip $clip:"
	train "$model-cpu-clip" "$model-cpu" --clip $clip &&
		train "$model-emu-1-clip" "$model-emu-1" --clip $clip || continue
	close "$model-emu-1-clip" "$model-cpu-clip" 1e-5
	if [ "$(sed -n 2p "$tmp/$model-emu-1-clip.losses")" != "$(sed -n 2p "$tmp/$model-emu-1.losses")" ] &&
	   [ "$(wc -l <"$tmp/$model-emu-1-clip.norms")" = "$steps" ]; then
		echo "  $model-emu-1-clip: step 2 on differs from the unclipped run (the clip acts); $steps norms"
	else
		echo "FAIL: $model-emu-1-clip: the clipped run's step 2 is the unclipped one's, or no norms"
		fail=1
	fi
	for plan in "${plans[@]}"; do
		set -- $plan
		[ -x "$tmp/$model-emu-$1-$2/launch" ] &&
			train "$model-emu-$1-$2-clip" "$model-emu-$1-$2" --clip $clip &&
			same "$model-emu-$1-$2-clip" "$model-emu-1-clip"
	done
done

# A checkpoint of the device's model resumes where it stopped: steps
# 1..steps-1, saved, then the last step after --resume, as in the
# uninterrupted run.
d=$tmp/dense-emu-2-zbh1
if [ -x "$d/launch" ]; then
	if timeout 600 "$d/launch" --steps $((steps - 1)) --checkpoint "$tmp/ck" >"$tmp/ck1.log" 2>&1 &&
	   timeout 600 "$d/launch" --steps 1 --resume "$tmp/ck" >"$tmp/ck2.log" 2>&1; then
		a=$(sed -n "s/^step $steps loss [^ ]* (\([^)]*\)).*/\1/p" "$tmp/ck2.log")
		b=$(sed -n "s/^$steps //p" "$tmp/dense-emu-1.losses")
		if [ -n "$a" ] && [ "$a" = "$b" ]; then
			echo "  resume: step $steps after a checkpoint at step $((steps - 1)) is the uninterrupted run's ($a)"
		else
			echo "FAIL: resume: step $steps loss '$a', uninterrupted '$b'"
			fail=1
		fi
	else
		echo "FAIL: checkpoint/resume on the emulated device:"
		tail -n 5 "$tmp/ck1.log" "$tmp/ck2.log" | sed 's/^/    /'
		fail=1
	fi
fi

# A trace of the device's ranks: F, B and W timed by the device's marks
# (events on the compute stream; the emulator's are the host's clock at
# the mark), in order on each rank's compute timeline without overlap,
# read by `octopipe report`; tracing changes no bit.
d=dense-emu-2-zbh1
if [ -x "$tmp/$d/launch" ] && train "$d-trace" "$d" --trace "$tmp/$d/trace"; then
	same "$d-trace" dense-emu-1
	for r in 0 1; do
		t=$tmp/$d/trace/trace-rank$r.json
		got=$(grep -E '"cat":"[FBWR]"' "$t" | awk '
			{ n++; if (index($0, "\"clock\":\"device\"")) dev++
			  match($0, /"ts":[0-9.]*/); ts = substr($0, RSTART + 5, RLENGTH - 5) + 0
			  match($0, /"dur":[0-9.]*/); dur = substr($0, RSTART + 6, RLENGTH - 6) + 0
			  if (n > 1 && ts + 0.001 < end) bad++
			  end = ts + dur }
			END { printf "%d %d %d\n", n, dev, bad }')
		set -- $got
		if [ "${1:-0}" -gt 0 ] && [ "$2" = "$1" ] && [ "$3" = 0 ]; then
			echo "  trace: rank $r's $1 F, B and W on the device's marks, in order, none overlapping"
		else
			echo "FAIL: trace of rank $r: $1 F/B/W events, $2 on the device's marks, $3 overlapping"
			fail=1
		fi
	done
	if ! "$octopipe" report "$tmp/$d" >"$tmp/$d-report.log" 2>&1; then
		echo "FAIL: octopipe report on the device's trace:"
		tail -5 "$tmp/$d-report.log" | sed 's/^/    /'
		fail=1
	fi
fi

# The profile measured through the device executor, and a plan from it.
if [ "$quick" = 1 ]; then
	:
elif "$octopipe" profile "$src/models/tiny-dense.yaml" --target cuda-emu -o "$tmp/prof.yaml" \
	>"$tmp/prof.log" 2>&1 && grep -q 'device: "the host emulator' "$tmp/prof.yaml" &&
   grep -q '^#   L1: F [0-9.]*, B [0-9.]*, W [0-9.]*$' "$tmp/prof.yaml" &&
   "$octopipe" plan "$src/models/tiny-dense.yaml" --profile "$tmp/prof.yaml" >"$tmp/plan.log" 2>&1; then
	echo "  profile: measured on the emulated device ($(grep -c '^  [0-9]*: {f:' "$tmp/prof.yaml") layers), planned from"
else
	echo "FAIL: profile --target cuda-emu:"
	tail -5 "$tmp/prof.log" "$tmp/plan.log" 2>/dev/null | sed 's/^/    /'
	fail=1
fi

# bf16 on the device: the same model stored in bf16 trains close to f32.
if [ "$quick" = 1 ]; then
	:
elif echo "tiny-hybrid, bf16:" &&
     run hybrid-bf16 "$src/models/tiny-hybrid.yaml" --dtype bf16 --target cuda-emu --devices 2 --schedule 1f1b &&
   [ -s "$tmp/hybrid-cpu.losses" ]; then
	close hybrid-bf16 hybrid-cpu 2e-2
fi

if [ $fail = 0 ]; then
	echo "PASS: the device path (emulated) trains as the CPU does, the same on every plan"
fi
exit $fail
