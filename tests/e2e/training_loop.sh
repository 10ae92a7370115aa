#!/usr/bin/env bash
# training_loop.sh OCTOPIPE SRCDIR: the training loop of the rank programs
# (issue 20; docs/runtime.md, "The training loop"), on tiny-hybrid with a
# warm-up, a cosine decay and clipping by the global norm (training: keys),
# every plan compiled with --deterministic:
#
#  - plan independence: 1 rank, 2 ranks (1f1b), 4 ranks as 2 replicas of a
#    2-rank pipeline with the distributed optimizer (the norm from the
#    shards): the same losses, gradient norms and model hash, bit for bit;
#    without clipping (--clip 0) the losses differ, so the clipping acts;
#  - the metrics file: valid JSON lines, one a step, its lr the schedule's
#    (computed here in float32 from the same formula), the norm the step
#    line's;
#  - --save-every 2 --keep 2: two saves left (steps 4 and 6), current the
#    last; the older resumes to the bits of the uninterrupted run;
#  - SIGTERM to one rank mid-run: every rank stops after the same step,
#    saves, says so and exits 0; resumed on the 4-rank plan, the next steps
#    and the hash are those of an uninterrupted 1-rank run;
#  - evaluation (--eval-every 3 --eval-data, 20 micro-batches: 3 passes of
#    8): the same eval losses, bit for bit, on 1 rank, 2 ranks, 3 ranks
#    under zbv (two chunks a rank, split backward) and 2 replicas; training
#    untouched (the hash of the run without); the eval lines in the metrics;
#    under OCTO_COMM_SYNC=1 (rendezvous sends) it still completes; the
#    held-out text as two u16 token files gives the same eval losses;
#  - options refused at start, each named.
#
# Exit 0 all agree, 1 a mismatch or a failure, 77 (skip) without mpirun.
set -u
octopipe=$1
src=$2
steps=6
if ! command -v mpirun >/dev/null 2>&1; then
	echo "SKIP: mpirun not found"
	exit 77
