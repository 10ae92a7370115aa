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
#   nan                      a NaN loss ends the job: "rank R: error: step S: loss is NaN",
#                            S counted as the progress lines count
#   kill                     SIGKILL one rank: the job ends non-zero because of it (not
#                            the deadline), naming it
#   dp                       data parallelism (D replicas x stages): exact mode gives the
#                            same losses and weights for (D, stages) = (1,1) (2,1) (4,1)
#                            (1,2) (2,2), distributed optimizer on and off, buckets of one
#                            layer or several; without it D=2 is within 1e-6 of D=1;
#                            a save at D=2 (distopt) resumes at D=1 and D=4 bit for bit;
#                            a killed rank, a wrong-sized bucket buffer, replicas that
#                            diverge: clear errors, non-zero exit
#   stall                    a hung rank (in a step, before a collective, after the last): the others time out (OCTO_COMM_TIMEOUT), name it
#                            and end the job
#
# The runtime fault suite (issue 14): what once lost state or gave a wrong answer.
#   ckpt_atomic              a save that fails on one rank (a full tmpfs; a file size
#                            limit) ends the job naming the rank, and the previous save
#                            still resumes, bit for bit
#   ckpt_nan                 a NaN in a checkpoint's AdamW state (checksums recomputed)
#                            is refused at load; a NaN weight is refused at save; a step
#                            or data position that would overflow is refused
#   ckpt_dir                 a --save directory that cannot be created fails before step 1
#   data                     text data that is not a regular file, or shorter than a
#                            sequence, is refused at start
#   stop                     SIGSTOP one rank: the others name it ("rank 2 stopped answering");
#                            one stopped before MPI start-up: the other's watchdog ends the job
#   programs                 compiled ranks (OCTOPIPE): ranks of another model, seed or
#                            plan, or started with other options or data, refused at
#                            start, naming both; --checkpoint, --trace and
#                            --profile checked before step 1; --data /dev/zero, text on vocab < 256, lr 1e39 named
#   sync                     OCTO_COMM_SYNC=1 (synchronous sends) trains to completion;
#                            a program relying on buffering times out there
#   arena                    an arena too small: a clear error, non-zero exit; an
#                            OCTO_COMM_TIMEOUT that is not a plain decimal: refused
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
trap 'umount "$tmp/mnt" 2>/dev/null; rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# run NP ARGS...: the driver on NP ranks (NP=0: one process, no mpirun),
# its memory capped; stdout+stderr to $tmp/log, exit status in $rc.
run() {
	local np=$1
	shift
	if [ "$np" = 0 ]; then
		capped "$drv" "$@" >"$tmp/log" 2>&1
	else
		capped "${MPIRUN[@]}" -np "$np" "$drv" "$@" >"$tmp/log" 2>&1
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

# capped CMD...: CMD with its memory bounded (not under ASan, whose shadow
# needs the address space), so a reader that grows without end fails
# instead of taking the machine's memory.
capped() {
	# A run that blocks forever (a regression) fails here, long after any
	# healthy run would have ended, rather than at ctest's timeout.
	if grep -q __asan_init "$drv" 2>/dev/null; then
		timeout -k 10 240 "$@"
	else
		(ulimit -v 8000000 && timeout -k 10 240 "$@")
	fi
}

# poison FILE ARRAY INDEX VALUE: sets element INDEX of ARRAY (p, m or v) of
# a layer file to VALUE and recomputes both checksums, as a tool that
# rewrites checkpoints would (docs/runtime.md has the layout).
poison() {
	python3 - "$@" <<'PY'
import struct, sys
path, arr, idx, val = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
b = bytearray(open(path, 'rb').read())
n = struct.unpack_from('<q', b, 32)[0]
struct.pack_into('<f', b, 80 + 4 * ({'p': 0, 'm': 1, 'v': 2}[arr] * n + idx), val)
def fnv(d):
    h = 0xcbf29ce484222325
    for x in d:
        h = ((h ^ x) * 0x100000001b3) & 0xffffffffffffffff
    return h
struct.pack_into('<Q', b, 64, fnv(b[80:]))
struct.pack_into('<Q', b, 72, fnv(b[:72]))
open(path, 'wb').write(b)
PY
}

# restep GEN STEP DATA_POS: sets the step and data position of every file
# of generation GEN, checksums recomputed.
restep() {
	python3 - "$@" <<'PY'
import os, re, struct, sys
g, step, dp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def fnv(d):
    h = 0xcbf29ce484222325
    for x in d:
        h = ((h ^ x) * 0x100000001b3) & 0xffffffffffffffff
    return h
for f in os.listdir(g):
    if f.startswith('layer-'):
        b = bytearray(open(os.path.join(g, f), 'rb').read())
        struct.pack_into('<qq', b, 40, step, dp)
        struct.pack_into('<Q', b, 72, fnv(b[:72]))
        open(os.path.join(g, f), 'wb').write(b)
t = open(os.path.join(g, 'manifest')).read()
t = t[:t.index('checksum 0x')]
t = re.sub(r'^step .*$', 'step %d' % step, t, flags=re.M)
t = re.sub(r'^data_pos .*$', 'data_pos %d' % dp, t, flags=re.M)
open(os.path.join(g, 'manifest'), 'w').write(t + 'checksum 0x%016x\n' % fnv(t.encode()))
PY
}

# kill_rank NP VICTIM ARGS...: SIGKILL rank VICTIM of an NP-rank job of the
# driver (ARGS) once it trains.
kill_rank() {
	local np=$1 victim=$2 to job pid
	shift 2
	# The property: the job ends because the victim died -- non-zero, the
	# victim named, and not by the communication deadline (no "timed out"). No
	# time is asserted: the job gets up to 120 s to start and the deadline
	# plus a minute to end (a loaded machine, ASan), and the deadline is
	# the test's own, so that a hang fails the test before ctest's timeout.
	to=100
	rm -rf "$tmp/pids" "$tmp/rc" && mkdir -p "$tmp/pids"
	(OCTO_COMM_TIMEOUT=$to "${MPIRUN[@]}" -np "$np" "$drv" "$@" --steps 100000 --pid-dir "$tmp/pids" >"$tmp/log" 2>&1
	 echo $? >"$tmp/rc") &
	job=$!
	for _ in $(seq 1200); do
		[ "$(ls "$tmp/pids" | wc -l)" = "$np" ] && grep -q "step 1 " "$tmp/log" && break
		[ -f "$tmp/rc" ] && break
		sleep 0.1
	done
	pid=$(cat "$tmp/pids/rank$victim.pid" 2>/dev/null)
	if [ -z "$pid" ] || [ -f "$tmp/rc" ]; then
		bad "the job did not start (or ended before the kill)"
		sed 's/^/  | /' "$tmp/log" | tail -20
	else
		kill -9 "$pid"
		for _ in $(seq $(((to + 60) * 10))); do
			[ -f "$tmp/rc" ] && break
			sleep 0.1
		done
		if [ ! -f "$tmp/rc" ]; then
			bad "rank $victim killed: the job still runs after the deadline ($to s) and a minute"
			pkill -9 -P "$job" 2>/dev/null
		elif [ "$(cat "$tmp/rc")" != 0 ] && grep -q "rank $victim" "$tmp/log" && ! grep -q "timed out after" "$tmp/log"; then
			ok "rank $victim killed: the job ended with exit $(cat "$tmp/rc"), by the death, not the deadline: $(grep "rank $victim" "$tmp/log" | head -1)"
		else
			bad "rank $victim killed: exit $(cat "$tmp/rc")"
			sed 's/^/  | /' "$tmp/log" | tail -20
		fi
	fi
	wait "$job" 2>/dev/null
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
	g=$tmp/ck/$(cat "$tmp/ck/current" 2>/dev/null)
	[ "$(cat "$tmp/ck/current" 2>/dev/null)" = gen-000001 ] && [ -f "$g/manifest" ] && [ -f "$g/layer-0011.ckpt" ] &&
		[ "$(ls "$g" | wc -l)" = 13 ] && [ "$(ls "$tmp/ck" | wc -l)" = 2 ] &&
		ok "checkpoint: current -> gen-000001: manifest and 12 layer files, no temporaries" || bad "checkpoint files"
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
	# copy: a copy in $tmp/c of the save, $g its committed generation.
	copy() { rm -rf "$tmp/c" && cp -r "$tmp/ck" "$tmp/c" && g=$tmp/c/$(cat "$tmp/c/current"); }
	flip() { printf '\x5a' | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }
	err='octopipe rank [0-9]+: error: checkpoint '
	copy && flip "$g/layer-0003.ckpt" 5000
	fails 2 "${err}.*/layer-0003.ckpt: checksum mismatch" "a flipped byte in the parameters" --steps 1 --load "$tmp/c"
	copy && flip "$g/layer-0007.ckpt" 30
	fails 2 "${err}.*/layer-0007.ckpt: header checksum mismatch" "a flipped byte in a header" --steps 1 --load "$tmp/c"
	copy && truncate -s 1000 "$g/layer-0002.ckpt"
	fails 0 "${err}.*/layer-0002.ckpt: .*truncated" "a truncated layer file" --steps 1 --load "$tmp/c"
	copy && flip "$g/manifest" 25
	fails 2 "${err}.*/manifest: checksum mismatch" "a flipped byte in the manifest" --steps 1 --load "$tmp/c"
	copy && rm "$g/layer-0005.ckpt"
	fails 2 "${err}.*/layer-0005.ckpt: No such file" "a missing layer file" --steps 1 --load "$tmp/c"
	copy && printf 'gen-00000x\n' >"$tmp/c/current"
	fails 2 "${err}.*/current: damaged" "a damaged pointer to the committed save" --steps 1 --load "$tmp/c"
	copy && printf 'gen-000007\n' >"$tmp/c/current"
	fails 2 "${err}.*/current names .*gen-000007, which is missing" "a pointer to a missing save" --steps 1 --load "$tmp/c"
	fails 2 "${err}.*/empty: no committed save there" "a directory without a save" --steps 1 --load "$(mkdir -p "$tmp/empty" && echo "$tmp/empty")"
	# Files that are not regular files: refused by what they are, never
	# opened in a way that blocks (a FIFO without a writer would hang the
	# rank outside the runtime's deadlines).
	copy && rm "$tmp/c/current" && mkfifo "$tmp/c/current"
	fails 2 "${err}.*/current: not a regular file \(a pipe\)" "a FIFO as current" --steps 1 --load "$tmp/c"
	copy && rm "$tmp/c/current" && ln -s "$tmp/nowhere" "$tmp/c/current"
	fails 2 "${err}.*/current: No such file or directory \(a symbolic link to nothing\)" "a dangling link as current" --steps 1 --load "$tmp/c"
	copy && rm "$g/manifest" && mkfifo "$g/manifest"
	fails 2 "${err}.*/manifest: not a regular file \(a pipe\)" "a FIFO as the manifest" --steps 1 --load "$tmp/c"
	copy && rm "$g/layer-0003.ckpt" && mkfifo "$g/layer-0003.ckpt"
	fails 2 "${err}.*/layer-0003.ckpt: not a regular file \(a pipe\)" "a FIFO as a layer file" --steps 1 --load "$tmp/c"
	copy && rm "$g/layer-0004.ckpt" && mkdir "$g/layer-0004.ckpt"
	fails 2 "${err}.*/layer-0004.ckpt: not a regular file \(a directory\)" "a directory as a layer file" --steps 1 --load "$tmp/c"
	# A save of an earlier runtime: the files in DIR itself, no DIR/current.
	rm -rf "$tmp/flat" && mkdir "$tmp/flat" && cp "$tmp/ck/$(cat "$tmp/ck/current")"/* "$tmp/flat/"
	train flat 2 --model dense --steps 1 --load "$tmp/flat" && ok "a save without DIR/current (earlier runtimes) loads"
	same "$tmp/load/hash.txt" "$tmp/flat/hash.txt" "  ... with the same result"
	train later 2 --model dense --steps 3 --save "$tmp/ck3" || exit 1
	copy && cp "$tmp/ck3/$(cat "$tmp/ck3/current")/layer-0004.ckpt" "$g/"
	fails 4 "${err}.*/layer-0004.ckpt: from step 3 .* manifest says step 2" "a layer file of another save" --steps 1 --load "$tmp/c"
	# Ranks that load two saves (here given two directories; a commit
	# between their reads does the same): refused, not trained from two steps.
	capped "${MPIRUN[@]}" -np 1 "$drv" --model dense --steps 1 --load "$tmp/ck" : \
		-np 1 "$drv" --model dense --steps 1 --load "$tmp/ck3" >"$tmp/log" 2>&1
	rc=$?
	[ "$rc" != 0 ] && grep -q "octopipe rank [01]: error: checkpoint .*: rank 1 and rank 0 loaded different saves (step 3, manifest checksum 0x[0-9a-f]* on rank 1; step 2," "$tmp/log" &&
		ok "ranks that load different saves: refused (exit $rc)" ||
		{ bad "ranks that load different saves: exit $rc"; sed 's/^/  | /' "$tmp/log" | tail -8; }
	fails 0 "${err}.*/layer-0002.ckpt: shape mismatch: the checkpoint has a mlp layer of 24640 parameters .* model's layer 2 is a mlp layer of 18496" \
		"another shape (mlp ffn 96)" --steps 1 --ffn 96 --load "$tmp/ck"
	fails 0 "${err}.*/manifest: model mismatch: the checkpoint has 10 layers, the model 12" \
		"another model (tiny-hybrid)" --model hybrid --steps 1 --load "$tmp/ck"
	fails 0 "${err}.*/manifest: seed mismatch" "another seed" --seed 7 --steps 1 --load "$tmp/ck"
	fails 0 "${err}.*/manifest: data mismatch" "another data source" --text "$src/models/data/corpus.txt" --steps 1 --load "$tmp/ck"
	;;

nan)
	# The NaN goes in after step 1: step 2's loss is NaN, and the last
	# progress line is step 1's.
	fails 4 "octopipe rank 3: error: step 2: loss is NaN" "a NaN loss ends the job" --steps 3 --inject-nan 1
	[ "$(grep -Eo '^step [0-9]+ loss' "$tmp/log" | tail -1)" = "step 1 loss" ] &&
		ok "the NaN's step number follows the progress lines (step 1 printed, step 2 NaN)" ||
		bad "the progress lines before the NaN: $(grep -E '^step' "$tmp/log" | tr '\n' ' ')"
	OCTO_INJECT_NAN=0 fails 0 "octopipe rank 0: error: step 1: loss is NaN" "a NaN loss, one process (OCTO_INJECT_NAN)" --steps 2
	;;

kill) kill_rank 4 2 --model hybrid ;;

