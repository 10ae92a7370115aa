#!/usr/bin/env bash
# run.sh SCENARIO DRIVER MERGE SRCDIR [OCTOPIPE]: one runtime test (a CTest
# entry each, from runtime/CMakeLists.txt).  DRIVER is rt_driver
# (tests/runtime/driver.c), MERGE is octo-trace-merge.  Prints what it
# checks and "N passed, M failed"; exits 1 on any failure, 77 (skipped)
# without mpirun.
#
#   plan_dense, plan_hybrid  losses and final weights bit for bit the same on
#                            1 process, 2 and 4 ranks, GPipe and 1F1B, uneven cuts
#   resume                   6 steps straight == 3 steps, save, resume, 3 steps, on
#                            the same, more and fewer ranks
#   ckpt_errors              damaged, truncated, mixed and mismatched checkpoints:
#                            clear errors, non-zero exit
#   nan                      a NaN loss ends the job: "rank R: error: step S: loss is NaN"
#   kill                     SIGKILL one rank: the job ends non-zero within 10 s, naming it
#   stall                    a hung rank: the others time out (OCTO_COMM_TIMEOUT) and end the job
#   sync                     OCTO_COMM_SYNC=1 (synchronous sends) trains to completion;
#                            a program relying on buffering times out there
#   arena                    an arena too small: a clear error, non-zero exit
#   profile                  the profiling mode's file is read by `octopipe plan --profile`
#   trace                    per-rank Chrome traces and their merge
set -u
scenario=$1 drv=$2 merge=$3 src=$4 octopipe=${5:-}

if ! command -v mpirun >/dev/null 2>&1; then
	echo "SKIP: mpirun not found"
	exit 77
fi
# What Open MPI needs in a container, as root: permission to run as root,
# more ranks than cores, shared memory only, and no single-copy (CMA) path,
# which ptrace restrictions often break.
MPIRUN=(mpirun)
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
	MPIRUN+=(--oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none)
	[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
fi
export OPENBLAS_NUM_THREADS=1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# run NP ARGS...: the driver on NP ranks (NP=0: one process, no mpirun);
# stdout+stderr to $tmp/log, exit status in $rc.
run() {
	local np=$1
	shift
	if [ "$np" = 0 ]; then
		"$drv" "$@" >"$tmp/log" 2>&1
	else
		"${MPIRUN[@]}" -np "$np" "$drv" "$@" >"$tmp/log" 2>&1
	fi
	rc=$?
}

# train NAME NP ARGS...: a run that must succeed, its files in $tmp/NAME.
train() {
	local name=$1 np=$2
	shift 2
	mkdir -p "$tmp/$name"
	run "$np" --out "$tmp/$name" "$@"
	if [ "$rc" != 0 ]; then
		bad "$name: exit $rc"
		sed 's/^/  | /' "$tmp/log" | tail -20
		return 1
	fi
}

# same A B WHAT: files A and B are byte for byte equal.
same() {
	if [ -s "$1" ] && cmp -s "$1" "$2"; then
		ok "$3"
	else
		bad "$3"
		diff "$1" "$2" | head -10 | sed 's/^/  | /'
	fi
}

# fails NP PATTERN WHAT ARGS...: a run that must exit non-zero with PATTERN
# (an extended regexp) in its output.
fails() {
	local np=$1 pat=$2 what=$3
	shift 3
	run "$np" "$@"
	if [ "$rc" != 0 ] && grep -Eq "$pat" "$tmp/log"; then
		ok "$what (exit $rc): $(grep -Eo "$pat.*" "$tmp/log" | head -1 | cut -c1-150)"
	else
		bad "$what: exit $rc, expected non-zero and /$pat/"
		sed 's/^/  | /' "$tmp/log" | tail -20
	fi
}

plan_independence() {
	local model=$1
	train one 0 --model "$model" --steps 4 || return
	train r2 2 --model "$model" --steps 4 || return
	train r4 4 --model "$model" --steps 4 --schedule 1f1b || return
	train r4cuts 4 --model "$model" --steps 4 --cuts 1,2,5 || return
	[ "$(wc -l <"$tmp/one/losses.txt")" = 4 ] && ok "$model: 4 losses" || bad "$model: 4 losses"
	for r in r2 r4 r4cuts; do
		same "$tmp/one/losses.txt" "$tmp/$r/losses.txt" "$model: losses, 1 process == $r"
		same "$tmp/one/hash.txt" "$tmp/$r/hash.txt" "$model: final weights and AdamW state, 1 process == $r"
	done
	# It trains: on text the last loss is below the first (third column:
	# decimal).  Synthetic tokens are i.i.d. uniform: nothing to learn but
	# the unigram, and each step's fresh batch makes the loss noisy.
	[ "$model" = dense ] && return
	if awk 'NR==1{a=$3} END{exit !($3 < a)}' "$tmp/one/losses.txt"; then
		ok "$model: the loss goes down: $(head -1 "$tmp/one/losses.txt" | cut -d' ' -f3) -> $(tail -1 "$tmp/one/losses.txt" | cut -d' ' -f3)"
	else
		bad "$model: the loss goes down"
	fi
}

case $scenario in
plan_dense) plan_independence dense ;;
plan_hybrid) plan_independence hybrid ;;

