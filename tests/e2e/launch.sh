#!/usr/bin/env bash
# launch.sh OCTOPIPE SRCDIR: DIR/launch, the script that runs the ranks
# (docs/codegen.md, "launch"): the programs found next to it (a moved DIR
# trains), every argument to every rank intact, the plan's eager limits kept
# beside the user's flags, a hostfile, srun --multi-prog inside Slurm, the
# line for more ranks than cores, the job's exit status.  mpirun and srun
# are replaced by recorders where only the command line matters (there is
# no Slurm here: a fake srun records its config and runs it under mpirun).
# Prints "N passed, M failed"; exit 1 on any failure, 77 (skip) without
# mpirun.
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
unset SLURM_JOB_ID OCTO_LAUNCHER MPIRUN MPIRUN_FLAGS MPIRUN_EXTRA MPIRUN_PLAN_FLAGS SRUN_FLAGS
unset OMPI_MCA_btl_vader_eager_limit OMPI_MCA_btl_vader_max_send_size
pass=0 failed=0
ok() { echo "ok: $1"; pass=$((pass + 1)); }
bad() {
	echo "FAIL: $1"
	[ -n "${2:-}" ] && [ -f "$2" ] && tail -12 "$2" | sed 's/^/    /'
	failed=$((failed + 1))
}
# go CMD...: stdout and stderr in $tmp/out, stderr alone in $tmp/err, the
# exit status in $st.
go() {
	"$@" >"$tmp/out" 2>"$tmp/err"
	st=$?
	cat "$tmp/err" >>"$tmp/out"
}
check() { # check NAME FILE-TO-SHOW CONDITION...
	local name=$1 show=$2
	shift 2
	if "$@"; then ok "$name"; else bad "$name" "$show"; fi
}
has() { grep -qxF -- "$2" "$1"; }         # a whole line of FILE
lacks() { ! grep -qxF -- "$2" "$1"; }
# ends FILE WORD...: the last lines of FILE are the WORDs.
ends() {
	local f=$1
	shift
	printf '%s\n' "$@" >"$tmp/want"
	tail -n "$(wc -l <"$tmp/want")" "$f" | cmp -s - "$tmp/want"
}
# follows FILE A B: line B right after a line A (a flag and its value).
follows() { awk -v a="$2" -v b="$3" 'p && $0 == b { f = 1 } { p = ($0 == a) } END { exit !f }' "$1"; }

# Recorders: mpirun's and srun's command lines, one argument a line.
mkdir -p "$tmp/bin" "$tmp/nproc1" "$tmp/nproc64" "$tmp/slurm"
cat >"$tmp/bin/rec" <<EOF
#!/bin/sh
printf '%s\n' "\$@" >"$tmp/argv"
exit \${REC_STATUS:-0}
EOF
printf '#!/bin/sh\necho 1\n' >"$tmp/nproc1/nproc"
printf '#!/bin/sh\necho 64\n' >"$tmp/nproc64/nproc"
# The fake srun: records its arguments, its config and the OMPI_MCA_
# environment, then runs each config line (TASK PROGRAM ARG..., quoted as
# srun reads it: single quotes and backslashes as in a shell) under mpirun.
cat >"$tmp/slurm/srun" <<EOF
#!/usr/bin/env bash
printf '%s\n' "\$@" >"$tmp/srun.argv"
env | grep '^OMPI_MCA_' | sort >"$tmp/srun.env"
conf= prev=
for a; do [ "\$prev" = --multi-prog ] && conf=\$a; prev=\$a; done
cp "\$conf" "$tmp/srun.conf" || exit 99
[ -n "\${FAKE_SRUN_STATUS:-}" ] && exit "\$FAKE_SRUN_STATUS"
cmd=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none)
sep=
while read -r task rest; do
	eval "words=(\$rest)"
	cmd+=(\$sep -np 1 "\${words[@]}")
	sep=:
done <"\$conf"
exec "\${cmd[@]}"
EOF
chmod +x "$tmp/bin/rec" "$tmp/nproc1/nproc" "$tmp/nproc64/nproc" "$tmp/slurm/srun"
rec=$tmp/bin/rec

# ---- the script -----------------------------------------------------------------
"$octopipe" compile "$src/models/tiny-dense.yaml" --devices 2 -o "$tmp/made" >"$tmp/out" 2>&1 ||
	bad "compile tiny-dense, 2 ranks" "$tmp/out"
