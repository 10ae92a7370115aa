/* test_emu_comm.c: the emulator's stand-in for NCCL (runtime/dev/
 * dev_emu_comm.c), its DP group's collectives against NCCL's semantics, on
 * every rank of an MPI job (tests/dev/emu_comm.sh runs it on 3):
 *   - an all-reduce of f32 and of int64 (values above 2^60, which a double
 *     would round) summed in place in all of the buffer;
 *   - a reduce-scatter whose shard lands at the rank's own place
 *     (elements rank*count ..), the rest of the buffer as it was;
 *   - an all-gather that reads each rank's contribution from its own place;
 *   - two collectives in one group, completing as one;
 *   - a collective before dp_init: refused with a message.
 * Prints one line per failure; exit status the number of failures (0:
 * all hold) on every rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "dev.h"
#include "rt_internal.h"

#define COUNT 5

static int rank, nranks, fails;

static void check(int cond, const char *what, long i)
{
	if (!cond) {
		printf("rank %d: FAIL: %s (element %ld)\n", rank, what, i);
		fails++;
	}
}

/* Posts the collectives of `post` as one group and waits for it, at most
 * 30 s. */
static int group(const rt_dcomm *c, int (*post)(const rt_dcomm *c, void *arg), void *arg)
{
	void *done;
	bool complete = false;
	int rc;
	if ((rc = c->group_begin(c->self)) || (rc = post(c, arg)) || (rc = c->group_end(c->self, &done))) {
		printf("rank %d: FAIL: posting: %s\n", rank, c->error(c->self));
		fails++;
		return rc;
	}
	time_t t0 = time(NULL);
	while (!(rc = c->test(c->self, done, &complete)) && !complete && time(NULL) - t0 < 30)
		;
	c->release(c->self, done);
	check(!rc && complete, "the group completes", -1);
	return rc;
}

typedef struct bufs {
	float f[COUNT * 8];
	int64_t q[COUNT * 8];
	float s[COUNT * 8];
} bufs;

static int post_reduce(const rt_dcomm *c, void *arg)
{
	bufs *b = arg;
	int rc = c->coll(c->self, RT_ALL_REDUCE, b->f, COUNT, false);
	if (!rc)
		rc = c->coll(c->self, RT_ALL_REDUCE, b->q, COUNT, true);
	return rc;
}

static int post_scatter(const rt_dcomm *c, void *arg)
{
	return c->coll(c->self, RT_REDUCE_SCATTER, ((bufs *)arg)->s, COUNT, false);
}

static int post_gather(const rt_dcomm *c, void *arg)
{
	return c->coll(c->self, RT_ALL_GATHER, ((bufs *)arg)->f, COUNT, false);
}

int main(int argc, char **argv)
{
	struct rt_dcomm *c;
	char err[256];
	bufs b;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (nranks > 8) {
		printf("rank %d: FAIL: at most 8 ranks (%d)\n", rank, nranks);
		MPI_Finalize();
		return 1;
	}
	if (dev_emu_comm_create(&c, err, sizeof err)) {
		printf("rank %d: FAIL: %s\n", rank, err);
		MPI_Finalize();
		return 1;
	}

	/* before dp_init: refused */
	int rc = c->group_begin(c->self);
	if (!rc) {
		void *done;
		rc = c->coll(c->self, RT_ALL_REDUCE, b.f, COUNT, false);
		check(rc == RT_EARG && strstr(c->error(c->self), "before the DP group's communicator"),
		      "a collective before dp_init is refused", -1);
		if (!c->group_end(c->self, &done))
			c->release(c->self, done);
	}
	check(!c->dp_init(c->self, MPI_COMM_WORLD), "dp_init", -1);

	/* all-reduce, f32 and int64, in one group */
	for (long i = 0; i < COUNT; i++) {
		b.f[i] = (float)(rank + 1) * (float)(i + 1) * 0.5f;
		b.q[i] = ((int64_t)1 << 60) + (int64_t)rank * 3 + i;
	}
	group(c, post_reduce, &b);
	int64_t tri = (int64_t)nranks * (nranks + 1) / 2;
	for (long i = 0; i < COUNT; i++) {
		check(b.f[i] == (float)tri * (float)(i + 1) * 0.5f, "all-reduce f32 sum", i);
		check(b.q[i] == ((int64_t)nranks << 60) + 3 * (tri - nranks) + nranks * i,
		      "all-reduce int64 sum, exact", i);
	}

	/* reduce-scatter: the shard at the rank's own place, the rest kept */
	for (long i = 0; i < COUNT * nranks; i++)
		b.s[i] = (float)(rank * 100 + i);
	group(c, post_scatter, &b);
	for (long i = 0; i < COUNT * nranks; i++) {
		bool own = i / COUNT == rank;
		float want = own ? (float)(100 * (tri - nranks) + nranks * i) : (float)(rank * 100 + i);
		check(b.s[i] == want, own ? "reduce-scatter: the shard at the rank's place"
		                          : "reduce-scatter: the rest of the buffer kept", i);
	}

	/* all-gather: each rank's contribution from its own place */
	for (long i = 0; i < COUNT * nranks; i++)
		b.f[i] = i / COUNT == rank ? (float)(rank * 1000 + i % COUNT) : -1.0f;
	group(c, post_gather, &b);
	for (long i = 0; i < COUNT * nranks; i++)
		check(b.f[i] == (float)((i / COUNT) * 1000 + i % COUNT), "all-gather", i);

	c->destroy(c->self);
	int all = 0;
	MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("%s: %d failure(s) on %d ranks\n", all ? "FAIL" : "ok", all, nranks);
	MPI_Finalize();
	return all ? 1 : 0;
}