resume)
	train straight 0 --model hybrid --steps 6 || exit 1
	train first 2 --model hybrid --steps 3 --save "$tmp/ck" || exit 1
	[ -f "$tmp/ck/manifest" ] && [ -f "$tmp/ck/layer-0011.ckpt" ] && ! ls "$tmp/ck"/*.tmp >/dev/null 2>&1 &&
		ok "checkpoint: manifest and 12 layer files, no temporaries" || bad "checkpoint files"
	for r in "2 gpipe 2-ranks" "4 1f1b 4-ranks" "0 gpipe 1-process"; do
		set -- $r
		train "again$1" "$1" --model hybrid --steps 3 --load "$tmp/ck" --schedule "$2" || continue
		cat "$tmp/first/losses.txt" "$tmp/again$1/losses.txt" >"$tmp/joined$1"
		same "$tmp/straight/losses.txt" "$tmp/joined$1" "6 steps == 3 steps on 2 ranks + resume on $3 ($2): losses"
		same "$tmp/straight/hash.txt" "$tmp/again$1/hash.txt" "6 steps == 3 steps on 2 ranks + resume on $3 ($2): weights"
	done
	;;

ckpt_errors)
	train save 2 --model dense --steps 2 --save "$tmp/ck" || exit 1
	train load 2 --model dense --steps 1 --load "$tmp/ck" && ok "the undamaged checkpoint loads"
	copy() { rm -rf "$tmp/c" && cp -r "$tmp/ck" "$tmp/c"; }
	flip() { printf '\x5a' | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }
	err='octopipe rank [0-9]+: error: checkpoint '
	copy && flip "$tmp/c/layer-0003.ckpt" 5000
	fails 2 "${err}.*/layer-0003.ckpt: checksum mismatch" "a flipped byte in the parameters" --steps 1 --load "$tmp/c"
	copy && flip "$tmp/c/layer-0007.ckpt" 30
	fails 2 "${err}.*/layer-0007.ckpt: header checksum mismatch" "a flipped byte in a header" --steps 1 --load "$tmp/c"
	copy && truncate -s 1000 "$tmp/c/layer-0002.ckpt"
	fails 0 "${err}.*/layer-0002.ckpt: .*truncated" "a truncated layer file" --steps 1 --load "$tmp/c"
	copy && flip "$tmp/c/manifest" 25
	fails 2 "${err}.*/manifest: checksum mismatch" "a flipped byte in the manifest" --steps 1 --load "$tmp/c"
	copy && rm "$tmp/c/layer-0005.ckpt"
	fails 2 "${err}.*/layer-0005.ckpt: No such file" "a missing layer file" --steps 1 --load "$tmp/c"
	train later 2 --model dense --steps 3 --save "$tmp/ck3" || exit 1
	copy && cp "$tmp/ck3/layer-0004.ckpt" "$tmp/c/"
	fails 4 "${err}.*/layer-0004.ckpt: from step 3 .* manifest says step 2" "a layer file of another save" --steps 1 --load "$tmp/c"
	fails 0 "${err}.*/layer-0002.ckpt: shape mismatch: the checkpoint has a mlp layer of 24640 parameters .* model's layer 2 is a mlp layer of 18496" \
		"another shape (mlp ffn 96)" --steps 1 --ffn 96 --load "$tmp/ck"
	fails 0 "${err}.*/manifest: model mismatch: the checkpoint has 10 layers, the model 12" \
		"another model (tiny-hybrid)" --model hybrid --steps 1 --load "$tmp/ck"
	fails 0 "${err}.*/manifest: seed mismatch" "another seed" --seed 7 --steps 1 --load "$tmp/ck"
	fails 0 "${err}.*/manifest: data mismatch" "another data source" --text "$src/models/data/corpus.txt" --steps 1 --load "$tmp/ck"
	;;

