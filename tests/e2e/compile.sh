#!/usr/bin/env bash
# compile.sh OCTOPIPE SRCDIR: `octopipe compile` and the programs it makes,
# beyond plan independence (plan_independence.sh): what DIR holds, --emit,
# the refusals (no proof, a deadlock, another backend, the CUDA target),
# --help without MPI, the binaries' library dependencies, an .opir input,
# checkpoints across plans, traces, profiles, a wrong launch, a moved
# directory.  Prints "N passed, M failed"; exit 1 on any failure, 77 (skip)
# without mpirun.
set -u
octopipe=$1
src=$2
if ! command -v mpirun >/dev/null 2>&1; then
	echo "SKIP: mpirun not found"
	exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
pass=0 failed=0
ok() { echo "ok: $1"; pass=$((pass + 1)); }
bad() {
	echo "FAIL: $1"
	[ -n "${2:-}" ] && [ -f "$2" ] && tail -12 "$2" | sed 's/^/    /'
	failed=$((failed + 1))
}
# expect NAME STATUS PATTERN CMD...: exit status and a line of its output.
expect() {
	local name=$1 want=$2 pat=$3
	shift 3
	"$@" >"$tmp/out" 2>&1
	local st=$?
	if [ $st -ne "$want" ]; then
		bad "$name: exit $st, expected $want" "$tmp/out"
	elif ! grep -q -- "$pat" "$tmp/out"; then
		bad "$name: no '$pat' in the output" "$tmp/out"
	else
		ok "$name"
	fi
}
hash_of() { sed -n 's/^model hash \(0x[0-9a-f]*\) .*/\1/p' "$1"; }
losses_of() { sed -n 's/^step \([0-9]*\) loss [^ ]* (\([^)]*\)).*/\1 \2/p' "$1"; }

dense=$src/models/tiny-dense.yaml
hybrid=$src/models/tiny-hybrid.yaml

# ---- what compile writes ------------------------------------------------------
d=$tmp/h4
expect "compile tiny-hybrid, 4 ranks, --emit=llvm,obj" 0 "compiled tiny-hybrid for 4 CPU ranks" \
	"$octopipe" compile "$hybrid" --devices 4 --emit=llvm,obj -o "$d"
missing=
for f in rank0 rank1 rank2 rank3 launch plan.opir report.md timeline.svg corpus.txt rank0.ll rank3.o; do
	[ -e "$d/$f" ] || missing="$missing $f"
done
[ -z "$missing" ] && ok "DIR holds the ranks, launch, plan, report, timeline, text, .ll, .o" || bad "DIR lacks$missing"
[ -x "$d/launch" ] && grep -qx "RANKS='rank0 rank1 rank2 rank3'" "$d/launch" && grep -q -- '--allow-run-as-root' "$d/launch" &&
	ok "launch: the 4 rank programs, root flags (its behaviour: launch.sh)" || bad "launch script" "$d/launch"
head -1 "$d/rank0.ll" | grep -q '^; ModuleID' && grep -q '@octo_ops = private unnamed_addr constant' "$d/rank0.ll" &&
	ok "rank0.ll: the module with its op table" || bad "rank0.ll" "$d/rank0.ll"
grep -q '^| lower bound |' "$d/report.md" && grep -q 'predicted step time' "$d/report.md" &&
	grep -q '^| 1f1b |' "$d/report.md" && ok "report.md: baselines, lower bound, prediction" || bad "report.md" "$d/report.md"
expect "plan.opir carries the proof and verifies" 0 "deadlock-free under mpi" "$octopipe" verify "$d/plan.opir"
expect "rank2 --help says what it is, without MPI" 0 "this rank holds: stage S" "$d/rank2" --help
expect "a bad rank option: usage error, exit 2" 2 "unknown option '--stpes'" "$d/rank0" --stpes 3

