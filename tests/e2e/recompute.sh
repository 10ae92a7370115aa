#!/usr/bin/env bash
# recompute.sh OCTOPIPE SRCDIR: activation recomputation end to end (issue
# 17; docs/cost-model.md, "Recomputation").  A fully recomputing stage keeps
# only its input from F to B and runs its F again before its B; a selective
# one keeps all but its mamba layers' scan chunk states, which each such B
# makes again with the scan's F; both with the same kernels in the same
# order, so training must give the same bits.  Full: tiny-dense (2 ranks,
# 1f1b) and tiny-hybrid (2 ranks, zbv: two stages a rank, a value handed
# over on one rank, the split backward) on CPU ranks, and tiny-dense on the
# device emulator (--target cuda-emu, 2 ranks, zbh1).  Selective:
# tiny-hybrid (Mamba-2) and tests/e2e/tiny-mamba1.yaml (Mamba-1, 1f1b) on
# CPU ranks, and tiny-hybrid on the emulator (1f1b).  Every step's loss and
# the final model hash equal the run without recomputation bit for bit.
# Between them the models hold every layer kind.
# The recomputing run must really recompute: with full its trace holds an R
# (rt_run_r) for every F, and `octopipe report` reads that trace (an R
# counts in its B); with selective there is no R (the scan runs again inside
# B), the memory plan's arenas are smaller than without, and `octopipe
# report` reads its trace too.
#
# OCTO_TEST_QUICK=1 (the sanitizer build, where the emulator is some 20x
# slower) trains 2 steps and leaves the emulated runs out: their kernels are
# the CPU's path's here, and e2e_device_emu covers the emulator there.
#
# Exit 0 all agree, 1 a mismatch or a failure, 77 (skip) without mpirun.
set -u
octopipe=$1
src=$(cd "$2" && pwd)
quick=${OCTO_TEST_QUICK:-0}
steps=3
[ "$quick" = 1 ] && steps=2
. "$(dirname "${BASH_SOURCE[0]}")/env.sh" # skips without mpirun; $tmp, removed at exit
fail=0

# run NAME STEPS ARGS...: compile into $tmp/NAME and train STEPS steps with a
# trace; leaves $tmp/NAME.losses ("STEP HEXLOSS" lines) and $tmp/NAME.hash.
run() {
	local name=$1 n=$2
	shift 2
	if ! "$octopipe" compile "$@" -o "$tmp/$name" >"$tmp/$name.compile" 2>&1; then
		echo "FAIL: $name: compile failed:"
		tail -8 "$tmp/$name.compile" | sed 's/^/    /'
		return 1
	fi
	if ! timeout 600 "$tmp/$name/launch" --steps "$n" --trace "$tmp/$name/trace" >"$tmp/$name.log" 2>&1; then
		echo "FAIL: $name: the job failed:"
		tail -15 "$tmp/$name.log" | sed 's/^/    /'
		return 1
	fi
	sed -n 's/^step \([0-9]*\) loss [^ ]* (\([^)]*\)).*/\1 \2/p' "$tmp/$name.log" >"$tmp/$name.losses"
	sed -n 's/^model hash \(0x[0-9a-f]*\) .*/\1/p' "$tmp/$name.log" >"$tmp/$name.hash"
	if [ "$(wc -l <"$tmp/$name.losses")" -ne "$n" ] || [ ! -s "$tmp/$name.hash" ]; then
		echo "FAIL: $name: no $n losses and a model hash in the output:"
		tail -15 "$tmp/$name.log" | sed 's/^/    /'
		return 1
	fi
}

# events NAME CAT: the trace's events of category CAT, every rank's.
events() {
	cat "$tmp/$1/trace"/trace-rank*.json | grep -o "\"cat\":\"$2\"" | wc -l
}

# arena NAME: the memory plan's arenas, summed over the devices.
arena() {
	sed -n 's/^memplan D[0-9]* arena=\([0-9]*\)B .*/\1/p' "$tmp/$1/plan.opir" | awk '{s += $1} END {print s + 0}'
}

# pair NAME STEPS MODES ARGS...: NAME without recomputation and with each
# --recompute mode of MODES ("full", "selective" or both), compared.
pair() {
	local name=$1 n=$2 modes=$3
	shift 3
	run "$name-none" "$n" "$@" || { fail=1; return; }
	local mode f r
	for mode in $modes; do
		run "$name-$mode" "$n" "$@" --recompute "$mode" || { fail=1; continue; }
		f=$(events "$name-$mode" F) r=$(events "$name-$mode" R)
		if ! grep -q "recompute=$mode" "$tmp/$name-$mode/plan.opir" || [ "$f" = 0 ] ||
			[ "$r" != "$([ "$mode" = full ] && echo "$f" || echo 0)" ] ||
			[ "$(events "$name-none" R)" != 0 ]; then
			echo "FAIL: $name: the $mode run ran $r R's for $f F's (the other $(events "$name-none" R))"
			fail=1
		elif [ "$mode" = selective ] && [ "$(arena "$name-$mode")" -ge "$(arena "$name-none")" ]; then
			echo "FAIL: $name: arenas of $(arena "$name-$mode") bytes with --recompute selective," \
				"$(arena "$name-none") without"
			fail=1
		elif ! cmp -s "$tmp/$name-none.losses" "$tmp/$name-$mode.losses"; then
			echo "FAIL: $name: the losses differ with --recompute $mode:"
			diff "$tmp/$name-none.losses" "$tmp/$name-$mode.losses" | sed 's/^/    /'
			fail=1
		elif ! cmp -s "$tmp/$name-none.hash" "$tmp/$name-$mode.hash"; then
			echo "FAIL: $name: model hash $(cat "$tmp/$name-$mode.hash") with --recompute $mode," \
				"$(cat "$tmp/$name-none.hash") without"
			fail=1
		elif [ "$mode" = full ]; then
			echo "ok: $name: $n losses and the model hash $(cat "$tmp/$name-$mode.hash") the same with" \
				"--recompute full ($r R's)"
		else
			echo "ok: $name: $n losses and the model hash $(cat "$tmp/$name-$mode.hash") the same with" \
				"--recompute selective (arenas $(arena "$name-$mode") bytes, $(arena "$name-none") without)"
		fi
	done
}

# report NAME: `octopipe report` reads NAME's trace.
report() {
	if [ -d "$tmp/$1/trace" ] && ! "$octopipe" report "$tmp/$1" >"$tmp/report" 2>&1; then
		echo "FAIL: $1: octopipe report refused its trace:"
		head -5 "$tmp/report" | sed 's/^/    /'
		fail=1
	fi
}

pair dense "$steps" full "$src/models/tiny-dense.yaml" --devices 2 --schedule 1f1b
report dense-full
pair hybrid "$steps" "full selective" "$src/models/tiny-hybrid.yaml" --devices 2 --schedule zbv
report hybrid-selective
pair mamba1 "$steps" selective "$src/tests/e2e/tiny-mamba1.yaml" --devices 2 --schedule 1f1b
if [ "$quick" != 1 ]; then
	pair dense-emu 2 full "$src/models/tiny-dense.yaml" --target cuda-emu --devices 2 --schedule zbh1
	pair hybrid-emu 2 selective "$src/models/tiny-hybrid.yaml" --target cuda-emu --devices 2 --schedule 1f1b
fi
exit $fail