dp)
	# Exact mode: one set of bits for every (D, stages), distributed
	# optimizer on or off, one layer or several per bucket (rank = replica
	# x stages + pipe_rank; 8 micro-batches a step in all).  tiny-dense
	# here; every layer kind through compiled programs in
	# tests/e2e/data_parallel.sh.  Under the sanitizers (OCTO_TEST_QUICK),
	# (2, 2) alone.
	for model in dense; do
		train "${model}11" 0 --model "$model" --exact --steps 2 || continue
		set -- "1 1" "2 1" "4 1" "1 2" "2 2"
		[ "${OCTO_TEST_QUICK:-0}" = 1 ] && set -- "2 2"
		for c in "$@"; do
			read -r d st <<<"$c"
			for opt in "" "--distopt --bucket 3"; do
				name=$model-$d-$st${opt:+-distopt}
				train "$name" $((d * st)) --model "$model" --exact --dp "$d" $opt --steps 2 || continue
				same "$tmp/${model}11/losses.txt" "$tmp/$name/losses.txt" "$model exact: losses, 1 process == D=$d x $st stage(s) ${opt:-(all-reduce)}"
				same "$tmp/${model}11/hash.txt" "$tmp/$name/hash.txt" "$model exact: weights and AdamW state, 1 process == D=$d x $st stage(s) ${opt:-(all-reduce)}"
			done
		done
	done
	# One loss line a step, from replica 0's head only.
	[ "$(grep -c '^step 1 loss' "$tmp/log")" = 1 ] && ok "one loss line per step with 2 replicas" ||
		bad "loss lines of step 1: $(grep -c '^step 1 loss' "$tmp/log")"
	# Without exact sums: D=2 differs from D=1 by the order of the float
	# sums only (measured: below 1e-8 relative in 4 steps).
	train f11 0 --model dense --steps 3 && train f21 2 --model dense --dp 2 --steps 3 &&
		if python3 - "$tmp/f11/losses.txt" "$tmp/f21/losses.txt" <<'EOF2'
