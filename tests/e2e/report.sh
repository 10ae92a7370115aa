#!/usr/bin/env bash
# report.sh OCTOPIPE ROOT: 'octopipe profile' and 'octopipe report'
# (issue 9; docs/report.md, docs/profile.md).  Skips (77) without mpirun.
set -eu
octopipe=$1
root=$2
command -v mpirun >/dev/null || { echo "no mpirun: skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# profile writes a file that plan accepts, with what it was measured on.
"$octopipe" profile "$root/models/tiny-dense.yaml" -o "$work/prof.yaml" >"$work/profile.out" 2>&1 ||
	{ cat "$work/profile.out"; fail "profile"; }
grep -q '^measured_on: {host: ' "$work/prof.yaml" || fail "no measured_on"
grep -q '^link: {latency_us: ' "$work/prof.yaml" || fail "no link"
"$octopipe" plan "$root/models/tiny-dense.yaml" --devices 2 --profile "$work/prof.yaml" >/dev/null ||
	fail "plan does not accept the profile"

# Another shape is an error naming both.
sed 's/^  seq: 64/  seq: 32/' "$root/models/tiny-dense.yaml" >"$work/seq32.yaml"
if "$octopipe" plan "$work/seq32.yaml" --profile "$work/prof.yaml" >/dev/null 2>"$work/shape.err"; then
	fail "a profile of another shape was accepted"
fi
grep -q 'measured on another shape (seq 64, mbs 2, hidden 64, dtype f32) than the model.s (seq 32' \
	"$work/shape.err" || { cat "$work/shape.err"; fail "shape mismatch message"; }

# report on a compiled run.
"$octopipe" compile "$root/models/tiny-dense.yaml" --devices 2 --profile "$work/prof.yaml" \
	--schedule 1f1b -o "$work/run" >/dev/null
OPENBLAS_NUM_THREADS=1 "$work/run/launch" --steps 3 --trace "$work/run/trace" >/dev/null 2>&1 ||
	fail "the run"
"$octopipe" report "$work/run" >"$work/report.out" || { cat "$work/report.out"; fail "report"; }
grep -q '^step time ' "$work/report.out" || fail "no step time row"
grep -q '^D1 bubble ' "$work/report.out" || fail "no bubble row"
grep -Eq '^(ran as predicted|did not run as predicted)' "$work/report.out" || fail "no verdict"
grep -q '"predicted D1"' "$work/run/report-trace.json" || fail "merged trace"
grep -c '<svg' "$work/run/report-timeline.svg" | grep -q '^3$' || fail "two panels in the svg"

# A directory without traces, and traces of another plan.
"$octopipe" compile "$root/models/tiny-dense.yaml" --devices 2 --profile "$work/prof.yaml" \
	--schedule zbh1 --microbatches 4 -o "$work/bare" >/dev/null
if "$octopipe" report "$work/bare" 2>"$work/bare.err"; then fail "report without traces"; fi
grep -q 'no traces' "$work/bare.err" || { cat "$work/bare.err"; fail "no-trace message"; }
cp -r "$work/run/trace" "$work/bare/trace"
if "$octopipe" report "$work/bare" 2>"$work/other.err"; then fail "report on another plan's traces"; fi
grep -q 'another plan' "$work/other.err" || { cat "$work/other.err"; fail "another-plan message"; }

# A step that is not a whole number (NaN passed every range check and then
# indexed the table: a crash) is refused as a foreign trace.
cp -r "$work/run" "$work/nan"
sed -i '0,/"args":{"step":[0-9]*/s//"args":{"step":nan/' "$work/nan/trace/trace-rank0.json"
rc=0; "$octopipe" report "$work/nan" >/dev/null 2>"$work/nan.err" || rc=$?
[ $rc -eq 1 ] || { cat "$work/nan.err"; fail "report on a NaN step: exit status $rc"; }
grep -q 'not a trace written by libocto_rt' "$work/nan.err" || { cat "$work/nan.err"; fail "NaN-step message"; }
echo "ok"
