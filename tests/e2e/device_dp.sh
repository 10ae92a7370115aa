#!/usr/bin/env bash
# device_dp.sh OCTOPIPE SRCDIR: data parallelism on the device executor,
# end to end without a GPU (docs/cuda.md, "Data parallelism on the
# device").  `compile --target cuda-emu` with OCTO_COMM=nccl: the buckets'
# collectives run on the emulator's stand-in for NCCL (MPI's own
# collectives with NCCL's semantics), the update on the device's arrays.
# For tiny-dense and tiny-hybrid, against 1 deterministic device rank (the
# reference), the fewest runs that cover each property once per model:
#   - deterministic at (D, P) = (2, 1) (tiny-dense) and (2, 2) with the
#     distributed optimizer (both): the reference's losses and model hash
#     bit for bit;
#   - without --deterministic, (2, 2) (tiny-dense) and (2, 1) (tiny-hybrid):
#     step 1's loss the reference's, the later ones within 1e-5 (relative);
#     tiny-dense's (2, 2) with the distributed optimizer bit for bit as
#     without it, and so with OCTO_COMM unset (MPI's collectives on the
#     emulated device's buffers, which are host memory);
#   - a checkpoint saved at (2, 2) with the distributed optimizer (the
#     moment shards gathered from the device) resumed on 1 rank: the
#     reference's last loss and model hash;
#   - OCTO_COMM=mpi with dp 2 on device ranks: refused, naming NCCL;
#   - clipping (--clip 0.5, below every step's norm): the deterministic
#     (2, 1) (tiny-dense) and (2, 2) with the distributed optimizer (both)
#     runs give the clipped reference's losses, gradient norms (the
#     metrics' 17 digits) and model hash bit for bit.
# OCTO_TEST_QUICK=1 (the sanitizer build, where the emulator is some 20x
# slower): tiny-dense only, and of it the runs that take the device's
# collectives through all three kinds and the checkpoint's gather (the
# deterministic (2, 1) and (2, 2) runs and the resume); the plain runs'
# bound and the sharding's bits are the normal pass's.
#
# Prints "N passed, M failed"; exit 0 all agree, 1 otherwise, 77 (skip)
# without mpirun.
set -u
octopipe=$1
src=$2
steps=2
models="dense hybrid"
[ "${OCTO_TEST_QUICK:-0}" = 1 ] && models=dense
. "$(dirname "${BASH_SOURCE[0]}")/env.sh" # skips without mpirun; $tmp, removed at exit
export OCTO_COMM=nccl MPIRUN_EXTRA="-x OCTO_COMM"
pass=0 fail=0

ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# compile NAME ARGS...: into $tmp/NAME for the emulated device; false (with
# the reason) on failure.
compile() {
	local name=$1
	shift
	if ! "$octopipe" compile "$@" --target cuda-emu -o "$tmp/$name" >"$tmp/$name.compile" 2>&1; then
		bad "$name: compile failed: $(grep -m1 'error:' "$tmp/$name.compile" || tail -3 "$tmp/$name.compile")"
		return 1
	fi
}

# train NAME DIR [ARGS...]: run $tmp/DIR's job; "STEP HEXLOSS" lines in
# NAME.losses, the model hash in NAME.hash, the metrics' gradient norms
# (none without clipping) in NAME.norms.
train() {
	local name=$1 dir=$2
	shift 2
	if ! timeout 600 "$tmp/$dir/launch" --metrics "$tmp/$name.jsonl" "$@" >"$tmp/$name.log" 2>&1; then
		bad "$name: the job failed: $(grep -m1 'error' "$tmp/$name.log" || tail -3 "$tmp/$name.log")"
		return 1
	fi
	sed -n 's/^step \([0-9]*\) loss [^ ]* (\([^)]*\)).*/\1 \2/p' "$tmp/$name.log" >"$tmp/$name.losses"
	sed -n 's/^model hash \(0x[0-9a-f]*\) .*/\1/p' "$tmp/$name.log" >"$tmp/$name.hash"
	grep -o '"grad_norm": [^,}]*' "$tmp/$name.jsonl" >"$tmp/$name.norms" 2>/dev/null
	if [ ! -s "$tmp/$name.losses" ] || [ ! -s "$tmp/$name.hash" ]; then
		bad "$name: no losses and model hash in the output: $(tail -3 "$tmp/$name.log")"
		return 1
	fi
}

# same NAME REF: losses, gradient norms and hash bit for bit.
same() {
	if ! cmp -s "$tmp/$1.losses" "$tmp/$2.losses"; then
		bad "$1: losses differ from $2's:"
		diff "$tmp/$2.losses" "$tmp/$1.losses" | sed 's/^/    /'
	elif ! cmp -s "$tmp/$1.norms" "$tmp/$2.norms"; then
		bad "$1: gradient norms differ from $2's:"
		diff "$tmp/$2.norms" "$tmp/$1.norms" | sed 's/^/    /'
	elif ! cmp -s "$tmp/$1.hash" "$tmp/$2.hash"; then
		bad "$1: model hash $(cat "$tmp/$1.hash"), $2's $(cat "$tmp/$2.hash")"
	else
		ok "$1: the losses$(grep -q "[0-9]" "$tmp/$1.norms" && echo ", gradient norms") and model hash of $2, bit for bit"
	fi
}

