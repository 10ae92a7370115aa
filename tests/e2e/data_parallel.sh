#!/usr/bin/env bash
# data_parallel.sh OCTOPIPE SRCDIR: data parallelism end to end
# (docs/dataparallel.md).  For tiny-dense and tiny-hybrid, compile and train
# with --deterministic on 1 rank (the reference) and at (D, P) = (2, 1),
# (4, 1), (1, 4), (2, 2) -- D replicas of a P-rank pipeline; tiny-dense at
# (4, 1) and (2, 2) only --, with and without the distributed optimizer,
# and under both rank orders: every step's loss and the final model hash
# must be the reference's bit for bit.  The distributed optimizer's runs
# overlap each all-gather with the next step (overlap_param_gather, on by
# default: the plan carries the waits); at (2, 2) each model also runs
# with --no-overlap-param-gather, which must give the same bits.
# Then: without --deterministic, D = 2 against 1 rank (the same first loss;
# the later ones within the bound docs/dataparallel.md states); resume
# across (D, P) (save at (2, 2) with the distributed optimizer after 3
# steps, its all-gathers overlapped; resume at (1, 4) and at (4, 1) without
# it, and at (2, 2) with it, overlapped again: the losses of an
# uninterrupted deterministic run); one summary line (replica 0's head);
# `octopipe report` on a traced run; a rank SIGKILLed in a DP group ends the
# job non-zero, naming a rank.
#
# OCTO_TEST_QUICK=1 (the sanitizer build): tiny-hybrid only, (2, 2) with
# the distributed optimizer against 1 rank, and the resume.
#
# Prints "N passed, M failed"; exit 0 all agree, 1 otherwise, 77 (skip)
# without mpirun.
set -u
octopipe=$1
src=$2
steps=4
. "$(dirname "${BASH_SOURCE[0]}")/env.sh" # skips without mpirun; $tmp, removed at exit
quick=${OCTO_TEST_QUICK:-0}
pass=0 fail=0

ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# compile NAME ARGS...: into $tmp/NAME; false (with the reason) on failure.
compile() {
	local name=$1
	shift
	if ! "$octopipe" compile "$@" -o "$tmp/$name" >"$tmp/$name.compile" 2>&1; then
		bad "$name: compile failed: $(grep -m1 'error:' "$tmp/$name.compile" || tail -3 "$tmp/$name.compile")"
		return 1
	fi
}

# train NAME [ARGS...]: run the job; "STEP HEXLOSS" lines in NAME.losses,
# the model hash in NAME.hash.
train() {
	local name=$1
	shift
	if ! timeout 900 "$tmp/$name/launch" "$@" >"$tmp/$name.log" 2>&1; then
		bad "$name: the job failed: $(grep -m1 'error' "$tmp/$name.log" || tail -3 "$tmp/$name.log")"
		return 1
	fi
	sed -n 's/^step \([0-9]*\) loss [^ ]* (\([^)]*\)).*/\1 \2/p' "$tmp/$name.log" >"$tmp/$name.losses"
	sed -n 's/^model hash \(0x[0-9a-f]*\) .*/\1/p' "$tmp/$name.log" >"$tmp/$name.hash"
	if [ ! -s "$tmp/$name.losses" ] || [ ! -s "$tmp/$name.hash" ]; then
		bad "$name: no losses and model hash in the output: $(tail -3 "$tmp/$name.log")"
		return 1
	fi
}

# same NAME REF: losses and hash bit for bit.
same() {
	local name=$1 ref=$2
	if ! cmp -s "$tmp/$name.losses" "$tmp/$ref.losses"; then
		bad "$name: losses differ from $ref's:"
		diff "$tmp/$ref.losses" "$tmp/$name.losses" | sed 's/^/    /'
	elif ! cmp -s "$tmp/$name.hash" "$tmp/$ref.hash"; then
		bad "$name: model hash $(cat "$tmp/$name.hash"), $ref's $(cat "$tmp/$ref.hash")"
	else
		ok "$name: the losses and model hash of $ref, bit for bit"
	fi
}

