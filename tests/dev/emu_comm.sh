#!/usr/bin/env bash
# emu_comm.sh TEST_EMU_COMM: the emulator's stand-in for NCCL on 3 ranks
# (tests/dev/test_emu_comm.c).  Exit 0 all hold, 1 otherwise, 77 (skip)
# without mpirun.
set -u
if ! command -v mpirun >/dev/null 2>&1; then
	echo "SKIP: mpirun not found"
	exit 77
fi
# Open MPI in a container (as tests/runtime/run.sh): as root, more ranks
# than cores, shared memory only.
MPIRUN=(mpirun)
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
	MPIRUN+=(--oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none)
	[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
fi
timeout 120 "${MPIRUN[@]}" -np 3 "$1"
