#!/usr/bin/env bash
# e2e_cpu.sh OCTOPIPE [WORKDIR]: the end-to-end CPU benchmark (issue 7 §6).
#
# On 2 ranks, one per core, for bench/e2e_cpu.yaml (layers of deliberately
# unequal cost): first a profile measured by the rank programs' profiling
# mode (--profile), then the tuned plan, 1f1b and i1f1b (v=2) planned from
# that profile and compiled; each trains in turn, ROUNDS times round-robin
# (so drifts of the machine hit them alike), STEPS steps per run.  Prints
# the simulator's step time, the measured one (the median over rounds of
# each run's mean step after the first), measured/predicted, and the
# speedup of tuned over each baseline, predicted and measured.
set -eu
octopipe=$1
work=${2:-$(mktemp -d)}
here=$(cd "$(dirname "$0")" && pwd)
yaml=$here/e2e_cpu.yaml
rounds=${ROUNDS:-3}
steps=${STEPS:-12}
export OPENBLAS_NUM_THREADS=1
export MPIRUN_EXTRA="--bind-to core"
mkdir -p "$work"

# 1. The profile: any plan's programs measure every layer of the model.
"$octopipe" compile "$yaml" --schedule 1f1b -o "$work/profiler" >/dev/null
"$work/profiler/launch" --profile "$work/profile.yaml" >/dev/null
echo "profile: $work/profile.yaml (F, B, W of every layer, median of 5 runs)"

# 2. The plans, from the measured costs.
plans=(tuned 1f1b i1f1b)
declare -A predicted measured
for p in "${plans[@]}"; do
	extra=()
	[ $p = i1f1b ] && extra=(--chunks 2)
	"$octopipe" compile "$yaml" --profile "$work/profile.yaml" --schedule $p "${extra[@]}" \
		-o "$work/$p" >"$work/$p.compile"
	predicted[$p]=$(sed -n 's/^simulated step ([^)]*): makespan \([0-9.]*\) ms.*/\1/p' "$work/$p.compile")
	echo "$p: $(grep -m1 '^plan:' "$work/$p.compile" | sed 's/^plan: //'), predicted ${predicted[$p]} ms"
done

# 3. Train, round-robin.
for r in $(seq "$rounds"); do
	for p in "${plans[@]}"; do
		"$work/$p/launch" --steps "$steps" >"$work/$p.run$r" 2>&1
		sed -n 's/^summary: .* mean step \([0-9.]*\) ms.*/\1/p' "$work/$p.run$r" >>"$work/$p.times"
	done
done
for p in "${plans[@]}"; do
	measured[$p]=$(sort -n "$work/$p.times" | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
done

echo
echo "2 ranks, $(nproc) cores, $rounds rounds of $steps steps (median of the rounds' mean step after the first)"
printf '%-8s %14s %14s %18s\n' plan "predicted" "measured" "measured/predicted"
for p in "${plans[@]}"; do
	awk -v p=$p -v a="${predicted[$p]}" -v b="${measured[$p]}" \
		'BEGIN { printf "%-8s %11.2f ms %11.2f ms %18.3f\n", p, a, b, b / a }'
done
for p in 1f1b i1f1b; do
	awk -v p=$p -v pa="${predicted[$p]}" -v pt="${predicted[tuned]}" -v ma="${measured[$p]}" -v mt="${measured[tuned]}" \
		'BEGIN { printf "tuned over %-6s predicted %.3fx, measured %.3fx\n", p ":", pa / pt, ma / mt }'
done