import sys
a = [float.fromhex(l.split()[1]) for l in open(sys.argv[1])]
b = [float.fromhex(l.split()[1]) for l in open(sys.argv[2])]
rel = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("  max relative difference %.3g" % rel)
sys.exit(not (len(a) == len(b) == 3 and rel <= 1e-6))
EOF2
		then ok "float sums: D=2 losses within 1e-6 (relative) of D=1"; else bad "float sums: D=2 vs D=1"; fi
	# Resume across D: saved at D=2 with the distributed optimizer (the
	# moment shards gathered into whole files), resumed at D=1 and D=4
	# without it: the bits of an uninterrupted run.
	train straight 0 --model dense --exact --steps 4 || exit 1
	train first 2 --model dense --exact --dp 2 --distopt --steps 2 --save "$tmp/ck" || exit 1
	for c in "0 1" "4 4"; do
		read -r np d <<<"$c"
		train "again$d" "$np" --model dense --exact --dp "$d" --steps 2 --load "$tmp/ck" || continue
		cat "$tmp/first/losses.txt" "$tmp/again$d/losses.txt" >"$tmp/joined$d"
		same "$tmp/straight/losses.txt" "$tmp/joined$d" "exact: 2 steps at D=2 (distopt), save, 2 at D=$d == 4 straight: losses"
		same "$tmp/straight/hash.txt" "$tmp/again$d/hash.txt" "exact: 2 steps at D=2 (distopt), save, 2 at D=$d == 4 straight: weights"
	done
	fails 2 "octopipe rank [01]: error: rt_post_coll: all-reduce of layers 0..0 \(local 0..0, 16384 parameters\): a buffer of 65532 bytes, the bucket needs 65536 \(rt_coll_bytes\)" \
		"a bucket buffer 4 bytes short: refused" --dp 2 --bad-bucket --steps 1
	fails 2 "octopipe rank [01]: error: rt_post_coll: local layers 0..1 \(layers 0..1\) are not a bucket rt_model_init was given: .*layer 0 is in the bucket of local layers 0..0" \
		"distributed optimizer: a bucket rt_model_init was not given: refused" --dp 2 --distopt --bucket 2 --declare 1 --steps 1
	fails 4 "octopipe rank [0-3]: error: rt_model_hash: layer 0 differs between replica 0 \(rank 0, hash 0x[0-9a-f]+\) and replica 1 \(rank 2" \
		"replicas whose weights differ: the model hash names the layer and the replicas" --dp 2 --steps 1 --diverge 1
	kill_rank 4 3 --model dense --dp 2 --exact --distopt
	;;

