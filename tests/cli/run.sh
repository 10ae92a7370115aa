#!/usr/bin/env bash
# Command-line tests: exit status and a piece of the output of each command.
#   run.sh OCTOPIPE REPO_ROOT
set -u
bin=$1 root=$2
cd "$root" || exit 2
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect STATUS TEXT ARGS...: run octopipe ARGS; the exit status must be
# STATUS and stdout+stderr must contain TEXT (a fixed string).
expect() {
  local want_rc=$1 text=$2; shift 2
  local out rc
  out=$(timeout 300 "$bin" "$@" 2>&1); rc=$?
  if [ $rc -ne "$want_rc" ]; then
    printf 'FAIL octopipe %s: exit status %d, expected %d\n%s\n' "$*" $rc "$want_rc" "$(printf '%s\n' "$out" | head -n 5)"
    fail=$((fail + 1))
  elif ! printf '%s' "$out" | grep -qF -- "$text"; then
    printf 'FAIL octopipe %s: output lacks "%s"\n%s\n' "$*" "$text" "$(printf '%s\n' "$out" | head -n 10)"
    fail=$((fail + 1))
  else
    pass=$((pass + 1))
  fi
}

m=models/tiny-hybrid.yaml
# The tuner's first plan refused once its memory is planned: plan says so.
expect 0 "the first search's plan (" plan $m --devices 4 --dp 1 --recompute none --cluster tests/cli/tight-6800k.yaml
# help and usage
expect 1 "usage: octopipe COMMAND"
expect 0 "usage: octopipe COMMAND" --help
expect 0 "--microbatches M" plan --help
expect 0 "--microbatches M" plan -h
expect 0 "default pipeline: cost partition place schedule tune" opt --help
expect 0 "octopipe 0.1" --version
expect 1 "unknown command 'paln'; did you mean 'plan'?" paln $m
expect 1 "no input file" plan
expect 1 "more than one input file" plan $m $m
# options
expect 1 "unknown option '--devce'; did you mean '--devices'?" plan $m --devce 4
expect 1 "unknown option '--json'" opt tests/golden/tiny-dense-2x2.expected --json
expect 1 "option '--devices' needs a value" plan $m --devices
expect 1 "--devices must be an integer in 1..65536, got '0'" plan $m --devices 0
expect 1 "--devices must be an integer in 1..65536, got '4x'" plan $m --devices=4x
expect 1 "--microbatches must be an integer" plan $m --microbatches -3
expect 1 "option '--json' takes no value" plan $m --json=1
expect 1 "option '--devices' given twice" plan $m --devices 2 --devices 3
expect 1 "unknown schedule 'zzz'" plan $m --schedule zzz
expect 1 "unknown partition 'given'" plan $m --partition given
expect 1 "--chunks must be an integer in 1..1024" plan $m --chunks 0
expect 1 "unknown cluster preset 'h100'" plan $m --cluster h100
expect 1 "unknown pass 'plac'; did you mean 'place'?" plan $m --passes=partition,plac
expect 1 "unknown pass 'sched' in --print-ir-after" plan $m --print-ir-after=sched
expect 1 "<command line>:1:" opt tests/golden/place-given.opir --passes=plac
# an IR file carries its own cluster and plan: a model's option is refused, not dropped
expect 1 "--devices applies to a model, not to IR text" sim tests/golden/place-given.opir --devices 3
expect 1 "place-given.opir:6:1: error: sim: the plan has no device programs" sim tests/golden/place-given.opir
expect 1 "--backend applies to a model, not to IR text" sim tests/deadlock/exchange-mpi.opir --backend nccl
expect 1 "--tune-budget is for a model" sim tests/deadlock/exchange-mpi.opir --tune-budget 1
expect 1 "--schedule applies to a model, not to IR text" compile tests/deadlock/exchange-mpi.opir --schedule zbv -o "$tmp/c"
# files
expect 1 "missing.yaml:1:1: error: cannot open file" plan missing.yaml
expect 1 "tests:1:1: error: cannot read file: it is a directory, not a regular file" plan tests
# special files are refused, not read until memory runs out (or a writer comes)
expect 1 "/dev/zero:1:1: error: cannot read file: it is a character device, not a regular file" plan /dev/zero
expect 1 "/dev/zero:1:1: error: cannot read file: it is a character device" verify /dev/zero
expect 1 "/dev/zero:1:1: error: cannot read file: it is a character device" sim /dev/zero
expect 1 "/dev/zero:1:1: error: cannot read file: it is a character device" plan $m --profile /dev/zero
expect 1 "/dev/zero:1:1: error: cannot read file: it is a character device" plan --profile /dev/zero
expect 1 "/dev/zero:1:1: error: cannot read file: it is a character device" plan $m --cluster /dev/zero
mkfifo "$tmp/fifo"
expect 1 "fifo:1:1: error: cannot read file: it is a FIFO (named pipe), not a regular file" verify "$tmp/fifo"
expect 1 "fifo:1:1: error: cannot read file: it is a FIFO (named pipe)" plan $m --cluster "$tmp/fifo"
# and a regular file has a size limit (a sparse file: no disk used)
truncate -s 300M "$tmp/big.yaml"
expect 1 "big.yaml:1:1: error: file too large: 314572800 bytes; the limit is 256 MiB" plan "$tmp/big.yaml"
expect 1 "cannot write '/nonexistent/x.opir'" plan $m -o /nonexistent/x.opir
# plan
expect 0 "plan: 4 stages on 4 devices, partition uniform, schedule 1f1b" plan $m --devices 4 --dp 1 --schedule 1f1b
expect 0 "schedule tuned" plan $m --devices 4
expect 0 "lower bound" plan $m --devices 4
expect 0 "faster than the best baseline that fits" plan $m --devices 4
expect 0 "F0.0 send:act0.0>D1 F0.1" plan models/tiny-dense.yaml --dp 1 --schedule 1f1b
expect 0 "note: MFU above 100 %" plan models/tiny-dense.yaml --schedule 1f1b --profile tests/cli/profile-fast.yaml
expect 1 "error: the model does not fit: in the best plan found, device D" plan models/deepseek-v3.yaml --devices 4 --dp 1
expect 1 "error: the model does not fit with any data-parallel degree: with the least memory, D=1 x P=4, a device holds at least" plan models/deepseek-v3.yaml --devices 4
# a budget that ends before the search judges a layout of its own: the baselines say it does not fit
expect 1 "error: the model does not fit: in the best plan found, device D" plan models/llama-3-70b.yaml --devices 16 --tune-budget 0.001
expect 1 "--tune-budget must be a number of seconds" plan $m --tune-budget 0
expect 0 "tuned" plan $m --tune-budget 0.5
# one reader for every numeric flag: no blank, sign, hex or inf that strtod would take
expect 1 "--tune-budget must be a number of seconds in (0, 1e+06], got ' 4'" plan $m --tune-budget=" 4"
expect 1 "--tune-budget must be a number of seconds" plan $m --tune-budget=0x10
expect 1 "--tune-budget must be a number of seconds" plan $m --tune-budget=inf
expect 1 "--devices must be an integer in 1..65536, got ' 4'" plan $m --devices=" 4"
expect 1 "--microbatches must be an integer in 1..1048576, got '+4'" plan $m --microbatches=+4
# an error about a flag's value shows the command line and the flag
expect 1 "<command line>:1:" plan models/tiny-dense.yaml --devices 2 --schedule i1f1b --chunks 2 --microbatches 3
# profile builds in TMPDIR
touch "$tmp/notadir"
TMPDIR="$tmp/notadir" expect 1 "cannot make a build directory in $tmp/notadir: Not a directory" profile models/tiny-dense.yaml -o "$tmp/p.yaml"
expect 0 "model tiny-hybrid: 12 layers" plan $m
expect 0 "cost,partition,place,schedule,tune" plan --print-pipeline
expect 0 "partition" plan $m --passes=partition --print-pipeline
expect 0 "; *** IR Dump After partition ***" plan models/nemotron-h-8b.yaml --schedule 1f1b --print-ir-after-all
expect 0 "; *** IR Dump After schedule ***" plan models/nemotron-h-8b.yaml --schedule 1f1b --print-ir-after-all
expect 0 "; *** IR Dump Before place ***" plan $m --schedule 1f1b --print-ir-before=place
# a tuned plan runs no partition, place or schedule (tests/golden/dumps.expected): tune makes all three
expect 0 "; *** IR Dump After tune ***" plan $m --print-ir-after-all
expect 0 "cluster h100-sxm: 16 devices" plan models/llama-3-8b.yaml --devices 16
expect 1 "<command line>:1:39: error: cannot cut 12 layers into 16 stages" plan $m --devices 16 --dp 1
# the search makes replicas of a shorter pipeline instead
expect 0 "chosen: D=" plan $m --devices 16
expect 1 "<command line>:1:39: error: cannot open cluster file 'nowhere/x.yaml'" plan $m --cluster nowhere/x.yaml
expect 0 "\"ops_per_device\": [" plan $m --json --devices 4
# a dump is IR text that opt, verify and the golden files accept
"$bin" plan $m --devices 4 --dp 1 --schedule 1f1b -o "$tmp/p.opir" >/dev/null 2>&1
expect 0 "ok: 12 layers, 4 stages, 4 device programs" verify "$tmp/p.opir"
"$bin" opt "$tmp/p.opir" -o "$tmp/q.opir" >/dev/null 2>&1
if cmp -s "$tmp/p.opir" "$tmp/q.opir"; then pass=$((pass + 1)); else
  echo "FAIL opt does not reproduce its input"; fail=$((fail + 1)); fi
