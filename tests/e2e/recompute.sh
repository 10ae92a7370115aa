#!/usr/bin/env bash
# recompute.sh OCTOPIPE SRCDIR: full activation recomputation end to end
# (issue 17; docs/cost-model.md, "Recomputation").  A recomputing stage keeps
# only its input from F to B and runs its F again before its B, with the same
# kernels in the same order, so training must give the same bits: for
# tiny-dense (2 ranks, 1f1b) and tiny-hybrid (2 ranks, zbv: two stages a rank,
# a value handed over on one rank, the split backward) on CPU ranks, and
# tiny-dense on the device emulator (--target cuda-emu, 2 ranks, zbh1), every
# step's loss and the final model hash with --recompute full equal the run
# without it bit for bit.  Between them the two models hold every layer kind.
# The recomputing run must really recompute: its trace holds an R (rt_run_r)
# for every F; and `octopipe report` reads that trace (an R counts in its B).
#
# OCTO_TEST_QUICK=1 (the sanitizer build, where the emulator is some 20x
# slower) trains 2 steps and leaves the emulated run out: its kernels are the
# CPU's path's here, and e2e_device_emu covers the emulator there.
#
# Exit 0 all agree, 1 a mismatch or a failure, 77 (skip) without mpirun.
set -u
octopipe=$1
src=$(cd "$2" && pwd)
quick=${OCTO_TEST_QUICK:-0}
steps=3
[ "$quick" = 1 ] && steps=2
if ! command -v mpirun >/dev/null 2>&1; then
	echo "SKIP: mpirun not found"
	exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 OCTO_COMM_TIMEOUT=${OCTO_COMM_TIMEOUT:-300}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
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

# pair NAME STEPS ARGS...: NAME without and with --recompute full, compared.
pair() {
	local name=$1 n=$2
	shift 2
	run "$name-none" "$n" "$@" && run "$name-full" "$n" "$@" --recompute full || { fail=1; return; }
	local f r
	f=$(events "$name-full" F) r=$(events "$name-full" R)
	if ! grep -q 'recompute=full' "$tmp/$name-full/plan.opir" || [ "$f" = 0 ] || [ "$r" != "$f" ] ||
		[ "$(events "$name-none" R)" != 0 ]; then
		echo "FAIL: $name: the recomputing run ran $r R's for $f F's (the other $(events "$name-none" R))"
		fail=1
	elif ! cmp -s "$tmp/$name-none.losses" "$tmp/$name-full.losses"; then
		echo "FAIL: $name: the losses differ with --recompute full:"
		diff "$tmp/$name-none.losses" "$tmp/$name-full.losses" | sed 's/^/    /'
		fail=1
	elif ! cmp -s "$tmp/$name-none.hash" "$tmp/$name-full.hash"; then
		echo "FAIL: $name: model hash $(cat "$tmp/$name-full.hash") with --recompute full," \
			"$(cat "$tmp/$name-none.hash") without"
		fail=1
	else
		echo "ok: $name: $n losses and the model hash $(cat "$tmp/$name-full.hash") the same with" \
			"--recompute full ($r R's)"
	fi
}

pair dense "$steps" "$src/models/tiny-dense.yaml" --devices 2 --schedule 1f1b
if [ -d "$tmp/dense-full/trace" ] && ! "$octopipe" report "$tmp/dense-full" >"$tmp/report" 2>&1; then
	echo "FAIL: dense-full: octopipe report refused its trace:"
	head -5 "$tmp/report" | sed 's/^/    /'
	fail=1
fi
pair hybrid "$steps" "$src/models/tiny-hybrid.yaml" --devices 2 --schedule zbv
[ "$quick" = 1 ] || pair dense-emu 2 "$src/models/tiny-dense.yaml" --target cuda-emu --devices 2 --schedule zbh1
exit $fail