stall)
	# Rank 1 hangs outside the runtime (the driver's pause()): whichever
	# rank times out first, its message names rank 1, not its own neighbour.
	# The deadline is the test's (20 s: far above a healthy step under ASan
	# on a loaded machine, so only the stall reaches it); no time asserted.
	# The three jobs wait out their deadlines idle, so they run side by
	# side, each in a directory of its own (tmp there; its verdicts counted
	# and printed after).
	export OCTO_COMM_TIMEOUT=20
	side() {
		local dir=$tmp/$1
		shift
		mkdir -p "$dir"
		(tmp=$dir && "$@") >"$dir/out" 2>&1 &
	}
	# In a step: the ranks waiting on rank 1 name it, and so does the first error.
	in_step() {
		fails 4 "octopipe rank [0-9]: error: timed out after 20 s waiting for: (recv from|send to) rank [0-9] .*: rank 1 stopped answering" \
			"rank 1 hangs: the ranks waiting on it time out and name it" --steps 3 --stall-rank 1
		first=$(grep -E '^octopipe rank [0-9]+: error:' "$tmp/log" | head -1)
		case $first in
		*"rank 1 stopped answering"*) ok "the first error names rank 1: ${first:0:200}" ;;
		*) bad "the first error: $first" ;;
		esac
	}
	side step in_step
	# The same in a collective: rank 1 hangs before the model hash.
	side coll fails 4 "octopipe rank [0-9]: error: rt_model_hash: timed out after 20 s in an operation of all ranks: rank 1 stopped answering" \
		"rank 1 hangs before a collective: the others name it" --steps 2 --stall-rank 1 --stall-step 2
	# And after the last one: MPI_Finalize has no deadline, rt_finalize's
	# barrier does.
	side end fails 4 "octopipe rank [0-9]: error: finalize: timed out after 20 s in an operation of all ranks: rank 1 stopped answering" \
		"rank 1 hangs after the last collective: the others name it" --steps 2 --stall-rank 1 --stall-step 1000 --stall-at-end
	wait
	for c in step coll end; do
		cat "$tmp/$c/out"
		pass=$((pass + $(grep -c '^ok: ' "$tmp/$c/out")))
		fail=$((fail + $(grep -c '^FAIL: ' "$tmp/$c/out")))
	done
	[ "$pass" = 4 ] || bad "the stalled jobs gave $pass verdicts of 4 expected"
	;;

