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
if ! command -v mpirun >/dev/null 2>&1; then
	echo "SKIP: mpirun not found"
	exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 OCTO_COMM_TIMEOUT=${OCTO_COMM_TIMEOUT:-300}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
yaml=$src/tests/e2e/tiny-tied.yaml
fail=0

# run NAME YAML ARGS...: compile into $tmp/NAME and train $steps steps;
# leaves $tmp/NAME.losses ("STEP HEXLOSS" lines) and $tmp/NAME.hash.
run() {
	local name=$1 y=$2
	shift 2
	if ! "$octopipe" compile "$y" "$@" -o "$tmp/$name" >"$tmp/$name.compile" 2>&1; then
		echo "FAIL: $name: compile failed:"
		tail -8 "$tmp/$name.compile" | sed 's/^/    /'
		fail=1
		return 1
	fi
	if ! MPIRUN_EXTRA="-x OCTO_COMM" timeout 600 "$tmp/$name/launch" --steps $steps >"$tmp/$name.log" 2>&1; then
		echo "FAIL: $name: the job failed:"
		tail -15 "$tmp/$name.log" | sed 's/^/    /'
		fail=1
		return 1
	fi
	sed -n 's/^step \([0-9]*\) loss [^ ]* (\([^)]*\)).*/\1 \2/p' "$tmp/$name.log" >"$tmp/$name.losses"
	sed -n 's/^model hash \(0x[0-9a-f]*\) .*/\1/p' "$tmp/$name.log" >"$tmp/$name.hash"
	if [ "$(wc -l <"$tmp/$name.losses")" -ne $steps ] || [ ! -s "$tmp/$name.hash" ]; then
		echo "FAIL: $name: no $steps losses and a model hash in the output:"
		tail -15 "$tmp/$name.log" | sed 's/^/    /'
		fail=1
		return 1
	fi
}

# same NAME REF: identical losses and model hash, bit for bit.
same() {
	if cmp -s "$tmp/$1.losses" "$tmp/$2.losses" && cmp -s "$tmp/$1.hash" "$tmp/$2.hash"; then
		echo "ok: $1: losses and model hash identical to $2's ($(cat "$tmp/$1.hash"))"
	else
		echo "FAIL: $1: losses or model hash differ from $2's:"
		diff "$tmp/$2.losses" "$tmp/$1.losses" | sed 's/^/    /'
		echo "    hash $(cat "$tmp/$1.hash"), $2's $(cat "$tmp/$2.hash")"
		fail=1
	fi
}

# first_loss NAME: step 1's loss, as printed.
first_loss() {
	sed -n 's/^step 1 loss \([^ ]*\) .*/\1/p' "$tmp/$1.log"
}

if ! run cpu-1 "$yaml" --devices 1 --schedule 1f1b; then
	echo "FAIL: the 1-rank reference did not run"
	exit 1
fi
a=$(first_loss cpu-1)
b=$(sed -n "s/^step $steps loss \([^ ]*\) .*/\1/p" "$tmp/cpu-1.log")
if awk -v a="$a" -v b="$b" 'BEGIN { exit !(b < a - 0.3) }'; then
	echo "ok: the loss goes down on the bundled text ($a -> $b)"
else
	echo "FAIL: the loss does not go down ($a -> $b)"
	fail=1
fi

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
d4=$tmp/cpu-4-1f1b d2=$tmp/cpu-2-zbv
if [ -x "$d4/launch" ] && [ -x "$d2/launch" ]; then
	half=$((steps / 2))
	if timeout 600 "$d4/launch" --steps $half --checkpoint "$tmp/ck" >"$tmp/ck1.log" 2>&1 &&
	   timeout 600 "$d2/launch" --steps $((steps - half)) --resume "$tmp/ck" >"$tmp/ck2.log" 2>&1; then
		got=$( (sed -n 's/^step \([0-9]*\) loss [^ ]* (\([^)]*\)).*/\1 \2/p' "$tmp/ck1.log" "$tmp/ck2.log"))
		hash=$(sed -n 's/^model hash \(0x[0-9a-f]*\) .*/\1/p' "$tmp/ck2.log")
		if [ "$got" = "$(cat "$tmp/cpu-1.losses")" ] && [ "$hash" = "$(cat "$tmp/cpu-1.hash")" ]; then
			echo "ok: resume: a checkpoint of 4 ranks after step $half goes on on 2 ranks into 1 rank's bits"
		else
			echo "FAIL: resume on another plan: losses or hash differ from the uninterrupted run's:"
			diff "$tmp/cpu-1.losses" <(echo "$got") | sed 's/^/    /'
			fail=1
		fi
	else
		echo "FAIL: checkpoint/resume:"
		tail -5 "$tmp/ck1.log" "$tmp/ck2.log" | sed 's/^/    /'
		fail=1
	fi
fi

# The device programs through the emulator (no clipping on a device rank).
sed -e 's#\.\./\.\./models/data#'"$src"'/models/data#' -e '/^  clip:/d' "$yaml" >"$tmp/noclip.yaml"
run cpu-noclip "$tmp/noclip.yaml" --devices 1 --schedule 1f1b
if run emu-1 "$tmp/noclip.yaml" --target cuda-emu --devices 1; then
	worst=$(join "$tmp/emu-1.losses" "$tmp/cpu-noclip.losses" | while read -r s x y; do
		printf '%.17g %.17g\n' "$x" "$y"
	done | awk '{ e = ($1 - $2) / $2; if (e < 0) e = -e; if (e > w) w = e; n++ }
		END { printf "%.2e %s\n", w, (n > 0 && w <= 1e-5 ? "ok" : "FAIL") }')
	case $worst in
	*ok) echo "ok: emu-1: losses within ${worst% ok} of the CPU's (threshold 1e-5)" ;;
	*) echo "FAIL: emu-1: losses off the CPU's by ${worst% FAIL} (threshold 1e-5)"; fail=1 ;;
	esac
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
