#!/usr/bin/env bash
# plan_independence.sh OCTOPIPE SRCDIR: the central end-to-end test (issue 7,
# docs/codegen.md).  For tiny-dense and tiny-hybrid, compile and train 4
# steps (three updates on AdamW state carried over, all in the final model
# hash) with 1 rank, with 2, 3 and 4 ranks under every schedule (1f1b,
# i1f1b, zbh1, zbh2, zbv, tuned) and under irregular placements (YAML plan
# sections: unequal stage counts per rank, non-adjacent stages on one rank,
# the embedding off rank 0); the loss of every step and the final model hash
# must be identical bit for bit to the 1-rank run, also when tiny-hybrid
# reads its text as a token file in two shards (docs/data.md).  A schedule that rejects
# a model/device count says why and is listed as skipped.  tiny-hybrid
# trains on models/data/corpus.txt: its loss must go down.
#
# OCTO_TEST_QUICK=1 (the sanitizer build) trains on 4 ranks only, under
# zbv (two chunks a rank, split backward) and the tuned schedule, and one
# irregular plan per model: the runtime's and codegen's paths (transfers,
# chunks, W apart from B, any placement) still run under the sanitizers,
# which is what they add to the full pass here; that every plan gives the
# same bits is the full pass's to show.
#
# Exit 0 all agree, 1 a mismatch or a failure, 77 (skip) without mpirun.
set -u
octopipe=$1
src=$2
steps=4
ranks="2 3 4" schedules="1f1b i1f1b zbh1 zbh2 zbv tuned"
[ "${OCTO_TEST_QUICK:-0}" = 1 ] && ranks=4 schedules="zbv tuned"
. "$(dirname "${BASH_SOURCE[0]}")/env.sh" # skips without mpirun; $tmp, removed at exit

fail=0 runs=0 skipped=0
declare -A ref_losses ref_hash

# The irregular plans: name|model|devices|stage_layers|placement.
# dense has 10 layers, hybrid 12.
irregular=(
	"dense-3-irregular|dense|3|2, 2, 1, 3, 2|0, 1, 0, 2, 1"
	"dense-4-irregular|dense|4|1, 3, 2, 1, 1, 2|2, 0, 2, 1, 3, 0"
	"hybrid-3-irregular|hybrid|3|2, 3, 1, 4, 2|0, 1, 0, 2, 1"
	"hybrid-4-irregular|hybrid|4|1, 2, 2, 3, 1, 2, 1|3, 1, 0, 3, 2, 1, 0"
)

# compile NAME ARGS...: compile into $tmp/NAME; prints why on failure.
compile() {
	local name=$1
	shift
	if ! "$octopipe" compile "$@" -o "$tmp/$name" >"$tmp/$name.compile" 2>&1; then
		return 1
	fi
}

# compile_or_skip NAME ARGS...: compile, or say why the planner or codegen
# refused (a skip: a schedule that does not take this model, device count or
# placement) -- or fail when it did without a diagnostic.
compile_or_skip() {
	local name=$1
	compile "$@" && return 0
	local why
	why=$(grep -m1 'error:' "$tmp/$name.compile")
	if [ -z "$why" ]; then
		echo "FAIL: $name: compile failed without a diagnostic:"
		tail -5 "$tmp/$name.compile" | sed 's/^/    /'
		fail=1
	else
		echo "skip: $name: refused: ${why#*error: }"
		skipped=$((skipped + 1))
	fi
	return 1
}

# train NAME [ARGS...]: run the compiled job (with ARGS: as the run
# NAME-tokens); leaves "STEP HEXLOSS" lines and the hash.
train() {
	local prog=$1 name=$1${2:+-tokens}
	shift
	if ! timeout 900 "$tmp/$prog/launch" --steps $steps "$@" >"$tmp/$name.log" 2>&1; then
		echo "FAIL: $name: the job failed:"
		tail -15 "$tmp/$name.log" | sed 's/^/    /'
		return 1
	fi
	sed -n 's/^step \([0-9]*\) loss [^ ]* (\([^)]*\)).*/\1 \2/p' "$tmp/$name.log" >"$tmp/$name.losses"
	sed -n 's/^model hash \(0x[0-9a-f]*\) .*/\1/p' "$tmp/$name.log" >"$tmp/$name.hash"
	if [ "$(wc -l <"$tmp/$name.losses")" -ne $steps ] || [ ! -s "$tmp/$name.hash" ]; then
		echo "FAIL: $name: no $steps losses and a model hash in the output:"
		tail -15 "$tmp/$name.log" | sed 's/^/    /'
		return 1
	fi
}