sync)
	train buffered 4 --model hybrid --steps 2 --schedule 1f1b || exit 1
	OCTO_COMM_SYNC=1 train sync4 4 --model hybrid --steps 2 --schedule 1f1b &&
		ok "OCTO_COMM_SYNC=1: 4 ranks, 1F1B, trained to completion"
	same "$tmp/buffered/hash.txt" "$tmp/sync4/hash.txt" "synchronous sends: the same weights"
	OCTO_COMM_SYNC=1 train sync2 2 --model dense --steps 2 && ok "OCTO_COMM_SYNC=1: 2 ranks, GPipe, trained to completion"
	run 2 --exchange unsafe
	[ "$rc" = 0 ] && ok "send-wait-then-recv completes when sends are buffered" || bad "buffered exchange: exit $rc"
	OCTO_COMM_SYNC=1 OCTO_COMM_TIMEOUT=2 fails 2 "octopipe rank [01]: error: timed out after 2 s waiting for: send to rank [01] .*: the ranks wait for each other \(rank ([01]) waits for rank [01], which waits for rank \1" \
		"send-wait-then-recv under synchronous sends: caught, the cycle named" --exchange unsafe
	OCTO_COMM_SYNC=1 OCTO_COMM_TIMEOUT=2 run 2 --exchange safe
	[ "$rc" = 0 ] && ok "the same exchange as one group completes under synchronous sends" || bad "grouped exchange: exit $rc"
	;;

ckpt_atomic)
	# The last good save: 2 steps on 2 ranks.  committed DIR: what DIR/current names.
	committed() { cat "$1/current" 2>/dev/null; }
	train first 2 --model dense --steps 2 --save "$tmp/ck" || exit 1
	# Rank 1 cannot write its layers: a file size limit of 64 KiB on it
	# alone (every layer file is larger; SIGXFSZ ignored, so the write
	# fails with EFBIG) while rank 0 writes all of its own.  Over TCP: the
	# limit would also stop Open MPI's shared-memory transport, whose
	# segment is a file.
	tcp=("${MPIRUN[@]/self,vader/self,tcp}")
	"${tcp[@]}" -np 1 "$drv" --model dense --steps 1 --load "$tmp/ck" --save "$tmp/ck" : \
		-np 1 bash -c 'trap "" XFSZ; ulimit -f 64; exec "$0" "$@"' "$drv" --model dense --steps 1 \
		--load "$tmp/ck" --save "$tmp/ck" >"$tmp/log" 2>&1
	rc=$?
	if [ "$rc" != 0 ] && grep -Eq "octopipe rank 1: error: checkpoint .*/layer-0005.ckpt.tmp: write: File too large|octopipe rank 0: error: checkpoint .*: not saved: rank 1 could not write its layers .*: checkpoint .*/layer-0005.ckpt.tmp: write: File too large" "$tmp/log"; then
		ok "rank 1 cannot write: exit $rc, naming it: $(grep -E '^octopipe rank [0-9]+: error' "$tmp/log" | head -1 | cut -c1-170)"
	else
		bad "rank 1 cannot write: exit $rc"
		sed 's/^/  | /' "$tmp/log" | tail -20
	fi
	[ "$(committed "$tmp/ck")" = gen-000001 ] && [ "$(ls "$tmp/ck" | tr '\n' ' ')" = "current gen-000001 " ] &&
		ok "the commit still names the last good save (gen-000001); the failed save's files are gone" ||
		bad "after the failed save: current $(committed "$tmp/ck"), $(ls "$tmp/ck" | tr '\n' ' ')"
	train again 2 --model dense --steps 0 --load "$tmp/ck" || exit 1
	same "$tmp/first/hash.txt" "$tmp/again/hash.txt" "the failed save's directory resumes with the last good save's bits (step 2)"
	train next 2 --model dense --steps 1 --load "$tmp/ck" --save "$tmp/ck" || exit 1
	[ "$(committed "$tmp/ck")" = gen-000002 ] && [ "$(ls "$tmp/ck" | tr '\n' ' ')" = "current gen-000002 " ] &&
		ok "the next save commits gen-000002 and removes the old one" ||
		bad "after the next save: $(ls "$tmp/ck" | tr '\n' ' ')"
	train resumed 4 --model dense --steps 0 --load "$tmp/ck" --schedule 1f1b || exit 1
	same "$tmp/next/hash.txt" "$tmp/resumed/hash.txt" "  ... and it resumes on another plan (4 ranks, 1F1B)"

	# A filesystem too small for two saves: the second runs out of space.
	mkdir -p "$tmp/mnt"
	kb=$(du -sk "$tmp/ck/$(committed "$tmp/ck")" | cut -f1)
	[ "${kb:-0}" -gt 100 ] || { bad "the size of a save: '$kb' KiB"; kb=2000; } # size=0 would be unlimited
	if mount -t tmpfs -o size=$((kb * 3 / 2))k tmpfs "$tmp/mnt" 2>"$tmp/mount.err"; then
		train small 2 --model dense --steps 2 --save "$tmp/mnt/ck" || exit 1
		fails 2 "octopipe rank [01]: error: checkpoint .*(No space left on device|not saved: rank [01] could not write its layers)" \
			"a tmpfs too small for the second save: the job fails, naming the rank" \
			--model dense --steps 1 --load "$tmp/mnt/ck" --save "$tmp/mnt/ck"
		[ "$(committed "$tmp/mnt/ck")" = gen-000001 ] && [ "$(ls "$tmp/mnt/ck" | tr '\n' ' ')" = "current gen-000001 " ] &&
			ok "  ... the commit names the first save, and the space the failed one took is free again" ||
			bad "tmpfs: current $(committed "$tmp/mnt/ck"), $(ls "$tmp/mnt/ck" | tr '\n' ' ')"
		train small2 2 --model dense --steps 0 --load "$tmp/mnt/ck" || exit 1
		same "$tmp/small/hash.txt" "$tmp/small2/hash.txt" "  ... and it resumes with the first save's bits"
		umount "$tmp/mnt"
	else
		echo "note: no tmpfs ($(cat "$tmp/mount.err")): the full filesystem is not tried; the file size limit above is"
	fi
	;;

