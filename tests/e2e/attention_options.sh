#!/usr/bin/env bash
# attention_options.sh OCTOPIPE SRCDIR [MODEL VARIANT]: layer options end
# to end on a model (default tests/e2e/tiny-qwen.yaml: rope_theta,
# qkv_bias, qk_norm, alone and together; tests/e2e/tiny-rope.yaml:
# rope_scaling's types; tests/e2e/tiny-qwen-moe.yaml: the moe's shared_gate;
# docs/yaml.md, docs/layers.md), on the bundled text:
#   - on 1 CPU rank the loss goes down;
#   - on 2, 3 and 4 CPU ranks under 1f1b, zbv, zbh2 and the tuner, every
#     step's loss and the final model hash are the 1-rank run's, bit for bit;
#   - a checkpoint taken on 2 ranks resumes on 3 ranks (another partition
#     and schedule) into the uninterrupted run's bits (the biases and the
#     per-head norm scales are saved and read back like every tensor);
#   - the CUDA target's programs through the host emulator give every
#     step's loss within 1e-5 of the CPU's, the same bits on 1 and 2 ranks;
#   - the option reaches the kernels: the model edited by VARIANT (a sed
#     script; by default the first layer's base back at 10000), whose other
#     parameters are the same (the options it changes take none, or, as the
#     shared gate, only the last tensor of their layer), starts from another
#     loss.  (Dropping a bias or a norm scale would move the later tensors of
#     the flat array, whose init follows the element index: another model.
#     unit_kernels shows those reach the output.)
# Exit 0 all hold, 1 a mismatch or a failure, 77 (skip) without mpirun.
set -u
octopipe=$1
src=$(cd "$2" && pwd)
steps=6
yaml=${3:-$src/tests/e2e/tiny-qwen.yaml}
variant=${4:-'0,/rope_theta: 1000000/s//rope_theta: 10000/'}
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

# Checkpoint after half the steps on 2 ranks, the rest on 3.
resume cpu-2-1f1b cpu-3-zbv cpu-1

# The device programs through the emulator: the CPU's losses to 1e-5.
if run emu-1 "$yaml" --target cuda-emu --devices 1; then
	near_cpu emu-1 cpu-1
	run emu-2-zbh1 "$yaml" --target cuda-emu --devices 2 --schedule zbh1 && same emu-2-zbh1 emu-1
fi

# The option the variant edits is not lost on the way from the YAML to the
# kernels.
sed -e 's#\.\./\.\./models/data#'"$src"'/models/data#' -e "$variant" "$yaml" >"$tmp/base.yaml"
for v in base; do
	if cmp -s "$tmp/$v.yaml" "$yaml"; then
		echo "FAIL: $v: the variant is the model itself"
		fail=1
	elif run "cpu-$v" "$tmp/$v.yaml" --devices 1 --schedule 1f1b; then
		if [ "$(first_loss "cpu-$v")" != "$(first_loss cpu-1)" ]; then
			echo "ok: $v: step 1's loss $(first_loss "cpu-$v"), not the model's $(first_loss cpu-1)"
		else
			echo "FAIL: $v: the same step-1 loss as the model: the option does not reach the kernels"
			fail=1
		fi
	fi
done

[ $fail = 0 ] && echo "attention options ($(basename "$yaml")): every check holds"
exit $fail