# check MODEL NAME: the run against the model's 1-rank reference.
check() {
	local model=$1 name=$2
	runs=$((runs + 1))
	if [ "$(cat "$tmp/$name.losses")" != "${ref_losses[$model]}" ]; then
		echo "FAIL: $name: the losses differ from 1 rank's:"
		diff <(echo "${ref_losses[$model]}") "$tmp/$name.losses" | sed 's/^/    /'
		fail=1
	elif [ "$(cat "$tmp/$name.hash")" != "${ref_hash[$model]}" ]; then
		echo "FAIL: $name: model hash $(cat "$tmp/$name.hash"), 1 rank's ${ref_hash[$model]}"
		fail=1
	else
		echo "ok: $name ($(grep -m1 '^plan:' "$tmp/${name%-tokens}.compile" | sed 's/^plan: //'))"
	fi
}

for model in dense hybrid; do
	yaml=$src/models/tiny-$model.yaml
	name=$model-1
	if ! compile "$name" "$yaml" --devices 1 --schedule 1f1b || ! train "$name"; then
		echo "FAIL: $name: the 1-rank reference did not run"
		cat "$tmp/$name.compile" | tail -5
		fail=1
		continue
	fi
	ref_losses[$model]=$(cat "$tmp/$name.losses")
	ref_hash[$model]=$(cat "$tmp/$name.hash")
	echo "reference: $model on 1 rank: losses $(awk '{printf "%s ", $2}' "$tmp/$name.losses")hash ${ref_hash[$model]}"
	if [ $model = hybrid ]; then
		first=$(grep '^step' "$tmp/$name.log" | head -1 | awk '{print $4}')
		last=$(grep '^step' "$tmp/$name.log" | tail -1 | awk '{print $4}')
		if awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.05) }'; then
			echo "ok: $model: the loss goes down on the bundled text ($first -> $last)"
		else
			echo "FAIL: $model: the loss does not go down ($first -> $last)"
			fail=1
		fi
	fi

	for p in $ranks; do
		for sched in $schedules; do
			name=$model-$p-$sched
			extra=()
			[ $sched = i1f1b ] && extra=(--chunks 2)
			compile_or_skip "$name" "$yaml" --devices $p --schedule $sched "${extra[@]}" || continue
			train "$name" && check $model "$name" || fail=1
		done
	done
done

for spec in "${irregular[@]}"; do
	IFS='|' read -r base model p layers place <<<"$spec"
	[ "${OCTO_TEST_QUICK:-0}" = 1 ] && [ "$p" != 4 ] && continue
	[ -n "${ref_hash[$model]:-}" ] || continue
	yaml=$tmp/$base.yaml
	sed -e "s#data/corpus.txt#$src/models/data/corpus.txt#" "$src/models/tiny-$model.yaml" >"$yaml"
	printf 'plan:\n  partition: given\n  stage_layers: [%s]\n  placement: [%s]\n' "$layers" "$place" >>"$yaml"
	# Only the tuner and gpipe take any placement.
	for sched in tuned gpipe; do
		name=$base-$sched
		compile_or_skip "$name" "$yaml" --devices "$p" --schedule $sched || continue
		train "$name" && check $model "$name" || fail=1
	done
done

# A token file (docs/data.md): the bundled text through `octopipe tokenize`,
# cut into two shards at an odd token, is the same stream: tiny-hybrid's
# 1-rank bits on the plans of each kind above that ran.
if [ -n "${ref_hash[hybrid]:-}" ] &&
	"$octopipe" tokenize "$src/models/data/corpus.txt" -o "$tmp/corpus.bin" >/dev/null; then
	head -c 30002 "$tmp/corpus.bin" >"$tmp/a.bin"
	tail -c +30003 "$tmp/corpus.bin" >"$tmp/b.bin"
	for name in hybrid-1 hybrid-4-zbv hybrid-4-irregular-tuned; do
		[ -x "$tmp/$name/launch" ] || continue
		train "$name" --data "$tmp/a.bin,$tmp/b.bin" && check hybrid "$name-tokens" || fail=1
	done
fi

echo "$runs plans agree bit for bit with 1 rank, $skipped refused with a diagnostic (skipped), $([ $fail = 0 ] && echo "no" || echo "some") failures"
exit $fail
