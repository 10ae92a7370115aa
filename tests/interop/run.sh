#!/usr/bin/env bash
# Schedule interop with torch.distributed.pipelining (docs/interop.md).
#  1. Round trip: a plan written with --export-schedule torch-csv (and
#     torch-csv-comms) and read back with `import` has the same stages,
#     device programs and proof, and the same simulated step, for every
#     baseline and a tuned plan.
#  2. The files hold only torch's action strings, one row per device.
#  3. Schedules in torch's own format import, are proven deadlock-free and
#     simulate to the step of OctoPipe's plan of the same order.  The files
#     of tests/interop/torch are ZB-H1 (4 ranks, 8 micro-batches) and
#     Megatron's interleaved 1F1B (2 ranks, 4 stages, 4 micro-batches) as
#     docs/schedules.md orders them, written as torch writes a schedule:
#     laid on unit time steps with empty cells where a rank waits, I and W
#     (or B), torch's current action names; -merged is ZB-H1 with each I
#     and the W right after it merged into a full backward B, as torch's
#     _merge_bw does (a split plan with both: the same programs); -comms
#     adds the sends and receives, the UNSHARD, RESHARD and REDUCE_GRAD
#     that torch's lowering adds, and \r\n rows as Python's csv module
#     ends them.
# Bad files are tests/interop/bad (the interop_bad test).
#   run.sh OCTOPIPE REPO_ROOT
set -u
bin=$1 root=$2
cd "$root" || exit 2
model=models/tiny-hybrid.yaml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }

# Everything but the plan line (the imported plan names its own schedule
# and placement) and comments.
body() { grep -v -e '^plan ' -e '^;' "$1"; }
makespan() { "$bin" sim "$1" --json | grep -o '"makespan_s": [0-9.e+-]*'; }

# same A.opir B.opir WHAT: the same programs, proof and simulated step.
same() {
  if ! diff <(body "$1") <(body "$2") > "$tmp/diff"; then
    bad "$3: the imported plan differs:"; head -n 10 "$tmp/diff"; return
  fi
  local a b
  a=$(makespan "$1") b=$(makespan "$2")
  if [ -z "$a" ] || [ "$a" != "$b" ]; then bad "$3: makespan '$a' then '$b'"; return; fi
  ok
}

# 1 and 2: round trips.
action='[0-9]+(F|I|B|W|SEND_F|RECV_F|SEND_B|RECV_B)[0-9]+|[0-9]+REDUCE_GRAD'
for spec in "1f1b 4 8" "i1f1b 4 8" "i1f1b 2 6" "gpipe 3 5" "zbh1 4 8" "zbh2 4 8" "zbv 2 4" "tuned 4 8" \
            "1f1b 4 8 mpi" "i1f1b 2 4 mpi" "zbh1 3 6 mpi"; do
  set -- $spec
  sched=$1 dev=$2 mb=$3 backend=${4:-nccl} name="$1-$2x$3-${4:-nccl}"
  for fmt in torch-csv torch-csv-comms; do
    if ! "$bin" plan $model --schedule "$sched" --devices "$dev" --microbatches "$mb" --dp 1 \
         --backend "$backend" --tune-effort 500 -o "$tmp/$name.opir" --export-schedule $fmt "$tmp/$name.csv" \
         > "$tmp/out" 2>&1; then
      bad "plan $name --export-schedule $fmt:"; head -n 5 "$tmp/out"; continue
    fi
    rows=$(wc -l < "$tmp/$name.csv")
    [ "$rows" -eq "$dev" ] || bad "$name $fmt: $rows rows for $dev devices"
    if tr ',' '\n' < "$tmp/$name.csv" | grep -v -x -E "$action" | grep -q .; then
      bad "$name $fmt: a cell that is not a torch action:"
      tr ',' '\n' < "$tmp/$name.csv" | grep -v -x -E "$action" | head -n 3
    fi
    if [ $fmt = torch-csv ] && grep -q -E 'SEND|RECV|REDUCE' "$tmp/$name.csv"; then
      bad "$name: torch-csv holds comm actions"
    fi
    if [ $fmt = torch-csv-comms ]; then
      # Every send and receive of the plan, once.
      ops=$(grep -E '^[[:space:]]+(send|recv) ' "$tmp/$name.opir" | grep -c -v ' off=')
      cells=$(tr ',' '\n' < "$tmp/$name.csv" | grep -c -E 'SEND_|RECV_')
      [ "$ops" -gt 0 ] && [ "$ops" -eq "$cells" ] || bad "$name: $ops sends and receives, $cells in the file"
    fi
    # A cut other than the model's: the layers the exporter's note gives.
    cut=$(grep -o -e '--layers-per-stage [0-9,]*' "$tmp/out")
    if ! "$bin" import "$tmp/$name.csv" --model $model --backend "$backend" $cut -o "$tmp/$name-back.opir" > "$tmp/out" 2>&1; then
      bad "import $name ($fmt):"; head -n 5 "$tmp/out"; continue
    fi
    same "$tmp/$name.opir" "$tmp/$name-back.opir" "$name ($fmt)"
  done