cp -r "$tmp/made" "$tmp/job"
mv "$tmp/made" "$tmp/moved here"
d="$tmp/moved here"
L=$d/launch
check "launch is POSIX sh (sh -n) and names no absolute path of the compile" "$L" \
	eval 'sh -n "$L" && ! grep -qF "$tmp" "$L" && head -1 "$L" | grep -qx "#!/bin/sh"'
if command -v shellcheck >/dev/null 2>&1; then
	shellcheck -s sh -S warning "$L" >"$tmp/sc" 2>&1
	check "shellcheck -s sh: no warnings" "$tmp/sc" [ ! -s "$tmp/sc" ]
fi
# The plan's parameters as the script holds them: NAME VALUE ...
read -r -a vader <<<"$(sed -n "s/^PLAN_MCA='\(.*\)'$/\1/p" "$L")"
check "the plan's eager limits: btl_vader_eager_limit and max_send_size" "$L" \
	eval '[ "${#vader[@]}" = 4 ] && [ "${vader[0]}" = btl_vader_eager_limit ] && [ "${vader[2]}" = btl_vader_max_send_size ]'
limit=${vader[1]:-}

go "$L" --help
check "--help: the launcher's usage, then rank0's options (no MPI)" "$tmp/out" \
	eval '[ $st = 0 ] && grep -q "^Usage: launch \[--hostfile FILE\]" "$tmp/out" && grep -q "^rank0: rank 0 of 2" "$tmp/out"'

# ---- a real run: moved, an argument with spaces ------------------------------------
go "$L" --steps 2 --checkpoint "$tmp/ck dir"
check "the moved DIR trains 2 steps under mpirun" "$tmp/out" \
	eval '[ $st = 0 ] && grep -q "^summary: 2 steps" "$tmp/out"'
check "--checkpoint \"ck dir\" reached the ranks as one argument" "$tmp/out" \
	eval '[ -d "$tmp/ck dir" ] && [ ! -e "$tmp/ck" ]'

# ---- mpirun's command line -------------------------------------------------------------
MPIRUN=$rec PATH=$tmp/nproc64:$PATH go "$L" --steps 2 --tag "a b" ""
check "MPIRUN: the recorder runs, no ranks-over-cores line on 64 cores" "$tmp/out" eval '[ $st = 0 ] && [ ! -s "$tmp/out" ]'
check "MPMD: -np 1 DIR/rank0 ARGS : -np 1 DIR/rank1 ARGS, an argument with a space and an empty one intact" "$tmp/argv" \
	ends "$tmp/argv" -np 1 "$d/rank0" --steps 2 --tag "a b" "" : -np 1 "$d/rank1" --steps 2 --tag "a b" ""
check "one node, no flags: mpirun's command line as it always was" "$tmp/argv" \
	eval 'printf "%s\n" --allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none \
		--mca btl_vader_eager_limit "$limit" --mca btl_vader_max_send_size "$limit" \
		-np 1 "$d/rank0" --steps 2 --tag "a b" "" : -np 1 "$d/rank1" --steps 2 --tag "a b" "" | cmp -s - "$tmp/argv"'
check "one node: the container defaults (root, --oversubscribe, btl self,vader) and the plan's limits" "$tmp/argv" \
	eval 'has "$tmp/argv" --allow-run-as-root && has "$tmp/argv" --oversubscribe && follows "$tmp/argv" --mca btl &&
		follows "$tmp/argv" btl self,vader && follows "$tmp/argv" btl_vader_eager_limit "$limit" &&
		follows "$tmp/argv" btl_vader_max_send_size "$limit" && lacks "$tmp/argv" --hostfile'

MPIRUN=$rec MPIRUN_FLAGS="--bind-to none --map-by core" go "$L" --steps 2
check "MPIRUN_FLAGS replaces the defaults but keeps the plan's eager limits" "$tmp/argv" \
	eval 'follows "$tmp/argv" --bind-to none && has "$tmp/argv" --map-by && lacks "$tmp/argv" --oversubscribe &&
		lacks "$tmp/argv" --allow-run-as-root && lacks "$tmp/argv" self,vader &&
		follows "$tmp/argv" btl_vader_eager_limit "$limit" && follows "$tmp/argv" btl_vader_max_send_size "$limit"'
