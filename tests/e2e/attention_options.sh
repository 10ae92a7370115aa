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
if ! command -v mpirun >/dev/null 2>&1; then
	echo "SKIP: mpirun not found"
	exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 OCTO_COMM_TIMEOUT=${OCTO_COMM_TIMEOUT:-300}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
yaml=${3:-$src/tests/e2e/tiny-qwen.yaml}
variant=${4:-'0,/rope_theta: 1000000/s//rope_theta: 10000/'}
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

for plan in "2 1f1b" "3 zbv" "4 zbh2" "4 tuned"; do
	set -- $plan
	extra=()
	[ "$2" = zbv ] && extra=(--chunks 2)
	run "cpu-$1-$2" "$yaml" --devices "$1" --schedule "$2" "${extra[@]}" && same "cpu-$1-$2" cpu-1
done

# Checkpoint after step 3 on 2 ranks, the rest on 3 ranks.
d2=$tmp/cpu-2-1f1b d3=$tmp/cpu-3-zbv
if [ -x "$d2/launch" ] && [ -x "$d3/launch" ]; then
	half=$((steps / 2))
	if timeout 600 "$d2/launch" --steps $half --checkpoint "$tmp/ck" >"$tmp/ck1.log" 2>&1 &&
	   timeout 600 "$d3/launch" --steps $((steps - half)) --resume "$tmp/ck" >"$tmp/ck2.log" 2>&1; then
		got=$( (sed -n 's/^step \([0-9]*\) loss [^ ]* (\([^)]*\)).*/\1 \2/p' "$tmp/ck1.log" "$tmp/ck2.log"))
		hash=$(sed -n 's/^model hash \(0x[0-9a-f]*\) .*/\1/p' "$tmp/ck2.log")
		if [ "$got" = "$(cat "$tmp/cpu-1.losses")" ] && [ "$hash" = "$(cat "$tmp/cpu-1.hash")" ]; then
			echo "ok: resume: a checkpoint of 2 ranks after step $half goes on on 3 ranks into 1 rank's bits"
		else
			echo "FAIL: resume on another plan: losses or hash differ from the uninterrupted run's:"
			diff "$tmp/cpu-1.losses" <(echo "$got") | sed 's/^/    /'
			echo "    hash $hash, uninterrupted $(cat "$tmp/cpu-1.hash")"
			fail=1
		fi
	else
		echo "FAIL: checkpoint/resume:"
		tail -5 "$tmp/ck1.log" "$tmp/ck2.log" | sed 's/^/    /'
		fail=1
	fi
fi

# The device programs through the emulator: the CPU's losses to 1e-5.
if run emu-1 "$yaml" --target cuda-emu --devices 1; then
	worst=$(join "$tmp/emu-1.losses" "$tmp/cpu-1.losses" | while read -r s x y; do
		printf '%.17g %.17g\n' "$x" "$y"
	done | awk '{ e = ($1 - $2) / $2; if (e < 0) e = -e; if (e > w) w = e; n++ }
		END { printf "%.2e %s\n", w, (n > 0 && w <= 1e-5 ? "ok" : "FAIL") }')
	case $worst in
	*ok) echo "ok: emu-1: losses within ${worst% ok} of the CPU's (threshold 1e-5)" ;;
	*) echo "FAIL: emu-1: losses off the CPU's by ${worst% FAIL} (threshold 1e-5)"; fail=1 ;;
	esac
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