fi
tmp=$(mktemp -d)
bg=
trap '[ -n "$bg" ] && kill $bg 2>/dev/null; rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 OCTO_COMM_TIMEOUT=${OCTO_COMM_TIMEOUT:-300}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
fail=0
ok() { echo "ok: $1"; }
bad() {
	echo "FAIL: $1"
	[ $# -gt 1 ] && tail -15 "$2" | sed 's/^/    /'
	fail=1
}

# The model with the loop's training keys (clip 0.5: below every step's norm).
sed -e "s#data/corpus.txt#$src/models/data/corpus.txt#" \
    -e 's/^  lr: 1e-3/  lr: 1e-3\n  warmup: 2\n  decay: cosine\n  decay_steps: 6\n  min_lr: 1e-4\n  clip: 0.5/' \
    "$src/models/tiny-hybrid.yaml" >"$tmp/loop.yaml"
grep -q '^  clip: 0.5' "$tmp/loop.yaml" || { echo "FAIL: the model's training section was not edited"; exit 1; }

compile() {
	local name=$1
	shift
	"$octopipe" compile "$tmp/loop.yaml" --deterministic "$@" -o "$tmp/$name" >"$tmp/$name.compile" 2>&1 ||
		{ bad "$name: compile failed" "$tmp/$name.compile"; return 1; }
}
# run NAME LOG ARGS...: the job; its "STEP HEXLOSS" lines in LOG.losses, the hash in LOG.hash.
run() {
	local name=$1 log=$2
	shift 2
	if ! timeout 600 "$tmp/$name/launch" "$@" >"$tmp/$log.log" 2>&1; then
		bad "$log: the job failed" "$tmp/$log.log"
		return 1
	fi
	sed -n 's/^step \([0-9]*\) loss [^ ]* (\([^)]*\)).*/\1 \2/p' "$tmp/$log.log" >"$tmp/$log.losses"
	sed -n 's/^step \([0-9]*\) .* grad norm \([^ ]*\) .*/\1 \2/p' "$tmp/$log.log" >"$tmp/$log.norms"
	sed -n 's/^model hash \(0x[0-9a-f]*\) .*/\1/p' "$tmp/$log.log" >"$tmp/$log.hash"
}
same() { # same A B WHAT
	if cmp -s "$tmp/$1.losses" "$tmp/$2.losses" && cmp -s "$tmp/$1.hash" "$tmp/$2.hash" &&
	   cmp -s "$tmp/$1.norms" "$tmp/$2.norms"; then
		ok "$3"
	else
		bad "$3: $2 differs from $1"
		diff "$tmp/$1.losses" "$tmp/$2.losses" | sed 's/^/    /'
		diff "$tmp/$1.norms" "$tmp/$2.norms" | sed 's/^/    /'
		echo "    hash $(cat "$tmp/$1.hash") vs $(cat "$tmp/$2.hash")"
	fi
}

compile p1 --devices 1 --schedule 1f1b || exit 1
compile p2 --devices 2 --schedule 1f1b || exit 1
compile p4 --devices 4 --dp 2 --distributed-optimizer on --schedule 1f1b || exit 1
compile p3 --devices 3 --schedule zbv || exit 1

# ---- plan independence, with the metrics of the reference ----
run p1 ref --steps $steps --metrics "$tmp/ref.jsonl" || exit 1
[ "$(wc -l <"$tmp/ref.losses")" = $steps ] && [ "$(wc -l <"$tmp/ref.norms")" = $steps ] &&
	[ -s "$tmp/ref.hash" ] || bad "ref: no $steps losses, norms and a hash" "$tmp/ref.log"
run p2 two --steps $steps --metrics "$tmp/two.jsonl" &&
	same ref two "2 ranks (1f1b): the losses, norms and hash of 1 rank"
run p4 dp2 --steps $steps --metrics "$tmp/dp2.jsonl" &&
	same ref dp2 "2 replicas x 2 ranks, distributed optimizer: the losses, norms and hash of 1 rank"
norms() { grep -o '"grad_norm": [^,]*' "$1"; }
if [ "$(norms "$tmp/ref.jsonl")" = "$(norms "$tmp/two.jsonl")" ] &&
   [ "$(norms "$tmp/ref.jsonl")" = "$(norms "$tmp/dp2.jsonl")" ] && [ -n "$(norms "$tmp/ref.jsonl")" ]; then
	ok "the metrics' gradient norms (17 digits) are the same on the three plans"
else
	bad "the gradient norms differ between plans" "$tmp/dp2.jsonl"
fi
run p1 noclip --steps $steps --clip 0 &&
	if [ "$(sed -n 1p "$tmp/noclip.losses")" = "$(sed -n 1p "$tmp/ref.losses")" ] &&
	   [ "$(sed -n 2p "$tmp/noclip.losses")" != "$(sed -n 2p "$tmp/ref.losses")" ] &&
	   ! grep -q 'grad norm' "$tmp/noclip.log"; then
		ok "--clip 0: step 1 as clipped, step 2 on differs (the clipping acts), no norm printed"
	else
		bad "--clip 0 does not change the run as it should" "$tmp/noclip.log"
	fi

# ---- the metrics file ----
if python3 - "$tmp/ref.jsonl" "$tmp/ref.log" $steps <<'EOF'; then
import json, math, re, struct, sys
path, log, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
f32 = lambda x: struct.unpack('f', struct.pack('f', x))[0]
lr, lo, warm, dsteps = f32(1e-3), f32(1e-4), 2, 6
def sched(t):  # rt_lr_at, in double, rounded once to float32
    if t < warm:
        return f32(lr * (t + 1) / warm)
    if t >= dsteps:
        return lo
    p = (t - warm) / (dsteps - warm)
    return f32(lo + (lr - lo) * 0.5 * (1.0 + math.cos(math.pi * p)))
rows = [json.loads(l) for l in open(path)]
assert len(rows) == steps, f"{len(rows)} lines, {steps} steps"
norms = {int(m.group(1)): float(m.group(2)) for m in
         re.finditer(r'^step (\d+) .* grad norm (\S+) ', open(log).read(), re.M)}
keys = {"step", "loss", "lr", "grad_norm", "tokens_per_s", "mfu", "step_time_s",
        "predicted_step_time_s", "eta_s"}
for i, r in enumerate(rows):
    assert set(r) == keys, f"keys {sorted(r)}"
    assert r["step"] == i + 1, f"line {i + 1}: step {r['step']}"
    assert f32(r["lr"]) == sched(i), f"step {i + 1}: lr {r['lr']}, the schedule's {sched(i)}"
    assert r["grad_norm"] > 0.5, f"step {i + 1}: norm {r['grad_norm']} (clip 0.5 never acts)"
    assert f"{r['grad_norm']:.4g}" == f"{norms[i + 1]:.4g}", f"step {i + 1}: norm vs the step line"
    assert r["loss"] > 0 and r["step_time_s"] > 0 and r["tokens_per_s"] > 0
    assert r["predicted_step_time_s"] > 0 and 0 < r["mfu"]
EOF
	ok "metrics: $steps JSON lines, the schedule's lr, the step lines' norms"
else
	bad "metrics file" "$tmp/ref.jsonl"
fi

# ---- periodic saves, keep 2 ----
run p2 saves --steps $steps --checkpoint "$tmp/ck" --save-every 2 --keep 2 || exit 1
gens=$(cd "$tmp/ck" && ls -d gen-* 2>/dev/null | tr '\n' ' ')
cur=$(cat "$tmp/ck/current" 2>/dev/null)
old=$(cd "$tmp/ck" && ls -d gen-* | head -1)
if [ "$(echo $gens | wc -w)" = 2 ] && grep -qx 'step 6' "$tmp/ck/$cur/manifest" &&
   grep -qx 'step 4' "$tmp/ck/$old/manifest"; then
	ok "--save-every 2 --keep 2: two saves left ($gens), of steps 4 and 6; current $cur"
else
	bad "--save-every 2 --keep 2: left $gens, current $cur" "$tmp/saves.log"
fi
head -4 "$tmp/ref.losses" >"$tmp/head4.losses"
run p4 resumed --steps 2 --resume "$tmp/ck/$old" &&
	if [ "$(cat "$tmp/resumed.losses")" = "$(sed -n 5,6p "$tmp/ref.losses")" ] &&
	   cmp -s "$tmp/resumed.hash" "$tmp/ref.hash"; then
		ok "the save of step 4 resumes (on 4 ranks) to the uninterrupted run's steps 5, 6 and hash"
	else
		bad "the save of step 4 does not resume to the same bits" "$tmp/resumed.log"
	fi

# ---- SIGTERM to one rank: every rank stops after the same step and saves ----
"$tmp/p2/launch" --steps 1000 --checkpoint "$tmp/sig" </dev/null >"$tmp/sig.log" 2>&1 &
bg=$!
for _ in $(seq 600); do
	grep -q '^step 2 ' "$tmp/sig.log" && break
	kill -0 $bg 2>/dev/null || break
	sleep 0.2
done
victim=$(pgrep -f "^$tmp/p2/rank1 " | head -1)
[ -n "$victim" ] && kill -TERM "$victim"
wait $bg
rc=$?
bg=
n=$(sed -n 's/^stopped on SIGTERM after step \([0-9]*\): checkpoint .* saved.*/\1/p' "$tmp/sig.log")
last=$(grep -Eo '^step [0-9]+ loss' "$tmp/sig.log" | tail -1 | awk '{print $2}')
if [ -z "$victim" ]; then
	bad "SIGTERM: rank 1 was not found running" "$tmp/sig.log"
elif [ $rc = 0 ] && [ -n "$n" ] && [ "$n" = "$last" ] && grep -qx "step $n" "$tmp/sig/$(cat "$tmp/sig/current")/manifest"; then
	ok "SIGTERM to rank 1: stopped after step $n on every rank, saved step $n, exit 0"
	run p1 straight --steps $((n + 2)) &&
		run p4 after --steps 2 --resume "$tmp/sig" &&
		if [ "$(cat "$tmp/after.losses")" = "$(tail -2 "$tmp/straight.losses")" ] &&
		   cmp -s "$tmp/after.hash" "$tmp/straight.hash"; then
			ok "resumed after the stop (4 ranks): steps $((n + 1)), $((n + 2)) and the hash of an uninterrupted run"
		else
			bad "resumed after the stop: not the uninterrupted run's bits" "$tmp/after.log"
		fi
else
	bad "SIGTERM: exit $rc, stopped after '$n', last step line '$last'" "$tmp/sig.log"
fi
# ---- options refused, each named ----
while IFS='|' read -r want args; do
	# shellcheck disable=SC2086
	"$tmp/p2/launch" --steps 1 $args </dev/null >"$tmp/opt.log" 2>&1 && rc=0 || rc=$?
	if [ $rc != 0 ] && grep -qF -- "$want" "$tmp/opt.log"; then
		ok "refused ($rc): $args"
	else
		bad "not refused as '$want' (exit $rc): $args" "$tmp/opt.log"
	fi
done <<EOF
--save-every needs --checkpoint DIR|--save-every 2
--keep needs --checkpoint DIR|--keep 3
--decay needs cosine, linear or constant, got 'cosin'|--decay cosin
--clip needs a finite number, 0 or more, got '-1'|--clip -1
--keep needs a count of 1 or more, got '0'|--checkpoint $tmp/k0 --keep 0
--eval-every N and --eval-data FILE come together|--eval-every 2
min_lr is 1; it must be finite, 0 or more and at most lr|--min-lr 1
EOF

# ---- evaluation ----
tail -c 20000 "$src/models/data/corpus.txt" >"$tmp/held.txt"
evals() { sed -n 's/^eval after step \([0-9]*\): loss [^ ]* (\([^)]*\)) over \([0-9]*\) .*/\1 \2 \3/p' "$tmp/$1.log"; }
ev=(--eval-every 3 --eval-data "$tmp/held.txt" --eval-batches 20)
if run p1 ev1 --steps $steps "${ev[@]}" --metrics "$tmp/ev1.jsonl"; then
	if [ "$(evals ev1 | wc -l)" = 2 ] && [ "$(evals ev1 | awk '{print $1 " " $3}' | tr '\n' ' ')" = "3 24 6 24 " ] &&
	   cmp -s "$tmp/ev1.hash" "$tmp/ref.hash" && cmp -s "$tmp/ev1.losses" "$tmp/ref.losses"; then
		ok "eval after steps 3 and 6 over 24 micro-batches; the training's losses and hash untouched"
	else
		bad "eval on 1 rank: $(evals ev1 | tr '\n' ';')" "$tmp/ev1.log"
	fi
	[ "$(grep -c '"eval_loss"' "$tmp/ev1.jsonl")" = 2 ] && [ "$(grep -c '"lr"' "$tmp/ev1.jsonl")" = $steps ] &&
		ok "metrics: a line per step and one per evaluation" || bad "eval metrics" "$tmp/ev1.jsonl"
	for p in p2 p3 p4; do
		run $p ev-$p --steps $steps "${ev[@]}" &&
			if [ "$(evals ev-$p)" = "$(evals ev1)" ] && cmp -s "$tmp/ev-$p.hash" "$tmp/ref.hash"; then
				ok "eval on $p ($(grep -m1 '^plan:' "$tmp/$p.compile" | sed 's/^plan: //')): the eval losses of 1 rank"
			else
				bad "eval on $p differs from 1 rank's: $(evals ev-$p | tr '\n' ';')" "$tmp/ev-$p.log"
			fi
	done
	# The held-out text as two u16 token files (octopipe tokenize; a byte a
	# token), read as --data is: the text's eval losses, bit for bit.
	head -c 12000 "$tmp/held.txt" >"$tmp/held-a.txt"
	tail -c +12001 "$tmp/held.txt" >"$tmp/held-b.txt"
	if "$octopipe" tokenize "$tmp/held-a.txt" -o "$tmp/held-a.bin" >/dev/null 2>&1 &&
	   "$octopipe" tokenize "$tmp/held-b.txt" -o "$tmp/held-b.bin" >/dev/null 2>&1 &&
	   run p2 ev-tok --steps $steps --eval-every 3 --eval-data "$tmp/held-a.bin,$tmp/held-b.bin" \
	       --eval-batches 20; then
		[ "$(evals ev-tok)" = "$(evals ev1)" ] &&
			ok "eval on two u16 token files of the held-out text: the text's eval losses" ||
			bad "eval on token files differs from the text's: $(evals ev-tok | tr '\n' ';')" "$tmp/ev-tok.log"
	else
		bad "eval on token files: tokenize or the run failed" "$tmp/ev-tok.log"
	fi
	OCTO_COMM_SYNC=1 run p3 ev-sync --steps 3 "${ev[@]}" &&
		if [ "$(evals ev-sync)" = "$(evals ev1 | head -1)" ]; then
			ok "eval under rendezvous sends (OCTO_COMM_SYNC=1, zbv): completes, the same loss"
		else
			bad "eval under OCTO_COMM_SYNC=1" "$tmp/ev-sync.log"
		fi
fi
exit $fail
