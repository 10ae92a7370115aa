/* rt_collsize.c: rt_coll_bytes, the bytes of a bucket collective's buffer
 * (octo_rt.h; docs/dataparallel.md).  Arithmetic only, in a file of its
 * own without MPI, so that the compiler, which links the runtime for its
 * size functions, finds the runtime's formula without pulling in MPI. */
#include "octo_rt.h"

int64_t rt_coll_bytes(const rt_train *t, int kind, int64_t nparams)
{
	if (!t || nparams < 0 || kind < 0 || kind >= RT_NCOLL)
		return -1;
	int64_t dp = t->dp > 1 ? t->dp : 1, c = (nparams + dp - 1) / dp;
	int64_t esz = (t->dp_flags & RT_DP_EXACT) ? 8 * RT_EXACT_DIGITS : 4;
	switch (kind) {
	case RT_ALL_REDUCE: return nparams * esz;
	case RT_REDUCE_SCATTER: return c * dp * esz;
	default: return c * dp * 4;
	}
}