expect 0 "@D3" opt "$tmp/p.opir" --passes=partition,place --print-ir-after=place
# JSON is one valid object
if command -v python3 >/dev/null; then
  if "$bin" plan $m --json --devices 4 --dp 1 | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["devices"]==4 and d["schedule"]=="tuned" and len(d["stages"])>=4 and d["makespan_s"]>0 and len(d["peak_mem_bytes"])==4, d' 2>"$tmp/err"; then
    pass=$((pass + 1)); else echo "FAIL plan --json: $(cat "$tmp/err")"; fail=$((fail + 1)); fi
fi
# profiles replace the analytic costs
expect 0 "makespan 86.638 ms" plan models/tiny-dense.yaml --dp 1 --profile tests/cli/profile.yaml --schedule 1f1b
expect 1 "nope.yaml:1:1: error: cannot open file" plan $m --profile nope.yaml
# ops and transfers of no time: the transfers are ordered causally (every schedule, both backends)
for s in tuned gpipe 1f1b zbh1 zbh2; do for b in nccl mpi; do
  expect 0 "simulated step ($s, 8 micro-batches): makespan" plan models/tiny-dense.yaml --profile tests/cli/zero-times.prof --cluster ideal --devices 4 --schedule $s --backend $b --tune-budget 0.5