ckpt_nan)
	if ! command -v python3 >/dev/null; then
		echo "SKIP: python3 rewrites the checkpoint"
		exit 77
	fi
	train save 2 --model dense --steps 2 --save "$tmp/ck" || exit 1
	err='octopipe rank [0-9]+: error: checkpoint '
	for c in "m 5 nan AdamW first moment \\(m\\) is NaN" "v 7 -1 AdamW second moment \\(v\\) is negative" \
		"p 9 inf parameters is infinite"; do
		set -- $c
		rm -rf "$tmp/c" && cp -r "$tmp/ck" "$tmp/c" && g=$tmp/c/$(cat "$tmp/c/current")
		poison "$g/layer-0003.ckpt" "$1" "$2" "$3"
		shift 3
		fails 2 "${err}.*/layer-0003.ckpt: layer 3 \(attention\), tensor [^ ]+: element [0-9]+ of the $*" \
			"$* in layer 3 (checksums recomputed): refused at load" --model dense --steps 1 --load "$tmp/c"
	done
	# Counters that would overflow (a step of 2^63 - 2 trained on at step
	# -2^63 and exited 0): refused at load, or at the step that reaches 2^62.
	for c in "9223372036854775806 16" "2 9223372036854775800"; do
		set -- $c
		rm -rf "$tmp/c" && cp -r "$tmp/ck" "$tmp/c" && restep "$tmp/c/$(cat "$tmp/c/current")" "$1" "$2"
		fails 2 "${err}.*/manifest: step $1, data position $2: beyond what this runtime counts to \(2\^62\)" \
			"step $1, data position $2 (checksums recomputed): refused at load" --model dense --steps 1 --load "$tmp/c"
	done
	rm -rf "$tmp/c" && cp -r "$tmp/ck" "$tmp/c" && restep "$tmp/c/$(cat "$tmp/c/current")" 4611686018427387903 0
	fails 2 "octopipe rank [01]: error: rt_step_begin: step 4611686018427387905: the step count .* is at this runtime's limit \(2\^62\)" \
		"a step count that reaches 2^62: the step after it is refused" --model dense --steps 3 --load "$tmp/c"
	# A NaN weight after the last step: not saved, and the last save stays.
	fails 2 "octopipe rank [01]: error: (checkpoint .*: not saved: rank 1 could not write its layers .*: )?checkpoint .*/layer-0009.ckpt: layer 9 \(head\), tensor [^ ]+: element 0 of the parameters is NaN \(not saved\)" \
		"a NaN weight at the save: refused, naming the layer and the tensor" \
		--model dense --steps 1 --load "$tmp/ck" --save "$tmp/ck" --inject-nan 3
	train again 2 --model dense --steps 0 --load "$tmp/ck" || exit 1
	same "$tmp/save/hash.txt" "$tmp/again/hash.txt" "  ... and the last save still resumes, bit for bit"
	;;

ckpt_dir)
	: >"$tmp/file"
	# Rank 0 makes the directory; whichever rank ends the job, its message says why.
	fails 2 "octopipe rank [01]: error: checkpoint .*/file/ck: (rank 0 could not create the directory: checkpoint .*/file/ck: )?cannot create the directory: Not a directory" \
		"a --save directory under a file: refused" --model dense --steps 3 --save "$tmp/file/ck"
	grep -q '^step 1 loss' "$tmp/log" && bad "  ... after training" || ok "  ... before step 1"
	# A save removes old generations: only the files a save writes, and
	# never through a link (here gen-000001 links to a directory of the
	# user's, and an old generation holds a note of theirs).
	mkdir -p "$tmp/mine" "$tmp/ck/gen-000002" && echo keep >"$tmp/mine/notes" && echo keep >"$tmp/ck/gen-000002/notes"
	ln -s "$tmp/mine" "$tmp/ck/gen-000001"
	train save 2 --model dense --steps 1 --save "$tmp/ck" || exit 1
	[ "$(cat "$tmp/ck/current")" = gen-000003 ] && [ -f "$tmp/mine/notes" ] && [ -f "$tmp/ck/gen-000002/notes" ] &&
		ok "a save keeps what it did not write: a linked directory's files, a file in an old generation" ||
		bad "after the save: current $(cat "$tmp/ck/current"), $(ls "$tmp/mine" "$tmp/ck/gen-000002" | tr '\n' ' ')"
	# The highest generation a load reads back exists: the save fails (a
	# save numbered past it committed a current no load could read).
	rm -rf "$tmp/ckq" && mkdir -p "$tmp/ckq/gen-999999999999999"
	fails 2 "octopipe rank [01]: error: checkpoint .*/ckq: (not saved: rank 0 could not make the new save's directory .*: checkpoint .*/ckq: )?gen-999999999999999 exists, and generations are numbered up to 999999999999999" \
		"a directory holding gen-999999999999999: the save is refused" --model dense --steps 1 --save "$tmp/ckq"
	# A FIFO where the commit's temporary goes: replaced, not opened.
	rm -rf "$tmp/ck2" && mkdir "$tmp/ck2" && mkfifo "$tmp/ck2/current.tmp"
	train fifo 2 --model dense --steps 1 --save "$tmp/ck2" && [ "$(cat "$tmp/ck2/current")" = gen-000001 ] &&
		ok "a FIFO named current.tmp: the save commits" || bad "a FIFO named current.tmp"
	;;