MPIRUN=$rec MPIRUN_EXTRA="--mca btl_vader_eager_limit 65536" go "$L" --steps 2
check "a limit the user sets is the user's: given once, with their value; the other kept" "$tmp/argv" \
	eval '[ "$(grep -cx btl_vader_eager_limit "$tmp/argv")" = 1 ] && follows "$tmp/argv" btl_vader_eager_limit 65536 &&
		follows "$tmp/argv" btl_vader_max_send_size "$limit"'
MPIRUN=$rec MPIRUN_PLAN_FLAGS= go "$L" --steps 2
check "MPIRUN_PLAN_FLAGS= drops the plan's limits" "$tmp/argv" \
	eval 'lacks "$tmp/argv" btl_vader_eager_limit && has "$tmp/argv" --oversubscribe'
MPIRUN=$rec REC_STATUS=7 go "$L" --steps 2
check "the job's exit status is launch's (7)" "$tmp/out" [ $st = 7 ]

# ---- more ranks than cores -----------------------------------------------------------------
MPIRUN=$rec PATH=$tmp/nproc1:$PATH go "$L" --steps 2
check "2 ranks on 1 core: one line on stderr, and mpirun still runs them oversubscribed" "$tmp/err" \
	eval '[ $st = 0 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
		grep -q "^launch: 2 ranks on 1 cores: the ranks share cores" "$tmp/err" && has "$tmp/argv" --oversubscribe'

# ---- a hostfile ----------------------------------------------------------------------------------
echo "localhost slots=2" >"$tmp/hosts"
MPIRUN=$rec PATH=$tmp/nproc1:$PATH go "$L" --steps 2 --hostfile "$tmp/hosts" --tag x
check "--hostfile FILE reaches mpirun, with btl tcp, without --oversubscribe or the cores line" "$tmp/out" \
	eval '[ ! -s "$tmp/out" ] && follows "$tmp/argv" --hostfile "$tmp/hosts" && follows "$tmp/argv" btl self,vader,tcp &&
		lacks "$tmp/argv" --oversubscribe && follows "$tmp/argv" btl_vader_eager_limit "$limit"'
check "--hostfile is not passed to the ranks" "$tmp/argv" \
	ends "$tmp/argv" -np 1 "$d/rank0" --steps 2 --tag x : -np 1 "$d/rank1" --steps 2 --tag x
MPIRUN=$rec go "$L" --hostfile="$tmp/hosts" --steps 2
check "--hostfile=FILE as well" "$tmp/argv" follows "$tmp/argv" --hostfile "$tmp/hosts"
go "$L" --hostfile "$tmp/none" --steps 2
check "a hostfile that is not there: exit 2, named" "$tmp/out" \
	eval '[ $st = 2 ] && grep -q "^launch: cannot read the hostfile .*none" "$tmp/out"'
go "$L" --steps 2 --hostfile=
check "--hostfile= without a FILE: exit 2, said" "$tmp/out" \
	eval '[ $st = 2 ] && grep -q "^launch: --hostfile needs a FILE" "$tmp/out"'
go "$L" --steps 2 --hostfile "$tmp/hosts"
check "a hostfile run trains (the transport flags for many nodes work on one)" "$tmp/out" \
	eval '[ $st = 0 ] && grep -q "^summary: 2 steps" "$tmp/out"'
# Messages above TCP's eager limit (64 KiB): the plan raises it too.
sed 's/microbatch_size: 2/microbatch_size: 16/' "$src/models/tiny-dense.yaml" >"$tmp/big.yaml"
"$octopipe" compile "$tmp/big.yaml" --devices 2 -o "$tmp/big" >"$tmp/out" 2>&1
read -r -a tcp <<<"$(sed -n "s/^PLAN_MCA_NET='\(.*\)'$/\1/p" "$tmp/big/launch")"
MPIRUN=$rec go "$tmp/big/launch" --hostfile "$tmp/hosts"
check "large messages: btl_tcp_eager_limit and max_send_size with a hostfile" "$tmp/argv" \
	eval '[ "${tcp[0]:-}" = btl_tcp_eager_limit ] && follows "$tmp/argv" btl_tcp_eager_limit "${tcp[1]}" &&
		follows "$tmp/argv" btl_tcp_max_send_size "${tcp[3]}"'
MPIRUN=$rec go "$tmp/big/launch"
check "... and not on one node" "$tmp/argv" lacks "$tmp/argv" btl_tcp_eager_limit
check "small messages: TCP's own limit is not lowered" "$L" grep -qx "PLAN_MCA_NET=''" "$L"