nan)
	fails 4 "octopipe rank 3: error: step 1: loss is NaN" "a NaN loss ends the job" --steps 3 --inject-nan 1
	OCTO_INJECT_NAN=0 fails 0 "octopipe rank 0: error: step 0: loss is NaN" "a NaN loss, one process (OCTO_INJECT_NAN)" --steps 2
	;;

kill)
	mkdir -p "$tmp/pids"
	("${MPIRUN[@]}" -np 4 "$drv" --model hybrid --steps 100000 --pid-dir "$tmp/pids" >"$tmp/log" 2>&1
	 echo $? >"$tmp/rc") &
	job=$!
	for _ in $(seq 100); do
		[ "$(ls "$tmp/pids" | wc -l)" = 4 ] && grep -q "step 1 " "$tmp/log" && break
		sleep 0.1
	done
	victim=2
	pid=$(cat "$tmp/pids/rank$victim.pid" 2>/dev/null)
	if [ -z "$pid" ]; then
		bad "the job did not start"
		sed 's/^/  | /' "$tmp/log" | tail -20
	else
		t0=$(date +%s%N)
		kill -9 "$pid"
		for _ in $(seq 150); do
			[ -f "$tmp/rc" ] && break
			sleep 0.1
		done
		ms=$((($(date +%s%N) - t0) / 1000000))
		if [ ! -f "$tmp/rc" ]; then
			bad "rank $victim killed: the job still runs after $ms ms"
			pkill -9 -P "$job" 2>/dev/null
		elif [ "$(cat "$tmp/rc")" != 0 ] && [ "$ms" -lt 10000 ] && grep -q "rank $victim" "$tmp/log"; then
			ok "rank $victim killed: the job ended with exit $(cat "$tmp/rc") after $ms ms: $(grep "rank $victim" "$tmp/log" | head -1)"
		else
			bad "rank $victim killed: exit $(cat "$tmp/rc") after $ms ms"
			sed 's/^/  | /' "$tmp/log" | tail -20
		fi
	fi
	wait "$job" 2>/dev/null
	;;

stall)
	t0=$(date +%s%N)
	OCTO_COMM_TIMEOUT=2 fails 4 "octopipe rank [0-9]: error: timed out after 2 s waiting for: (recv from|send to) rank [0-9] " \
		"rank 1 hangs: the ranks waiting on it time out" --steps 3 --stall-rank 1
	ms=$((($(date +%s%N) - t0) / 1000000))
	[ "$ms" -lt 10000 ] && ok "the job ended after $ms ms" || bad "the job took $ms ms"
	;;