data)
	fails 2 "octopipe rank [01]: error: text file /dev/zero: not a regular file \(a character device\)" \
		"/dev/zero as the text: refused at start" --model dense --text /dev/zero --steps 1
	fails 2 "octopipe rank [01]: error: text file .*: not a regular file \(a directory\)" \
		"a directory as the text: refused" --model dense --text "$tmp" --steps 1
	mkfifo "$tmp/fifo"
	fails 2 "octopipe rank [01]: error: text file .*/fifo: not a regular file \(a pipe\)" \
		"a FIFO as the text: refused, not waited on" --model dense --text "$tmp/fifo" --steps 1
	head -c 40 "$src/models/data/corpus.txt" >"$tmp/short.txt"
	fails 2 "octopipe rank [01]: error: text file .*/short.txt: 40 bytes, fewer than one sequence \(seq \+ 1 = 65 bytes\)" \
		"a text shorter than one sequence: refused" --model dense --text "$tmp/short.txt" --steps 1
	;;

stop)
	# SIGSTOP rank 2 of 4 mid-training: no rank dies, so only the waits'
	# deadline notices; the first message must name rank 2, whichever
	# rank's wait ends first.  The deadline is generous (a loaded machine,
	# ASan): a healthy step never comes near it.
	mkdir -p "$tmp/pids"
	(OCTO_COMM_TIMEOUT=10 "${MPIRUN[@]}" -np 4 "$drv" --model hybrid --steps 100000 --pid-dir "$tmp/pids" >"$tmp/log" 2>&1
	 echo $? >"$tmp/rc") &
	job=$!
	for _ in $(seq 600); do
		[ "$(ls "$tmp/pids" | wc -l)" = 4 ] && grep -q "^step 2 " "$tmp/log" && break
		sleep 0.1
	done
	victim=2
	pid=$(cat "$tmp/pids/rank$victim.pid" 2>/dev/null)
	if [ -z "$pid" ]; then
		bad "the job did not start"
		sed 's/^/  | /' "$tmp/log" | tail -20
	else
		kill -STOP "$pid"
		for _ in $(seq 1000); do
			[ -f "$tmp/rc" ] && break
			sleep 0.1
		done
		first=$(grep -E '^octopipe rank [0-9]+: error:' "$tmp/log" | head -1)
		if [ ! -f "$tmp/rc" ]; then
			bad "rank $victim stopped: the job still runs"
			kill -9 "$pid" 2>/dev/null
		elif [ "$(cat "$tmp/rc")" != 0 ] && [[ $first == *"rank $victim stopped answering"* ]]; then
			ok "rank $victim stopped: exit $(cat "$tmp/rc"), the first message names it: ${first:0:260}"
		else
			bad "rank $victim stopped: exit $(cat "$tmp/rc"), first message: $first"
			sed 's/^/  | /' "$tmp/log" | tail -20
		fi
		kill -CONT "$pid" 2>/dev/null
	fi
	wait "$job" 2>/dev/null
	# Rank 1 stopped before MPI start-up (its shell stops itself before it
	# becomes the driver): rank 0 waits inside MPI_Init, which no deadline
	# of the runtime's reached before; its watchdog now ends it, saying why.
	OCTO_COMM_TIMEOUT=20 capped "${MPIRUN[@]}" -np 1 "$drv" --model dense --steps 1 : \
		-np 1 bash -c 'kill -STOP $$; exec "$0" "$@"' "$drv" --model dense --steps 1 >"$tmp/log" 2>&1
	rc=$?
	if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$rc" != 137 ] &&
		grep -q "octopipe rank 0: error: MPI start-up (MPI_Init) did not finish within 20 s (OCTO_COMM_TIMEOUT): a rank of the job is stopped" "$tmp/log"; then
		ok "a rank stopped before MPI start-up: the other ends the job (exit $rc), saying why"
	else
		bad "a rank stopped before MPI start-up: exit $rc"
		sed 's/^/  | /' "$tmp/log" | tail -10
	fi
	;;

