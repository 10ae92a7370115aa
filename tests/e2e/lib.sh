# lib.sh: what the e2e scripts that train a model on several plans share.
# Sourced after the script sets `octopipe`, `src` (the repository), `steps`
# and `yaml`; it skips (exit 77) without mpirun, makes $tmp (removed at
# exit), sets fail=0, and defines:
#   run NAME YAML ARGS...     compile into $tmp/NAME, train $steps steps;
#                             $tmp/NAME.losses ("STEP HEXLOSS") and .hash
#   same NAME REF             the same losses and model hash, bit for bit
#   first_loss NAME           step 1's loss, as printed
#   loss_goes_down NAME       the last step's loss at least 0.3 below the first
#   resume A B REF            A trains half the steps and saves, B resumes the
#                             rest: REF's losses and model hash
#   near_cpu NAME REF         every loss within 1e-5 (relative) of REF's
# Each check prints "ok: ..." or "FAIL: ..." (setting fail=1).
. "$(dirname "${BASH_SOURCE[0]}")/env.sh" # skips without mpirun; $tmp, removed at exit
fail=0

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

same() {
	if cmp -s "$tmp/$1.losses" "$tmp/$2.losses" && cmp -s "$tmp/$1.hash" "$tmp/$2.hash"; then
		echo "ok: $1: losses and model hash identical to $2's ($(cat "$tmp/$1.hash"))"
	else
		echo "FAIL: $1: losses or model hash differ from $2's:"
		diff "$tmp/$2.losses" "$tmp/$1.losses" | sed 's/^/    /'
		echo "    hash $(cat "$tmp/$1.hash" 2>/dev/null), $2's $(cat "$tmp/$2.hash" 2>/dev/null)"
		fail=1
	fi
}

first_loss() {
	sed -n 's/^step 1 loss \([^ ]*\) .*/\1/p' "$tmp/$1.log"
}

loss_goes_down() {
	local a b
	a=$(first_loss "$1")
	b=$(sed -n "s/^step $steps loss \([^ ]*\) .*/\1/p" "$tmp/$1.log")
	if awk -v a="$a" -v b="$b" 'BEGIN { exit !(b < a - 0.3) }'; then
		echo "ok: $1: the loss goes down ($a -> $b)"
	else
		echo "FAIL: $1: the loss does not go down ($a -> $b)"
		fail=1
	fi
}

resume() {
	local a=$tmp/$1 b=$tmp/$2 ref=$3 half=$((steps / 2)) got hash
	[ -x "$a/launch" ] && [ -x "$b/launch" ] || return 0 # their runs failed, and said so
	if timeout 600 "$a/launch" --steps $half --checkpoint "$tmp/ck-$1" >"$tmp/ck1-$1.log" 2>&1 &&
	   timeout 600 "$b/launch" --steps $((steps - half)) --resume "$tmp/ck-$1" >"$tmp/ck2-$1.log" 2>&1; then
		got=$(sed -n 's/^step \([0-9]*\) loss [^ ]* (\([^)]*\)).*/\1 \2/p' "$tmp/ck1-$1.log" "$tmp/ck2-$1.log")
		hash=$(sed -n 's/^model hash \(0x[0-9a-f]*\) .*/\1/p' "$tmp/ck2-$1.log")
		if [ "$got" = "$(cat "$tmp/$ref.losses")" ] && [ "$hash" = "$(cat "$tmp/$ref.hash")" ]; then
			echo "ok: resume: $1's checkpoint after step $half goes on as $2 into $ref's bits"
		else
			echo "FAIL: resume: $1 then $2: losses or hash differ from $ref's:"
			diff "$tmp/$ref.losses" <(echo "$got") | sed 's/^/    /'
			echo "    hash $hash, $ref's $(cat "$tmp/$ref.hash")"
			fail=1
		fi
	else
		echo "FAIL: checkpoint/resume ($1, then $2):"
		tail -5 "$tmp/ck1-$1.log" "$tmp/ck2-$1.log" | sed 's/^/    /'
		fail=1
	fi
}

near_cpu() {
	local worst
	worst=$(join "$tmp/$1.losses" "$tmp/$2.losses" | while read -r s x y; do
		printf '%.17g %.17g\n' "$x" "$y"
	done | awk '{ e = ($1 - $2) / $2; if (e < 0) e = -e; if (e > w) w = e; n++ }
		END { printf "%.2e %s\n", w, (n > 0 && w <= 1e-5 ? "ok" : "FAIL") }')
	case $worst in
	*ok) echo "ok: $1: losses within ${worst% ok} of $2's (threshold 1e-5)" ;;
	*) echo "FAIL: $1: losses off $2's by ${worst% FAIL} (threshold 1e-5)"; fail=1 ;;
	esac
}