sync)
	train buffered 4 --model hybrid --steps 2 --schedule 1f1b || exit 1
	OCTO_COMM_SYNC=1 train sync4 4 --model hybrid --steps 2 --schedule 1f1b &&
		ok "OCTO_COMM_SYNC=1: 4 ranks, 1F1B, trained to completion"
	same "$tmp/buffered/hash.txt" "$tmp/sync4/hash.txt" "synchronous sends: the same weights"
	OCTO_COMM_SYNC=1 train sync2 2 --model dense --steps 2 && ok "OCTO_COMM_SYNC=1: 2 ranks, GPipe, trained to completion"
	run 2 --exchange unsafe
	[ "$rc" = 0 ] && ok "send-wait-then-recv completes when sends are buffered" || bad "buffered exchange: exit $rc"
	OCTO_COMM_SYNC=1 OCTO_COMM_TIMEOUT=2 fails 2 "octopipe rank [01]: error: timed out after 2 s waiting for: send to rank [01]" \
		"send-wait-then-recv under synchronous sends: caught" --exchange unsafe
	OCTO_COMM_SYNC=1 OCTO_COMM_TIMEOUT=2 run 2 --exchange safe
	[ "$rc" = 0 ] && ok "the same exchange as one group completes under synchronous sends" || bad "grouped exchange: exit $rc"
	;;

arena)
	fails 2 "octopipe rank [01]: error: arena: out of memory: the model's 5 layers need [0-9]+ bytes" "an arena too small" --arena 100000
	;;

profile)
	run 2 --model hybrid --profile "$tmp/profile.yaml"
	if [ "$rc" = 0 ] && grep -q '^units: ms$' "$tmp/profile.yaml" &&
		grep -Eq '^cache_bytes: [1-9][0-9]*$' "$tmp/profile.yaml" &&
		[ "$(grep -Ec '^  [0-9]+: \{f: [0-9.]+, b: [0-9.]+, w: [0-9.]+, f_cold: [0-9.]+, b_cold: [0-9.]+, w_cold: [0-9.]+, act_bytes: [0-9]+, wstash_bytes: [0-9]+\}$' "$tmp/profile.yaml")" = 12 ]; then
		ok "profile: units ms, cache_bytes, f, b, w hot and cold of the 12 layers"
	else
		bad "profile: exit $rc"
		sed 's/^/  | /' "$tmp/log" "$tmp/profile.yaml" 2>/dev/null | tail -20
	fi
	if [ -n "$octopipe" ] && [ -x "$octopipe" ]; then
		if "$octopipe" plan "$src/models/tiny-hybrid.yaml" --profile "$tmp/profile.yaml" >"$tmp/plan" 2>&1; then
			ok "octopipe plan --profile reads it"
		else
			bad "octopipe plan --profile"
			sed 's/^/  | /' "$tmp/plan" | head -10
		fi
	fi
	;;

trace)
	OCTO_TRACE_DIR="$tmp/tr" train traced 2 --steps 2 --schedule 1f1b || exit 1
	[ -s "$tmp/tr/trace-rank0.json" ] && [ -s "$tmp/tr/trace-rank1.json" ] && ok "trace-rank0.json, trace-rank1.json" ||
		bad "per-rank traces"
	if "$merge" "$tmp/tr" 2 "$tmp/all.json" 2>"$tmp/merge.err"; then
		ok "octo-trace-merge"
	else
		bad "octo-trace-merge: $(cat "$tmp/merge.err")"
	fi
	# 10 layers x 8 micro-batches x 2 steps of each of F, B, W, over both ranks.
	for k in F B W; do
		n=$(grep -c "\"cat\":\"$k\"" "$tmp/all.json")
		[ "$n" = 160 ] && ok "merged trace: 160 $k events" || bad "merged trace: $n $k events, expected 160"
	done
	if command -v python3 >/dev/null; then
		python3 - "$tmp/all.json" <<'EOF' && ok "merged trace: valid JSON, every event well-formed" || bad "merged trace: JSON"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
x = [e for e in ev if e["ph"] == "X"]
assert {e["pid"] for e in x} == {0, 1}
assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in x)
EOF
	fi
	"$merge" "$tmp/tr" 3 "$tmp/bad.json" 2>"$tmp/merge.err"
	[ $? != 0 ] && grep -q "trace-rank2.json" "$tmp/merge.err" && ok "merge: a missing rank file is an error" ||
		bad "merge: a missing rank file"
	;;

*)
	echo "run.sh: unknown scenario '$scenario'"
	exit 2
	;;
esac

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