done

# A full backward only where the plan runs the backward as one piece.
"$bin" plan $model --schedule 1f1b --devices 4 --dp 1 --export-schedule torch-csv "$tmp/f.csv" > /dev/null
"$bin" plan $model --schedule zbh1 --devices 4 --dp 1 --export-schedule torch-csv "$tmp/s.csv" > /dev/null
if grep -q -E '[0-9](I|W)[0-9]' "$tmp/f.csv" || ! grep -q -E '[0-9]B[0-9]' "$tmp/f.csv"; then
  bad "1f1b: not written with full backwards B"
else ok; fi
if grep -q -E '[0-9]B[0-9]' "$tmp/s.csv" || ! grep -q -E '[0-9]I[0-9]' "$tmp/s.csv"; then
  bad "zbh1: not written with I and W"
else ok; fi

# 3: torch's own format.
for spec in "zbh1-4rank-8mb zbh1 4 8" "zbh1-2rank-4mb-comms zbh1 2 4" "zbh1-4rank-8mb-merged zbh1 4 8" \
            "interleaved-1f1b-2rank-4stage-4mb i1f1b 2 4"; do
  set -- $spec
  file=tests/interop/torch/$1.csv
  if ! "$bin" import "$file" --model $model -o "$tmp/$1.opir" > "$tmp/out" 2>&1; then
    bad "import $file:"; head -n 5 "$tmp/out"; continue
  fi
  grep -q '^proof nccl ' "$tmp/$1.opir" || bad "$file: no deadlock proof in the imported plan"
  "$bin" plan $model --schedule "$2" --devices "$3" --microbatches "$4" --dp 1 -o "$tmp/$1-own.opir" > /dev/null
  same "$tmp/$1-own.opir" "$tmp/$1.opir" "$file against plan --schedule $2"
done

# An imported plan compiles as it stands (its programs are kept).
if "$bin" import tests/interop/torch/zbh1-2rank-4mb-comms.csv --model $model --backend mpi \
     -o "$tmp/mpi.opir" > "$tmp/out" 2>&1 && grep -q '^proof mpi ' "$tmp/mpi.opir"; then ok
else bad "import --backend mpi:"; head -n 5 "$tmp/out"; fi

# Mutations of torch's own files (a byte deleted, inserted or replaced;
# a fixed seed): each imports (exit 0) or fails at a place in the file
# (exit 1, "FILE:LINE:COL: error: ..."), without a crash, a sanitizer
# report or a hang.
RANDOM=7
alphabet='0123456789FIBW,;()" _SENDRECVUHAOLGP'$'\n\r'
for src in tests/interop/torch/*.csv; do
  text=$(cat "$src"; printf x); text=${text%x}
  for k in $(seq 1 40); do
    pos=$((RANDOM % ${#text})) ch=${alphabet:$((RANDOM % ${#alphabet})):1}
    case $((RANDOM % 3)) in
      0) m=${text:0:pos}${text:pos+1} ;;
      1) m=${text:0:pos}$ch${text:pos} ;;
      *) m=${text:0:pos}$ch${text:pos+1} ;;
    esac
    f=$tmp/mutant.csv
    printf '%s' "$m" > "$f"
    err=$(timeout 60 "$bin" import "$f" --model $model 2>&1 >/dev/null); rc=$?
    first=$(printf '%s\n' "$err" | head -n 1)
    if [ $rc -gt 1 ] || printf '%s' "$err" | grep -q -e Sanitizer -e 'runtime error'; then
      bad "mutant of $src: exit $rc:"; printf '%s\n' "$err" | head -n 5; head -c 600 "$f"
    elif [ $rc -eq 1 ] && [ "${first#"$f":[0-9]*:[0-9]*: error: }" = "$first" ]; then
      bad "mutant of $src: an error not located in the file: $first"; cat "$f" | head -n 3
    else ok; fi
  done
done

# The command line: each mistake exits 1 with its message.
t=tests/interop/torch/zbh1-4rank-8mb.csv
while IFS='|' read -r want cmdline; do
  err=$(eval "\"\$bin\" $cmdline" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 1 ] || ! printf '%s' "$err" | grep -q -F "$want"; then
    bad "octopipe $cmdline: exit $rc, wanted 1 and '$want':"; printf '%s\n' "$err" | head -n 3
  else ok; fi
done <<LIST
needs the model it schedules|import $t
reads a torch.distributed.pipelining schedule (FILE.csv) or a Hugging Face config.json|import $model --model $model
not a search (auto)|import $t --model $model --recompute auto
needs a format and a file|plan $model --export-schedule torch-csv
writes torch-csv or torch-csv-comms, got 'torch'|plan $model --export-schedule torch $tmp/x.csv
cannot write '/nonexistent/x.csv'|plan $model --dp 1 --tune-effort 100 --export-schedule torch-csv /nonexistent/x.csv
LIST

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