done; done
expect 0 "simulated step (i1f1b, 8 micro-batches): makespan" plan models/tiny-hybrid.yaml --profile tests/cli/zero-times.prof --cluster ideal --devices 2 --schedule i1f1b --chunks 2
# features not built yet say so and exit 2
# (--target cuda is built with the CUDA toolkit: tests/cuda covers it)
if timeout 300 "$bin" compile $m --target cuda --gpu-arch x -o "$tmp/out" 2>&1 | grep -q "not built yet"; then
  expect 2 "not built yet" compile $m --target cuda -o "$tmp/out"
else
  expect 1 "--gpu-arch takes sm_XX" compile $m --target cuda --gpu-arch x -o "$tmp/out"
fi
expect 1 "unknown dtype 'f8'; known: f32, bf16, f16" plan $m --dtype f8
expect 1 "the CPU runtime trains in f32, but the model's dtype is bf16" compile $m --dtype bf16 -o "$tmp/out"
expect 1 "<command line>:1:" compile $m --dtype bf16 -o "$tmp/out"
expect 1 "llama-3-8b.yaml:12:10: error: codegen: the CPU runtime trains in f32" compile models/llama-3-8b.yaml --schedule 1f1b --devices 2 -o "$tmp/out"
expect 1 "the device stores activations and parameters as f32 or bf16, but the model's dtype is f16" compile $m --dtype f16 --target cuda-emu -o "$tmp/out"
expect 1 "unknown target 'gpu' (cpu, cuda or cuda-emu)" compile $m --target gpu -o "$tmp/out"
expect 1 "--gpu-arch is for --target cuda" compile $m --target cuda-emu --gpu-arch sm_90 -o "$tmp/out"
expect 1 "--emit takes llvm, obj or both" compile $m --target cuda-emu --emit=ptx -o "$tmp/out"
# sim on IR with costs: the table, JSON, a trace and an SVG
c=tests/cli/costed.opir
expect 0 "simulated step (1f1b, 8 micro-batches): makespan" sim $c
expect 0 "peak memory" sim $c
expect 0 "\"makespan_s\": " sim $c --json
expect 0 "" sim $c --trace "$tmp/t.json" --svg "$tmp/t.svg"
if head -c 5 "$tmp/t.svg" | grep -q '<svg' && grep -q '"traceEvents"' "$tmp/t.json"; then
  pass=$((pass + 1)); else echo "FAIL sim --trace/--svg wrote no trace or picture"; fail=$((fail + 1)); fi
