# env.sh: the start every e2e script that runs ranks under mpirun shares.
# Sourced; it skips the test (exit 77) without mpirun, makes $tmp (removed
# at exit), and sets the environment the ranks run in: one BLAS thread, a
# generous communication timeout (a busy 2-core machine, the sanitizers),
# no leak report from the sanitizer build's rank programs.
if ! command -v mpirun >/dev/null 2>&1; then
	echo "SKIP: mpirun not found"
	exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 OCTO_COMM_TIMEOUT=${OCTO_COMM_TIMEOUT:-300}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