# close NAME REF: step 1's loss REF's, the others within 1e-5 (relative).
close() {
	if [ "$(head -1 "$tmp/$1.losses")" != "$(head -1 "$tmp/$2.losses")" ]; then
		bad "$1: step 1's loss differs from $2's (the same weights and tokens)"
		return
	fi
	dec() { while read -r _ h; do printf '%.17g\n' "$h"; done <"$1"; }
	local worst
	worst=$(paste <(dec "$tmp/$1.losses") <(dec "$tmp/$2.losses") |
		awk '{d = $1 - $2; if (d < 0) d = -d; r = d / $2; if (r > w) w = r} END {printf "%.3g", w}')
	if awk -v w="$worst" 'BEGIN { exit !(w <= 1e-5) }'; then
		ok "$1: losses within ${worst} (relative) of $2's, bound 1e-5"
	else
		bad "$1: losses differ from $2's by ${worst} (relative), above the bound 1e-5"
	fi
}

for model in $models; do
	yaml=$src/models/tiny-$model.yaml
	ref=$model-ref
	compile $ref "$yaml" --devices 1 --deterministic && train $ref $ref --steps $steps || continue
	echo "reference: $model, 1 device rank, deterministic: $(awk '{printf "%s ", $2}' "$tmp/$ref.losses")"
	clip=0.5
	train $ref-clip $ref --steps $steps --clip $clip
	if [ $model = dense ]; then
		compile d2-p1 "$yaml" --devices 2 --dp 2 --deterministic &&
			train d2-p1 d2-p1 --steps $steps && same d2-p1 $ref &&
			train d2-p1-clip d2-p1 --steps $steps --clip $clip && same d2-p1-clip $ref-clip
		if [ "${OCTO_TEST_QUICK:-0}" != 1 ]; then
			compile plain "$yaml" --devices 4 --dp 2 && train plain plain --steps $steps &&
				close plain $ref
			compile plain-distopt "$yaml" --devices 4 --dp 2 --distributed-optimizer on &&
				train plain-distopt plain-distopt --steps $steps && same plain-distopt plain &&
				OCTO_COMM= train plain-distopt-mpi plain-distopt --steps $steps &&
				same plain-distopt-mpi plain
		fi
		# the checkpoint: saved at (2, 2) with the distributed optimizer
		# after step 1, step 2 on 1 rank (the reference's program)
		name=d2-p2-distopt
		if compile $name "$yaml" --devices 4 --dp 2 --distributed-optimizer on --deterministic &&
			{ [ "${OCTO_TEST_QUICK:-0}" = 1 ] ||
			  { train $name-clip $name --steps $steps --clip $clip && same $name-clip $ref-clip; }; } &&
			train $name $name --steps 1 --checkpoint "$tmp/ck" &&
			train resume $ref --steps 1 --resume "$tmp/ck"; then
			if [ "$(tail -1 "$tmp/$ref.losses" | awk '{print $2}')" = "$(awk '{print $2}' "$tmp/resume.losses")" ] &&
				cmp -s "$tmp/resume.hash" "$tmp/$ref.hash"; then
				ok "resume: 1 step at (2, 2) with the distributed optimizer, saved, 1 more on 1 rank: the reference's loss and hash"
			else
				bad "resume: the resumed run differs from the reference: $(cat "$tmp/resume.losses") $(cat "$tmp/resume.hash")"
			fi
		fi
		# MPI cannot stand in for NCCL's collectives on device ranks
		if [ "${OCTO_TEST_QUICK:-0}" = 1 ]; then
			: # the refusal is the normal pass's
		elif OCTO_COMM=mpi timeout 300 "$tmp/plain/launch" --steps 1 >"$tmp/mpi.log" 2>&1; then
			bad "OCTO_COMM=mpi with dp 2 on device ranks ran"
		elif grep -q "error: model: dp 2 on device ranks that talk through MPI (OCTO_COMM=mpi).*NCCL" "$tmp/mpi.log"; then
			ok "OCTO_COMM=mpi with dp 2 on device ranks: refused"
		else
			bad "OCTO_COMM=mpi with dp 2: $(grep -m1 error "$tmp/mpi.log" || tail -3 "$tmp/mpi.log")"
		fi
	else
		compile d2-p2-distopt-h "$yaml" --devices 4 --dp 2 --distributed-optimizer on --deterministic &&
			train d2-p2-distopt-h d2-p2-distopt-h --steps $steps && same d2-p2-distopt-h $ref &&
			train d2-p2-distopt-h-clip d2-p2-distopt-h --steps $steps --clip $clip &&
			same d2-p2-distopt-h-clip $ref-clip
		compile plain-h "$yaml" --devices 2 --dp 2 && train plain-h plain-h --steps $steps &&
			close plain-h $ref
	fi
done

echo "$pass passed, $fail failed"
[ $fail = 0 ]