# Only system libraries: nothing from the build or the source tree, nothing missing.
if ldd "$d/rank0" >"$tmp/ldd" 2>&1 && ! grep -q 'not found' "$tmp/ldd" &&
	! grep -v -E '^\s*(linux-vdso|/lib|[^ ]+ => (/lib|/usr/lib))' "$tmp/ldd" | grep -q . &&
	grep -q libmpi "$tmp/ldd" && grep -q openblas "$tmp/ldd"; then
	ok "rank0 links the runtime statically: ldd shows system libraries only (MPI, OpenBLAS, libc)"
else
	bad "rank0's libraries" "$tmp/ldd"
fi

# ---- running, moved, wrong launch --------------------------------------------------
mv "$d" "$tmp/moved"
d=$tmp/moved
expect "the moved directory trains (text found next to the programs)" 0 "^summary: 2 steps" "$d/launch" --steps 2
grep -q '^step 2 loss .* lr .* tokens/s .* ms eta [0-9]*:[0-9][0-9]:[0-9][0-9]$' "$tmp/out" && grep -q '^model hash 0x' "$tmp/out" &&
	ok "each step: loss, lr, tokens/s, step time, ETA; a summary and the model hash" || bad "step lines" "$tmp/out"
# The prediction assumes a core per rank: the ratio says when 4 ranks share fewer.
cores=$(getconf _NPROCESSORS_ONLN)
if [ "$cores" -lt 4 ]; then
	grep -q "(measured/predicted [0-9.]*; 4 ranks share $cores cores, and the prediction assumes one per rank)" "$tmp/out" &&
		ok "measured/predicted: 4 ranks on $cores cores, said beside the ratio" || bad "no ranks-share-cores note" "$tmp/out"
else
	grep -q "(measured/predicted [0-9.]*)$" "$tmp/out" &&
		ok "measured/predicted: a core per rank, no note" || bad "a ranks-share-cores note on $cores cores" "$tmp/out"
fi
expect "rank1 run as rank 0 of 1 is refused, naming both (exit 3: RT_EARG)" 3 "this is the program of rank 1 of 4, but it runs as rank 0 of 1" \
	mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 1 "$d/rank1" --steps 1

# ---- refusals -----------------------------------------------------------------
expect "no proof: codegen refuses" 1 "no deadlock-freedom proof" \
	"$octopipe" compile "$dense" --devices 2 --passes=cost,partition,place,schedule -o "$tmp/np"
expect "a program that can deadlock: refused with the cycle" 1 "can deadlock under mpi" \
	"$octopipe" compile "$src/tests/e2e/deadlock-mpi.opir" -o "$tmp/dl"
[ ! -e "$tmp/dl/rank0" ] && ok "nothing written for a refused program" || bad "a refused program left executables"
expect "--backend nccl for CPU ranks: refused" 1 "--backend must be mpi" \
	"$octopipe" compile "$dense" --backend nccl -o "$tmp/x"
sed -e "s#data/corpus.txt#$src/models/data/corpus.txt#" "$dense" >"$tmp/idle.yaml"
printf 'plan:\n  partition: given\n  stage_layers: [5, 5]\n  placement: [0, 2]\n' >>"$tmp/idle.yaml"
expect "a device without a stage: refused" 1 "D1 holds no stage" \
	"$octopipe" compile "$tmp/idle.yaml" --devices 3 -o "$tmp/idle"
# --target cuda: built with the CUDA toolkit (tests/cuda covers it), else "not built yet".
if "$octopipe" compile "$dense" --target cuda -o "$tmp/cu" >"$tmp/out" 2>&1; then
	[ -x "$tmp/cu/rank0" ] && ok "--target cuda: rank executables" || bad "--target cuda: no rank0" "$tmp/out"
else
	expect "--target cuda: not built yet (exit 2)" 2 "not built yet" "$octopipe" compile "$dense" --target cuda -o "$tmp/x"
fi
expect "compile without -o: error" 1 "give it with -o DIR" "$octopipe" compile "$dense"
expect "--emit=asm: error" 1 "--emit takes llvm, obj or both" "$octopipe" compile "$dense" --emit=asm -o "$tmp/x"