# ---- Slurm --------------------------------------------------------------------------------------
j=$tmp/job
ck="$tmp/ck it's %t"
SLURM_JOB_ID=42 PATH=$tmp/slurm:$PATH go "$j/launch" --steps 2 --checkpoint "$ck"
check "inside Slurm: srun runs the ranks (2 steps)" "$tmp/out" \
	eval '[ $st = 0 ] && grep -q "^summary: 2 steps" "$tmp/out"'
check "srun --ntasks=2 --kill-on-bad-exit=1 --multi-prog CONF" "$tmp/srun.argv" \
	eval 'has "$tmp/srun.argv" --ntasks=2 && has "$tmp/srun.argv" --kill-on-bad-exit=1 &&
		[ "$(tail -2 "$tmp/srun.argv" | head -1)" = --multi-prog ] && [ ! -e "$(tail -1 "$tmp/srun.argv")" ]'
printf '%s\n' "0 $j/rank0 --steps 2 --checkpoint '$tmp/ck it'\\''s %t'" \
	"1 $j/rank1 --steps 2 --checkpoint '$tmp/ck it'\\''s %t'" >"$tmp/conf.want"
check "the config maps task i to DIR/rank i with the arguments, quoted for srun (the temporary file removed after)" "$tmp/srun.conf" \
	cmp -s "$tmp/srun.conf" "$tmp/conf.want"
check "a quote, a space and %t reached the ranks literally" "$tmp/out" test -d "$ck"
check "the plan's limits in the environment: OMPI_MCA_btl_vader_eager_limit, max_send_size" "$tmp/srun.env" \
	eval 'has "$tmp/srun.env" "OMPI_MCA_btl_vader_eager_limit=$limit" && has "$tmp/srun.env" "OMPI_MCA_btl_vader_max_send_size=$limit"'
OMPI_MCA_btl_vader_eager_limit=99999 SLURM_JOB_ID=42 FAKE_SRUN_STATUS=5 PATH=$tmp/slurm:$PATH go "$j/launch" --steps 2 --tag %t
check "srun's exit status is launch's (5)" "$tmp/out" [ $st = 5 ]
check "%t alone is quoted too (srun would put the task id there)" "$tmp/srun.conf" \
	has "$tmp/srun.conf" "1 $j/rank1 --steps 2 --tag '%t'"
check "a limit already in the environment is the user's" "$tmp/srun.env" \
	eval 'has "$tmp/srun.env" OMPI_MCA_btl_vader_eager_limit=99999 && has "$tmp/srun.env" "OMPI_MCA_btl_vader_max_send_size=$limit"'
rm -f "$tmp/srun.argv" "$tmp/argv"
MPIRUN=$rec OCTO_LAUNCHER=mpirun SLURM_JOB_ID=42 PATH=$tmp/slurm:$PATH go "$j/launch" --steps 2
check "OCTO_LAUNCHER=mpirun inside Slurm: mpirun, not srun" "$tmp/out" eval '[ -e "$tmp/argv" ] && [ ! -e "$tmp/srun.argv" ]'
rm -f "$tmp/srun.argv" "$tmp/argv"
MPIRUN=$rec SLURM_JOB_ID=42 PATH=$tmp/slurm:$PATH go "$j/launch" --hostfile "$tmp/hosts" --steps 2
check "--hostfile inside Slurm: mpirun" "$tmp/out" eval '[ -e "$tmp/argv" ] && [ ! -e "$tmp/srun.argv" ]'
rm -f "$tmp/srun.argv" "$tmp/argv"
MPIRUN=$rec PATH=$tmp/slurm:$PATH go "$j/launch" --steps 2
check "srun on PATH outside an allocation (no SLURM_JOB_ID): mpirun" "$tmp/out" eval '[ -e "$tmp/argv" ] && [ ! -e "$tmp/srun.argv" ]'
OCTO_LAUNCHER=pbs go "$j/launch" --steps 2
check "OCTO_LAUNCHER=pbs: exit 2, said" "$tmp/out" eval '[ $st = 2 ] && grep -q "^launch: OCTO_LAUNCHER is .pbs., not mpirun or srun" "$tmp/out"'
SLURM_JOB_ID=42 PATH=$tmp/slurm:$PATH go "$j/launch" --tag "a
b"
check "srun: an argument with a newline is refused (exit 2), not mangled" "$tmp/out" \
	eval '[ $st = 2 ] && grep -q "^launch: srun --multi-prog cannot pass an argument with a newline" "$tmp/out"'

echo "$pass passed, $failed failed"
[ "$failed" = 0 ]
