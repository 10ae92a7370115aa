#!/usr/bin/env bash
# dp_cpu.sh OCTOPIPE [WORKDIR]: data parallelism measured on this machine
# against the simulator (docs/dataparallel.md).
#
# tiny-hybrid with a profile measured here ('octopipe profile'), compiled at
# (D, P) = (2, 1) -- two ranks, one per core -- and (2, 2) -- four ranks, on
# however many cores there are -- plain, with the distributed optimizer and
# with --deterministic, and at (1, 1) plain and deterministic; each trained
# STEPS steps with traces.  Prints one row per run: the simulator's step and
# exposed reduction (the most of any device: the time compute waits for a
# collective) and update time, against the measured ones (the mean over the
# steps after the first; per rank, the time in the waits of collectives and
# in the bucket updates, from the traces; the most of any rank), and the
# measured mean step.  The deterministic rows against the plain ones are
# what exact sums cost.  Not a test: no target, the numbers are the output.
set -eu
octopipe=$1
work=${2:-$(mktemp -d)}
root=$(cd "$(dirname "$0")/.." && pwd)
steps=${STEPS:-12}
export OPENBLAS_NUM_THREADS=1
mkdir -p "$work"
yaml=$root/models/tiny-hybrid.yaml
"$octopipe" profile "$yaml" -o "$work/prof.yaml" >/dev/null

# trace_ms DIR NAME: per rank, the mean over the steps after the first of
# the summed durations of the trace events called NAME (ms); the most of
# any rank.
trace_ms() {
	local best=0 f v
	for f in "$1"/trace/trace-rank*.json; do
		v=$(grep "\"name\":\"$2" "$f" | sed -n 's/.*"dur":\([0-9.]*\).*"step":\([0-9]*\).*/\2 \1/p' |
			awk -v s="$steps" '$1 > 0 { t += $2 } END { printf "%.3f", t / (s - 1) / 1000 }')
		best=$(awk -v a="$best" -v b="$v" 'BEGIN { print (b > a ? b : a) }')
	done
	echo "$best"
}

rows=()
for spec in "1 1 plain" "1 1 det" "2 1 plain" "2 1 distopt" "2 1 det" "2 2 plain" "2 2 distopt" "2 2 det"; do
	read -r D P mode <<<"$spec"
	name=d$D-p$P-$mode
	dir=$work/$name
	args=(--devices $((D * P)) --profile "$work/prof.yaml")
	[ "$D" -gt 1 ] && args+=(--dp "$D")
	[ "$mode" = distopt ] && args+=(--distributed-optimizer on)
	[ "$mode" = det ] && args+=(--deterministic)
	"$octopipe" compile "$yaml" "${args[@]}" -o "$dir" >"$dir.compile"
	"$dir/launch" --steps "$steps" --trace "$dir/trace" >"$dir.run" 2>&1
	json=$("$octopipe" sim "$dir/plan.opir" --json)
	field() { printf '%s' "$json" | sed -n "s/.*\"$1\": \([0-9.e+-]*\).*/\1/p"; }
	pstep=$(awk -v v="$(field makespan_s)" 'BEGIN { printf "%.3f", v * 1000 }')
	pexp=$(awk -v v="$(field exposed_reduction_s)" 'BEGIN { printf "%.3f", (v == "" ? 0 : v) * 1000 }')
	pupd=$(awk -v v="$(field update_s)" 'BEGIN { printf "%.3f", (v == "" ? 0 : v) * 1000 }')
	mexp=$(trace_ms "$dir" 'wait"')
	mupd=$(trace_ms "$dir" 'optim L')
	mstep=$(sed -n 's/^summary: .*mean step \([0-9.]*\) ms.*/\1/p' "$dir.run")
	rows+=("$name $pstep $mstep $pexp $mexp $pupd $mupd")
done

echo "tiny-hybrid, $steps steps each (means over the steps after the first), $(nproc) cores; work: $work"
echo "(ranks beyond the cores share them: the (2, 2) rows run 4 ranks; the prediction assumes a core each)"
printf '%-16s %10s %10s %12s %12s %11s %11s\n' run "step pred" "step meas" "exp.red pred" "exp.red meas" \
	"update pred" "update meas"
for r in "${rows[@]}"; do
	read -r n a b c d e f <<<"$r"
	printf '%-16s %8s ms %8s ms %9s ms %9s ms %8s ms %8s ms\n' "$n" "$a" "$b" "$c" "$d" "$e" "$f"
done