programs)
	if [ -z "$octopipe" ] || [ ! -x "$octopipe" ]; then
		echo "SKIP: no octopipe"
		exit 77
	fi
	# compile NAME YAML ARGS...: 2 ranks in $tmp/NAME.
	compile() {
		local name=$1 yaml=$2
		shift 2
		"$octopipe" compile "$yaml" --devices 2 -o "$tmp/$name" "$@" >"$tmp/compile.log" 2>&1 ||
			{ bad "compile $name"; sed 's/^/  | /' "$tmp/compile.log" | tail -5; exit 1; }
	}
	given() { printf 'plan:\n  partition: given\n  stage_layers: %s\n' "$1" | cat "$src/models/tiny-dense.yaml" -; }
	given "[5, 5]" >"$tmp/p55.yaml"
	given "[3, 7]" >"$tmp/p37.yaml"
	sed 's/^  seed: 1$/  seed: 2/' "$tmp/p55.yaml" >"$tmp/seed2.yaml"
	sed 's/^  vocab: 256$/  vocab: 128/' "$tmp/p55.yaml" >"$tmp/v128.yaml"
	compile a "$tmp/p55.yaml" --schedule 1f1b
	compile seed "$tmp/seed2.yaml" --schedule 1f1b
	compile plan "$tmp/p37.yaml" --schedule 1f1b
	compile v128 "$tmp/v128.yaml" --schedule 1f1b
	hash_of() { "$1" --help | sed -n 's/^compile hash \(0x[0-9a-f]*\)$/\1/p'; }
	ha=$(hash_of "$tmp/a/rank0")
	[ -n "$ha" ] && [ "$ha" = "$(hash_of "$tmp/a/rank1")" ] && [ "$ha" != "$(hash_of "$tmp/seed/rank1")" ] &&
		[ "$ha" != "$(hash_of "$tmp/plan/rank1")" ] && ok "--help shows the compile hash: one per compile ($ha)" ||
		bad "compile hashes: '$ha'"
	# Rank 0 of compile a with rank 1 of another; a hang would end at the
	# (long) deadline with another message.
	for other in seed plan; do
		OCTO_COMM_TIMEOUT=100 "${MPIRUN[@]}" -np 1 "$tmp/a/rank0" --steps 2 : -np 1 "$tmp/$other/rank1" --steps 2 >"$tmp/log" 2>&1
		rc=$?
		hb=$(hash_of "$tmp/$other/rank1")
		if [ "$rc" != 0 ] && grep -q "rank 1 and rank 0 are programs of different compiles (compile hash $hb on rank 1, $ha on rank 0" "$tmp/log" &&
			! grep -q '^step 1 loss' "$tmp/log"; then
			ok "a rank of another $other: refused at start, naming both ranks and both hashes"
		else
			bad "a rank of another $other: exit $rc"
			sed 's/^/  | /' "$tmp/log" | tail -8
		fi
	done
	# Ranks of one compile started with different options (by hand, not by
	# 'launch'): refused at start, not trained from two sources or hung.
	mix() { OCTO_COMM_TIMEOUT=100 capped "${MPIRUN[@]}" -np 1 "$tmp/a/rank0" $1 : -np 1 "$tmp/a/rank1" $2 >"$tmp/log" 2>&1; rc=$?; }
	for c in "--steps 3|--steps 2|different options (--steps 2 on rank 1, 3 on rank 0)" \
		"--steps 2 --resume $tmp/nock|--steps 2|different options (--resume given on rank 0, not on rank 1)" \
		"--steps 2 --checkpoint $tmp/ck1|--steps 2 --checkpoint $tmp/ck2|different options (--checkpoint names another path on rank 1 than on rank 0)" \
		"--steps 2 --data $src/models/data/corpus.txt|--steps 2|train on different data (synthetic tokens on rank 1, a text file of hash"; do
		IFS='|' read -r a0 a1 pat <<<"$c"
		mix "$a0" "$a1"
		if [ "$rc" != 0 ] && grep -qF -- "$pat" "$tmp/log" && ! grep -q '^step 1 loss' "$tmp/log"; then
			ok "rank 0 with '$a0', rank 1 with '$a1': refused at start"
		else
			bad "rank 0 with '$a0', rank 1 with '$a1': exit $rc, expected /$pat/ before step 1"
			sed 's/^/  | /' "$tmp/log" | tail -8
		fi
	done
	# expect_prog WHAT PATTERN CMD...: fails, PATTERN (fixed) in its output, before step 1.
	expect_prog() {
		local what=$1 pat=$2
		shift 2
		"$@" >"$tmp/log" 2>&1
		rc=$?
		if [ "$rc" != 0 ] && grep -qF -- "$pat" "$tmp/log" && ! grep -q '^step 1 loss' "$tmp/log"; then
			ok "$what (exit $rc)"
		else
			bad "$what: exit $rc, expected /$pat/ before step 1"
			sed 's/^/  | /' "$tmp/log" | tail -8
		fi
	}
	: >"$tmp/file"
	expect_prog "--checkpoint that cannot be created: refused before step 1" \
		"checkpoint $tmp/file/ck: cannot create the directory: Not a directory" \
		"$tmp/a/launch" --steps 2 --checkpoint "$tmp/file/ck"
	expect_prog "--trace under a file: refused before step 1, not after the run" \
		"trace $tmp/file/trace-rank0.json: cannot be written: Not a directory" \
		"$tmp/a/launch" --steps 2 --trace "$tmp/file"
	expect_prog "--profile under a file: refused before profiling" \
		"profile $tmp/file/p.yaml: cannot be written: Not a directory" \
		"$tmp/a/launch" --profile "$tmp/file/p.yaml"
	expect_prog "--data /dev/zero: refused at start" "text file /dev/zero: not a regular file (a character device)" \
		capped "$tmp/a/launch" --steps 1 --data /dev/zero
	expect_prog "--data on a model of vocabulary 128: named" \
		"text data (one token per byte) needs a vocabulary of at least 256, the model's is 128" \
		"$tmp/v128/launch" --steps 1 --data "$src/models/data/corpus.txt"
	# lr 1e39 is inf as a float: named by the ranks (or refused by compile,
	# where the value is read), not "invalid argument".
	sed 's/^  lr: 1e-3$/  lr: 1e39/' "$tmp/p55.yaml" >"$tmp/lr.yaml"
	if "$octopipe" compile "$tmp/lr.yaml" --devices 2 -o "$tmp/lr" --schedule 1f1b >"$tmp/compile.log" 2>&1; then
		expect_prog "lr 1e39: the ranks name it" "model: bad optimizer settings (lr inf, weight decay 0, betas 0.9 0.999" \
			"$tmp/lr/launch" --steps 1
	elif grep -q "lr" "$tmp/compile.log"; then
		ok "lr 1e39: refused by compile: $(head -1 "$tmp/compile.log")"
	else
		bad "lr 1e39: compile failed without naming lr"
		sed 's/^/  | /' "$tmp/compile.log" | tail -5
	fi
	;;

arena)
	fails 2 "octopipe rank [01]: error: arena: out of memory: the model's 5 layers need [0-9]+ bytes" "an arena too small" --arena 100000
	# The deadline's setting: decimal only, as the flags (' 5' and 0x10 were taken).
	for v in " 5" 0x10 inf; do
		OCTO_COMM_TIMEOUT=$v fails 2 "octopipe rank [01]: error: OCTO_COMM_TIMEOUT='$v': expected seconds, a decimal number above 0 and at most 1e9" \
			"OCTO_COMM_TIMEOUT='$v': refused" --steps 1
	done
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
