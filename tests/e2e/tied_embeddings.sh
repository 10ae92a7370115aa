#!/usr/bin/env bash
# tied_embeddings.sh OCTOPIPE SRCDIR: a tied embedding and LM head
# (tie_embeddings; docs/yaml.md, docs/layers.md, docs/ir.md "Tied
# embeddings") end to end, on tests/e2e/tiny-tied.yaml (with clipping, whose
# norm counts the tied table once):
#   - on 1 CPU rank (both copies on one rank: the runtime sums them) the loss
#     goes down;
#   - the same bits, every step's loss and the final model hash, on 4 ranks
#     under 1f1b (the copies on D0 and D3: the programs' tie ops), 2 under
#     zbv (both on D0), 3 under the tuner;
#   - deterministic data parallelism: D = 2 over pipelines of 1 and 2
#     devices (the tie, then the DP group's reduction) is D = 1's bits;
#   - a checkpoint of 4 ranks resumes on 2 into the uninterrupted bits;
#   - the CUDA target through the host emulator: 1 and 2 ranks the same
#     bits, within 1e-5 of the CPU's losses;
#   - the tie reaches the kernels: the untied model starts from another loss
#     and has more parameters (vocab x hidden).
# Exit 0 all hold, 1 a mismatch or a failure, 77 (skip) without mpirun.
set -u
octopipe=$1
src=$(cd "$2" && pwd)
steps=6
yaml=$src/tests/e2e/tiny-tied.yaml
. "$src/tests/e2e/lib.sh"

if ! run cpu-1 "$yaml" --devices 1 --schedule 1f1b; then
	echo "FAIL: the 1-rank reference did not run"
	exit 1
fi
loss_goes_down cpu-1

for plan in "4 1f1b" "2 zbv" "3 tuned"; do
	set -- $plan
	run "cpu-$1-$2" "$yaml" --devices "$1" --schedule "$2" && same "cpu-$1-$2" cpu-1
done
if grep -q "tie S0 L0 D3" <("$octopipe" plan "$yaml" --devices 4 --dp 1 --schedule 1f1b --print-ir-after=comm 2>&1) &&
   ! grep -q "tie S" <("$octopipe" plan "$yaml" --devices 2 --dp 1 --schedule zbv --print-ir-after=comm 2>&1); then
	echo "ok: 1f1b on 4 sums the copies with tie ops (D0 and D3); zbv on 2 holds both on D0, without"
else
	echo "FAIL: the tie ops are not where the plans put the copies"
	fail=1
fi

run det-1 "$yaml" --devices 1 --dp 1 --deterministic --schedule 1f1b
for plan in "2 1" "4 2"; do
	set -- $plan
	run "det-$1" "$yaml" --devices "$1" --dp 2 --deterministic --schedule 1f1b && same "det-$1" det-1
done

# Checkpoint after half the steps on 4 ranks (tie ops), the rest on 2 (zbv: none).
resume cpu-4-1f1b cpu-2-zbv cpu-1

# The device programs through the emulator (no clipping on a device rank).
sed -e 's#\.\./\.\./models/data#'"$src"'/models/data#' -e '/^  clip:/d' "$yaml" >"$tmp/noclip.yaml"
run cpu-noclip "$tmp/noclip.yaml" --devices 1 --schedule 1f1b
if run emu-1 "$tmp/noclip.yaml" --target cuda-emu --devices 1; then
	near_cpu emu-1 cpu-noclip
	run emu-2 "$tmp/noclip.yaml" --target cuda-emu --devices 2 --schedule 1f1b && same emu-2 emu-1
fi

# The tie reaches the kernels and the count.
sed -e 's#\.\./\.\./models/data#'"$src"'/models/data#' -e '/tie_embeddings: true/d' "$yaml" >"$tmp/untied.yaml"
if run cpu-untied "$tmp/untied.yaml" --devices 1 --schedule 1f1b; then
	if [ "$(first_loss cpu-untied)" != "$(first_loss cpu-1)" ]; then
		echo "ok: untied: step 1's loss $(first_loss cpu-untied), not the tied model's $(first_loss cpu-1)"
	else
		echo "FAIL: untied: the same step-1 loss as the tied model"
		fail=1
	fi
fi
pt=$("$octopipe" plan "$yaml" --devices 1 --dp 1 --schedule 1f1b 2>&1 | sed -n 's/^parameters: \([0-9]*\).*/\1/p')
pu=$("$octopipe" plan "$tmp/untied.yaml" --devices 1 --dp 1 --schedule 1f1b 2>&1 | sed -n 's/^parameters: \([0-9]*\).*/\1/p')
if [ -n "$pt" ] && [ -n "$pu" ] && [ $((pu - pt)) -eq $((256 * 32)) ]; then
	echo "ok: parameters: $pt tied, $pu untied (the table counted once)"
else
	echo "FAIL: parameters: tied '$pt', untied '$pu': not vocab x hidden apart"
	fail=1
fi

[ $fail = 0 ] && echo "tied embeddings: every check holds"
exit $fail
