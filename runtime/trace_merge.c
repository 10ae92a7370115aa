/* trace_merge.c: octo-trace-merge DIR NRANKS OUT — joins the per-rank
 * Chrome traces DIR/trace-rank0.json ... trace-rank<NRANKS-1>.json that
 * libocto_rt writes into one file OUT (rt_trace_merge). */
#include <stdio.h>
#include <stdlib.h>

#include "octo_rt.h"

int main(int argc, char **argv)
{
	char err[4200];
	char *end;
	if (argc != 4) {
		fprintf(stderr, "usage: octo-trace-merge DIR NRANKS OUT\n");
		return 2;
	}
	long n = strtol(argv[2], &end, 10);
	if (*end || n < 1 || n > 1 << 20) {
		fprintf(stderr, "octo-trace-merge: error: NRANKS '%s': expected a positive integer\n", argv[2]);
		return 2;
	}
	if (rt_trace_merge(argv[1], (int)n, argv[3], err, sizeof err)) {
		fprintf(stderr, "octo-trace-merge: error: %s\n", err);
		return 1;
	}
	return 0;
}