models="dense hybrid"
[ "$quick" = 1 ] && models=hybrid
for model in $models; do
	# tiny-dense's (D, P) grid is the runtime's rt_dp scenario too: here
	# the shapes that differ most, (4, 1) and (2, 2); every shape for
	# tiny-hybrid (every layer kind).
	configs="2:1 4:1 1:4 2:2"
	[ "$model" = dense ] && configs="4:1 2:2"
	[ "$quick" = 1 ] && configs=2:2
	yaml=$src/models/tiny-$model.yaml
	ref=$model-ref
	compile $ref "$yaml" --devices 1 --deterministic && train $ref --steps $steps || continue
	echo "reference: $model, 1 rank, deterministic: $(awk '{printf "%s ", $2}' "$tmp/$ref.losses")"
	for c in $configs; do
		D=${c%:*} P=${c#*:}
		for opt in "" distopt; do
			[ "$D" = 1 ] && [ -n "$opt" ] && continue
			[ "$quick" = 1 ] && [ -z "$opt" ] && continue
			name=$model-d$D-p$P${opt:+-distopt}
			args=(--devices $((D * P)) --deterministic)
			[ "$D" -gt 1 ] && args+=(--dp "$D")
			[ -n "$opt" ] && args+=(--distributed-optimizer on)
			compile "$name" "$yaml" "${args[@]}" && train "$name" --steps $steps && same "$name" $ref
		done
	done
	# The overlapped all-gather: the plan carries its waits, and without
	# the overlap the bits are the same.
	name=$model-d2-p2-distopt
	if [ -f "$tmp/$name/plan.opir" ]; then
		if grep -q '^  wait all-gather S[0-9]* b[0-9]* carried$' "$tmp/$name/plan.opir"; then
			ok "$name: the plan carries its all-gathers' waits into the next step"
		else
			bad "$name: no carried all-gather wait in the plan (overlap_param_gather is on by default)"
		fi
	fi
	if [ "$quick" != 1 ]; then
		name=$model-d2-p2-nooverlap
		compile $name "$yaml" --devices 4 --dp 2 --distributed-optimizer on --no-overlap-param-gather \
			--deterministic && train $name --steps $steps && same $name $ref
	fi
	if [ "$quick" != 1 ]; then
		name=$model-d2-p2-dpinner
		compile $name "$yaml" --devices 4 --dp 2 --rank-order dp-inner --deterministic &&
			train $name --steps $steps && same $name $ref
		# dp-inner: rank 3 = pipeline device 1 x 2 + replica 1; its --help says so.
		if "$tmp/$name/rank3" --help 2>&1 | grep -q '^rank3: rank 3 of 4 ' &&
			"$tmp/$name/rank3" --help 2>&1 | grep -q 'runs pipeline device D1 of replica 1$'; then
			ok "$name: rank3 --help names its place: pipeline device D1 of replica 1, rank 3 of 4"
		else
			bad "$name: rank3 --help: $("$tmp/$name/rank3" --help 2>&1 | head -3)"
		fi
	fi
done

# Without --deterministic: MPI's sum of two replicas' gradients is one
# addition (commutative, so exact whatever the order); the difference from
# 1 rank is the rounding of a sum taken in another association.
if [ "$quick" != 1 ]; then
	compile plain-1 "$src/models/tiny-hybrid.yaml" --devices 1 && train plain-1 --steps $steps &&
	compile plain-d2 "$src/models/tiny-hybrid.yaml" --devices 2 --dp 2 && train plain-d2 --steps $steps &&
	if [ "$(head -1 "$tmp/plain-1.losses")" != "$(head -1 "$tmp/plain-d2.losses")" ]; then
		bad "plain-d2: step 1's loss differs from 1 rank's (the same weights and tokens)"
	else
		# The losses as printed in hex, to 17 digits (bash's printf reads hex floats).
		dec() { while read -r _ h; do printf '%.17g\n' "$h"; done <"$1"; }
		worst=$(paste <(dec "$tmp/plain-1.losses") <(dec "$tmp/plain-d2.losses") |
			awk '{d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > w) w = r} END {printf "%.3g", w}')
		if awk -v w="$worst" 'BEGIN { exit !(w <= 1e-5) }'; then
			ok "plain-d2: losses within ${worst} (relative) of 1 rank's, bound 1e-5"
		else
			bad "plain-d2: losses differ from 1 rank's by ${worst} (relative), above the bound 1e-5"
		fi
	fi
fi

# One summary, from replica 0's head (the other replicas' heads hold no loss),
# and `octopipe report` on a data-parallel run's traces.
log=$tmp/hybrid-d2-p2-distopt.log
if [ -f "$log" ]; then
	n=$(grep -c '^summary:' "$log")
	if [ "$n" = 1 ] && ! grep -q '^summary:.*final loss 0\.000000' "$log"; then
		ok "hybrid-d2-p2-distopt: one summary line, with the loss"
	else
		bad "hybrid-d2-p2-distopt: $n summary lines: $(grep '^summary:' "$log" | cut -c1-100)"
	fi
	dir=$tmp/hybrid-d2-p2-distopt
	if timeout 900 "$dir/launch" --steps 3 --trace "$dir/trace" >"$tmp/traced.log" 2>&1 &&
		"$octopipe" report "$dir" >"$tmp/report.txt" 2>&1 &&
		grep -q '^D1 exposed reduction' "$tmp/report.txt" && grep -q '^D0 updates' "$tmp/report.txt"; then
		ok "report: a data-parallel run against its plan, with each device's exposed reduction and updates"
	else
		bad "report on a data-parallel run: $(head -3 "$tmp/report.txt" 2>/dev/null)"
	fi
fi

# Resume across (D, P) and the distributed optimizer.
yaml=$src/models/tiny-hybrid.yaml
if compile full "$yaml" --devices 1 --deterministic && train full --steps 6 &&
	compile save "$yaml" --devices 4 --dp 2 --distributed-optimizer on --deterministic &&
	train save --steps 3 --checkpoint "$tmp/ck"; then
	for c in 1:4 4:1 2:2; do
		D=${c%:*} P=${c#*:}
		name=resume-d$D-p$P
		args=(--devices $((D * P)) --deterministic)
		[ "$D" -gt 1 ] && args+=(--dp "$D")
		[ "$c" = 2:2 ] && args+=(--distributed-optimizer on)
		[ "$quick" = 1 ] && [ "$D" = 4 ] && continue
		compile $name "$yaml" "${args[@]}" && train $name --steps 3 --resume "$tmp/ck" || continue
		if [ "$(tail -3 "$tmp/full.losses" | awk '{print $2}')" = "$(awk '{print $2}' "$tmp/$name.losses")" ] &&
			cmp -s "$tmp/$name.hash" "$tmp/full.hash"; then
			over=$(grep -c '^  wait all-gather .* carried$' "$tmp/$name/plan.opir")
			if [ "$c" = 2:2 ] && [ "$over" = 0 ]; then
				bad "$name: resumed without the overlapped all-gather (no carried wait in its plan)"
			else
				ok "$name: 3 steps at (2, 2) with the distributed optimizer (gathers overlapped), saved, 3 more here ($over carried waits): the 6-step run's losses and hash"
			fi
		else
			bad "$name: the resumed run differs from the uninterrupted one"
			diff <(tail -3 "$tmp/full.losses" | awk '{print $2}') <(awk '{print $2}' "$tmp/$name.losses") | sed 's/^/    /'
		fi
	done
fi

# A rank killed in a DP group ends the job, naming a rank.
if [ "$quick" != 1 ] && compile kill "$yaml" --devices 4 --dp 2; then
	OCTO_COMM_TIMEOUT=60 timeout 300 "$tmp/kill/launch" --steps 100000 >"$tmp/kill.log" 2>&1 &
	job=$!
	victim=""
	# This job's rank 3 only (other tests may run rank programs named rank3).
	exe=$(realpath "$tmp/kill/rank3")
	for _ in $(seq 1 600); do
		victim=""
		for p in $(pgrep -x rank3); do
			[ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$exe" ] && victim=$p && break
		done
		[ -n "$victim" ] && grep -q '^step 2 ' "$tmp/kill.log" && break
		sleep 0.1
	done
	[ -n "$victim" ] && kill -9 "$victim"
	wait $job
	rc=$?
	if [ -z "$victim" ]; then
		bad "kill: rank 3 was not found running"
	elif [ $rc = 0 ] || [ $rc = 124 ]; then
		bad "kill: the job ended with status $rc after rank 3 was killed"
	elif grep -qiE 'rank [0-9]|process rank' "$tmp/kill.log"; then
		ok "kill: SIGKILL of rank 3 (replica 1) ends the job with status $rc: $(grep -m1 -iE 'rank [0-9]|process rank' "$tmp/kill.log" | cut -c1-120)"
	else
		bad "kill: the job ended ($rc) but no message names a rank: $(tail -3 "$tmp/kill.log")"
	fi
fi

echo "$pass passed, $fail failed"
[ $fail = 0 ]