expect 1 "octopipe sim: error: cannot write '/nonexistent/t.svg'" sim $c --svg /nonexistent/t.svg
# an idle time the sums' rounding leaves a hair below 0 is 0: no "-0.0 us"
# in the table, no negative time in the JSON (tiny-dense under 1f1b had both)
for s in 1f1b gpipe zbh1; do
  "$bin" sim models/tiny-dense.yaml --schedule $s > "$tmp/s.txt" 2>&1
  "$bin" sim models/tiny-dense.yaml --schedule $s --json > "$tmp/s.json" 2>&1
  if grep -q -- "-0\.0" "$tmp/s.txt" || grep -Eq '"(warmup|cooldown|residual)_s": \[[^]]*-[0-9]' "$tmp/s.json"; then
    echo "FAIL sim tiny-dense --schedule $s: a negative idle time: $(grep -m1 -- '-0\.0' "$tmp/s.txt")"
    fail=$((fail + 1)); else pass=$((pass + 1)); fi
done
# no inf, NaN or wrapped sum reaches the output: the inputs are refused
expect 1 "time-huge.opir:9:1: error: layer L2: f=1e+308us is out of range" sim tests/bad-ir/time-huge.opir
expect 1 "bandwidth-tiny.opir:5:1: error: cluster 'cpu-local': intra-node bandwidth 1e-300 is out of range" sim tests/bad-ir/bandwidth-tiny.opir
expect 1 "resident-overflow.opir:7:1: error: layer L0: the step's bytes pass 2^60" sim tests/bad-ir/resident-overflow.opir
expect 1 "act-max.opir:7:1: error: layer L0: the step's bytes pass 2^60" sim tests/bad-ir/act-max.opir
expect 1 "act-max.opir:7:1: error: layer L0: the step's bytes pass 2^60" opt tests/bad-ir/act-max.opir --passes=memplan
expect 1 "unknown option '--svg'" opt $c --svg x.svg
# plan output says what the plan is (issue 14)
expect 0 "plan: 7 stages on 2 devices, partition tuned, schedule tuned" plan models/tiny-dense.yaml --devices 2 --microbatches 4
expect 0 '"partition": "tuned"' plan models/tiny-dense.yaml --devices 2 --microbatches 4 --json
expect 0 "F0.0 send:act0.0>D1 F0.1 send:act0.1>D1" plan models/tiny-dense.yaml --devices 2 --dp 1 --microbatches 4 --schedule 1f1b
expect 0 "recv:act0.0<D0 recv:act0.1<D0 wait:act0.0 F1.0 B1.0 W1.0 send:grad1.0>D0" plan models/tiny-dense.yaml --devices 2 --dp 1 --microbatches 4 --schedule 1f1b
# data parallelism in the plan and sim tables and --json (docs/simulator.md, "Data parallelism")
expect 0 "data parallel: 2 x 2 (replicas x pipeline devices, pp-inner ranks), distributed optimizer on (all-gather overlapped with the next step), deterministic off" plan $m --devices 4 --dp 2 --distributed-optimizer on --schedule i1f1b
expect 0 "data parallel: 2 x 2 (replicas x pipeline devices, pp-inner ranks), distributed optimizer on, deterministic off" plan $m --devices 4 --dp 2 --distributed-optimizer on --schedule 1f1b
expect 0 "data parallel: 2 x 2 (replicas x pipeline devices, pp-inner ranks), distributed optimizer on, deterministic off" plan $m --devices 4 --dp 2 --distributed-optimizer on --no-overlap-param-gather --schedule 1f1b
expect 0 "overlapped parameter all-gather: exposed " plan $m --devices 4 --dp 2 --distributed-optimizer on --schedule i1f1b
expect 0 '"overlap_param_gather": true' plan $m --devices 4 --dp 2 --distributed-optimizer on --schedule i1f1b --json
expect 0 '"overlap_param_gather": false' plan $m --devices 4 --dp 2 --distributed-optimizer on --schedule 1f1b --json
expect 0 '"dist_optimizer": true, "overlap_param_gather": false' plan tests/cli/dp-overlap-off.yaml --json
expect 1 "<command line>:1:58: error: overlap_param_gather applies to the distributed optimizer's all-gathers" plan $m --devices 4 --dp 2 --no-overlap-param-gather
expect 0 "data parallel 2 x 2 (replicas x pipeline devices, dp-inner ranks), distributed optimizer off: collectives " plan $m --devices 4 --dp 2 --rank-order dp-inner --schedule 1f1b
expect 0 "pipeline  exposed red       update  collectives  peak memory" plan $m --devices 4 --dp 2 --schedule 1f1b
expect 0 '"dp": 2, "pipeline_devices": 2, "rank_order": "pp-inner", "dist_optimizer": true' plan $m --devices 4 --dp 2 --distributed-optimizer on --schedule 1f1b --json
expect 0 '"exposed_reduction_s": ' plan $m --devices 4 --dp 2 --schedule 1f1b --json
# the data-parallel flags: located errors (docs/dataparallel.md, "Asking for it")
expect 1 "<command line>:1:51: error: dp=3 does not divide the cluster's 4 devices" plan $m --devices 4 --dp 3
expect 1 "error: dp=2 does not divide the step's 3 micro-batches" plan $m --devices 4 --dp 2 --microbatches 3
expect 1 "<command line>:1:51: error: the data-parallel options (rank order, distributed optimizer, bucket) need dp > 1" plan $m --devices 4 --dp 1 --bucket 4MiB
expect 1 "--bucket must be a size such as 4MiB or 65536 (1 byte .. 1 PiB), got '0B'" plan $m --devices 4 --dp 2 --bucket 0B
expect 1 "unknown rank order 'pp-outer'; did you mean 'pp-inner'?" plan $m --devices 4 --dp 2 --rank-order pp-outer
expect 1 "--dp applies to a model, not to IR text" sim tests/e2e/deadlock-mpi.opir --dp 2
# --dp auto: the search over the data-parallel degree (docs/dataparallel.md, "Choosing D")
expect 0 "data parallelism (--dp auto, --distributed-optimizer auto, --recompute auto): 15 candidates on 4 devices, 8 micro-batches a step in all" plan $m --devices 4 --dp auto --schedule 1f1b
expect 0 "data parallelism (--dp auto, --distributed-optimizer auto): 5 candidates on 4 devices" plan $m --devices 4 --dp auto --recompute none --schedule 1f1b
expect 0 "recomputation (--recompute auto): 3 candidates on 4 devices" plan $m --devices 4 --dp 1 --recompute auto --schedule 1f1b
# --recompute selective: planned with dp given (docs/cost-model.md, "Recomputation")
expect 0 "(recompute selective: F to B keeps" plan $m --devices 4 --dp 1 --recompute selective --schedule 1f1b
expect 0 "data parallelism (--dp auto, --distributed-optimizer auto): 5 candidates on 4 devices" plan $m --devices 4 --dp auto --recompute selective --schedule 1f1b
expect 0 "selective" plan $m --devices 4 --dp 1 --recompute auto --schedule 1f1b
expect 0 "recomputation (--recompute auto): 2 candidates on 4 devices" plan models/tiny-dense.yaml --devices 4 --dp 1 --recompute auto --schedule 1f1b
expect 0 "chosen: D=" plan $m --devices 4 --dp auto --schedule 1f1b --bucket 4MiB
expect 0 '"dp_search": [{"dp": 1, "pipeline_devices": 4, "dist_optimizer": false, "recompute": "none", "planned": true' plan $m --devices 4 --dp auto --schedule 1f1b --json
expect 0 "data parallelism (--dp auto, --recompute auto): 9 candidates on 4 devices" sim $m --devices 4 --dp auto --distributed-optimizer on --schedule 1f1b
expect 0 "data parallelism (--dp auto, --recompute auto): 9 candidates on 4 devices" sim $m --devices 4 --dp auto --distributed-optimizer off --schedule 1f1b
expect 0 "data parallelism (--dp auto, --distributed-optimizer auto): 5 candidates on 4 devices" sim $m --devices 4 --dp auto --recompute none --schedule 1f1b
expect 0 "the distributed optimizer (--distributed-optimizer auto): 2 candidates on 4 devices" plan $m --devices 4 --dp 2 --distributed-optimizer auto --schedule 1f1b
expect 0 "the distributed optimizer and recomputation (--distributed-optimizer auto, --recompute auto): 6 candidates" plan $m --devices 4 --dp 2 --distributed-optimizer auto --recompute auto --schedule 1f1b
expect 0 '"dist_optimizer": false' plan $m --devices 4 --dp 2 --distributed-optimizer off --schedule 1f1b --json
sed -e 's/^training:/plan: {dp: 2, distributed_optimizer: auto}\ntraining:/' -e "s#data/corpus.txt#$PWD/models/data/corpus.txt#" $m >"$tmp/distopt-auto.yaml"
expect 0 "the distributed optimizer (--distributed-optimizer auto): 2 candidates on 4 devices" plan "$tmp/distopt-auto.yaml" --devices 4 --schedule 1f1b
sed -e 's/^training:/plan: {distributed_optimizer: maybe}\ntraining:/' -e "s#data/corpus.txt#$PWD/models/data/corpus.txt#" $m >"$tmp/distopt-bad.yaml"
expect 1 "distopt-bad.yaml:21:31: error: unknown value 'maybe'; known: off, on, false, true, auto" plan "$tmp/distopt-bad.yaml" --devices 4
expect 0 "the tune effort (--tune-effort 5 plans judged) ended the search" plan models/tiny-hybrid.yaml --devices 4 --dp 1 --tune-effort 5
expect 1 "--tune-effort must be an integer in 1..1000000000, got '0'" plan models/tiny-hybrid.yaml --devices 4 --tune-effort 0
expect 1 "--tune-effort is for a model: sim runs no tuner on IR text" sim tests/deadlock/exchange-mpi.opir --tune-effort 10
expect 1 "--distributed-optimizer must be on, off or auto, got 'yes'" plan $m --devices 4 --dp 2 --distributed-optimizer yes
expect 1 "option '--distributed-optimizer' needs a value" plan $m --devices 4 --dp 2 --distributed-optimizer
expect 1 "--dp must be auto or an integer in 1..65536, got 'many'" plan $m --devices 4 --dp many
expect 1 "--passes runs the passes given on one plan; --dp auto, --distributed-optimizer auto and --recompute auto plan every candidate" plan $m --devices 4 --dp auto --passes cost
expect 1 "dp=auto: no data-parallel degree D divides both the 64 devices and the step's 1 micro-batches" plan $m --devices 64 --microbatches 1 --dp auto
p=tests/cli/published.json
expect 0 "7 attention, 1 head), times only (hidden, vocab and memory not known), seq 4096" plan --profile $p --devices 2
expect 0 "tokens/s, MFU n/a" plan --profile $p --devices 2
expect 0 '"mfu": null, "peak_mem_bytes": null' plan --profile $p --devices 2 --json
expect 0 "plan: 8 stages on 4 devices, partition uniform, schedule i1f1b" plan $m --devices 4 --dp 1 --schedule i1f1b
expect 0 "i1f1b v=2      schedule i1f1b needs 2 or more chunks per device; 4 stages on 4 devices is 1f1b" plan tests/cli/given4.yaml
expect 1 "error: the model does not fit: in the best plan found, device D" plan models/deepseek-v3.yaml --devices 4 --dp 1 --tune-budget 0.01
expect 1 "1048576 micro-batches on 4 stages make 4194304 (stage, micro-batch) pairs; a plan holds at most 1048576" plan models/tiny-dense.yaml --dp 1 --microbatches 1048576
# every schedule plan offers compiles (tests/passes/test_schedules.c has the grid)
for sched in tuned gpipe; do
  expect 0 "compiled tiny-dense for 1 CPU rank" compile models/tiny-dense.yaml --devices 1 --microbatches 3 --schedule $sched -o "$tmp/c-$sched"
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