# ---- an .opir input trains like its YAML ----------------------------------------
"$octopipe" plan "$dense" --devices 2 --dp 1 --schedule zbh1 --backend mpi -o "$tmp/p.opir" >/dev/null 2>&1
expect "compile a plan (.opir)" 0 "compiled tiny-dense for 2 CPU ranks" "$octopipe" compile "$tmp/p.opir" -o "$tmp/po"
expect "compile the same from YAML" 0 "compiled" "$octopipe" compile "$dense" --devices 2 --schedule zbh1 -o "$tmp/py"
# An untuned compile has no tuner to report on: no progress line (its
# baselines once printed "tune: 11259.5 s, ..." from a clock never started).
! grep -q '^tune:' "$tmp/out" && ok "an untuned compile prints no tuner progress" ||
	bad "an untuned compile printed a tuner progress line" "$tmp/out"
"$tmp/po/launch" --steps 2 >"$tmp/po.log" 2>&1
"$tmp/py/launch" --steps 2 >"$tmp/py.log" 2>&1
[ -n "$(hash_of "$tmp/po.log")" ] && [ "$(hash_of "$tmp/po.log")" = "$(hash_of "$tmp/py.log")" ] &&
	ok ".opir and YAML give the same weights" || bad ".opir vs YAML" "$tmp/po.log"
"$octopipe" plan "$dense" --devices 2 --dp 1 --schedule 1f1b -o "$tmp/nccl.opir" >/dev/null 2>&1
expect "an .opir lowered for nccl: refused" 1 "lowered for nccl" "$octopipe" compile "$tmp/nccl.opir" -o "$tmp/x"

# ---- checkpoints across plans: 4 steps on 2 ranks + 4 on 3 == 8 on 1 --------------
"$octopipe" compile "$hybrid" --devices 1 --schedule 1f1b -o "$tmp/c1" >/dev/null 2>&1
"$octopipe" compile "$hybrid" --devices 3 --schedule zbv -o "$tmp/c3" >/dev/null 2>&1
"$tmp/c1/launch" --steps 8 >"$tmp/c8.log" 2>&1
"$octopipe" compile "$hybrid" --devices 2 --schedule i1f1b --chunks 2 -o "$tmp/c2" >/dev/null 2>&1
"$tmp/c2/launch" --steps 4 --checkpoint "$tmp/ck" >"$tmp/ca.log" 2>&1
"$tmp/c3/launch" --steps 4 --resume "$tmp/ck" >"$tmp/cb.log" 2>&1
if [ -n "$(hash_of "$tmp/c8.log")" ] && [ "$(hash_of "$tmp/c8.log")" = "$(hash_of "$tmp/cb.log")" ] &&
	[ "$(losses_of "$tmp/c8.log" | tail -4)" = "$(losses_of "$tmp/cb.log")" ]; then
	ok "--checkpoint on 2 ranks (i1f1b), --resume on 3 (zbv): the same steps 5..8 and weights as 8 on 1"
else
	bad "checkpoint and resume across plans" "$tmp/cb.log"
fi

# ---- trace and profile -----------------------------------------------------------
"$tmp/c2/launch" --steps 1 --trace "$tmp/tr" >"$tmp/tr.log" 2>&1
[ -s "$tmp/tr/trace-rank0.json" ] && [ -s "$tmp/tr/trace-rank1.json" ] &&
	ok "--trace DIR: a trace per rank" || bad "--trace" "$tmp/tr.log"
"$tmp/c2/launch" --profile "$tmp/prof.yaml" >"$tmp/pr.log" 2>&1
if grep -q '^units: ms' "$tmp/prof.yaml" 2>/dev/null &&
	"$octopipe" plan "$hybrid" --devices 2 --profile "$tmp/prof.yaml" >/dev/null 2>&1; then
	ok "--profile FILE: a profile that 'octopipe plan --profile' reads"
else
	bad "--profile" "$tmp/pr.log"
fi

echo "$pass passed, $failed failed"
[ $failed -eq 0 ]
