#!/usr/bin/env bash
# parallel.sh OCTOPIPE SRCDIR: parallel layers (attention and a Mamba-2
# mixer on one norm; docs/yaml.md, docs/layers.md "parallel") end to end,
# on tests/e2e/tiny-falcon.yaml (three parallel blocks, one with a window
# and per-head q/k norms, on the bundled text):
#   - on 1 CPU rank the loss goes down;
#   - on 2, 3 and 4 CPU ranks under 1f1b, zbv, zbh2 and the tuner, and on
#     2 ranks with selective recomputation (the mixers' chunk states made
#     again in B), every step's loss and the final model hash are the
#     1-rank run's, bit for bit;
#   - a checkpoint taken on 2 ranks resumes on 3 ranks (another partition
#     and schedule) into the uninterrupted run's bits;
#   - the CUDA target's programs through the host emulator give every
#     step's loss within 1e-5 of the CPU's, the same bits on 1 and 2 ranks
#     (2 also with selective recomputation).
# Exit 0 all hold, 1 a mismatch or a failure, 77 (skip) without mpirun.
set -u
octopipe=$1
src=$(cd "$2" && pwd)
steps=6
yaml=$src/tests/e2e/tiny-falcon.yaml
. "$src/tests/e2e/lib.sh"

if ! run cpu-1 "$yaml" --devices 1 --schedule 1f1b; then
	echo "FAIL: the 1-rank reference did not run"
	exit 1
fi
loss_goes_down cpu-1

for plan in "2 1f1b" "3 zbv" "4 zbh2" "4 tuned"; do
	set -- $plan
	extra=()
	[ "$2" = zbv ] && extra=(--chunks 2)
	run "cpu-$1-$2" "$yaml" --devices "$1" --schedule "$2" "${extra[@]}" && same "cpu-$1-$2" cpu-1
done
run cpu-2-selective "$yaml" --devices 2 --schedule 1f1b --recompute selective &&
	same cpu-2-selective cpu-1

# Checkpoint after half the steps on 2 ranks, the rest on 3.
resume cpu-2-1f1b cpu-3-zbv cpu-1

# The device programs through the emulator: the CPU's losses to 1e-5.
if run emu-1 "$yaml" --target cuda-emu --devices 1; then
	near_cpu emu-1 cpu-1
	run emu-2 "$yaml" --target cuda-emu --devices 2 --schedule 1f1b && same emu-2 emu-1
	run emu-2-selective "$yaml" --target cuda-emu --devices 2 --schedule 1f1b \
		--recompute selective && same emu-2-selective emu-1
fi

[ $fail = 0 ] && echo "parallel layers: every check holds"
exit $fail
