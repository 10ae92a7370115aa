/* dev_emu_comm.c: the host emulator's stand-in for NCCL (OCTO_COMM=nccl
 * on an emulated rank; rt_device_attach_emu), so that the runtime's path
 * through a device's communicator (rt_dcomm, rt_comm.c) runs without a
 * GPU.  It keeps NCCL's semantics over MPI: no tags, messages between two
 * ranks matched in the order they are posted (MPI's non-overtaking rule on
 * a communicator of its own), and a group's operations completing as one.
 * The DP group's collectives are MPI's own non-blocking collectives on a
 * duplicate of the DP communicator, with NCCL's in-place forms: the
 * reduce-scatter's shard lands at the rank's own place in the buffer (MPI
 * receives it into a temporary, copied there when the group completes),
 * and the all-gather reads the rank's contribution from there. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev.h"
#include "rt_internal.h"

/* A reduce-scatter's shard, received aside: where it goes at completion. */
typedef struct emu_move {
	void *dst, *tmp;
	size_t bytes;
} emu_move;

typedef struct emu_group {
	int n, cap;
	MPI_Request *r;
	int nmove;
	emu_move *move; /* [cap] */
} emu_group;

typedef struct emu_comm {
	rt_dcomm c;
	MPI_Comm comm;
	MPI_Comm dp; /* the DP group's, or MPI_COMM_NULL */
	int replica;
	emu_group *open;
	char err[256];
} emu_comm;

static int ec_group_begin(void *s)
{
	emu_comm *e = s;
	if (!(e->open = calloc(1, sizeof *e->open))) {
		snprintf(e->err, sizeof e->err, "out of host memory");
		return RT_ENOMEM;
	}
	return RT_OK;
}

/* Room for one more request in the open group. */
static int grow(emu_comm *e)
{
	emu_group *g = e->open;
	if (g->n < g->cap)
		return RT_OK;
	int cap = g->cap ? 2 * g->cap : 4;
	MPI_Request *r = realloc(g->r, (size_t)cap * sizeof *r);
	if (r)
		g->r = r;
	emu_move *m = r ? realloc(g->move, (size_t)cap * sizeof *m) : NULL;
	if (!m) {
		snprintf(e->err, sizeof e->err, "out of host memory");
		return RT_ENOMEM;
	}
	g->move = m;
	g->cap = cap;
	return RT_OK;
}

static int ec_post(emu_comm *e, bool send, void *buf, size_t bytes, int peer)
{
	emu_group *g = e->open;
	int rc = grow(e);
	if (rc)
		return rc;
	rc = send ? MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, 0, e->comm, &g->r[g->n])
	              : MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, 0, e->comm, &g->r[g->n]);
	if (rc != MPI_SUCCESS) {
		snprintf(e->err, sizeof e->err, "%s failed (the emulator's NCCL)", send ? "MPI_Isend" : "MPI_Irecv");
		return RT_EMPI;
	}
	g->n++;
	return RT_OK;
}

static int ec_send(void *s, const void *buf, size_t bytes, int peer)
{
	return ec_post(s, true, (void *)buf, bytes, peer);
}

static int ec_recv(void *s, void *buf, size_t bytes, int peer)
{
	return ec_post(s, false, buf, bytes, peer);
}

static int ec_dp_init(void *s, MPI_Comm dpc)
{
	emu_comm *e = s;
	if (MPI_Comm_dup(dpc, &e->dp) != MPI_SUCCESS || MPI_Comm_rank(e->dp, &e->replica) != MPI_SUCCESS) {
		snprintf(e->err, sizeof e->err, "MPI_Comm_dup of the DP communicator failed (the "
		         "emulator's NCCL)");
		return RT_EMPI;
	}
	return RT_OK;
}

static int ec_coll(void *s, int kind, void *buf, size_t count, bool i64)
{
	emu_comm *e = s;
	emu_group *g = e->open;
	MPI_Datatype ty = i64 ? MPI_INT64_T : MPI_FLOAT;
	size_t esz = i64 ? sizeof(int64_t) : sizeof(float);
	int rc = grow(e), mrc;
	if (rc)
		return rc;
	if (e->dp == MPI_COMM_NULL || count > INT_MAX) {
		snprintf(e->err, sizeof e->err, "%s (the emulator's NCCL)", e->dp == MPI_COMM_NULL
		         ? "a collective before the DP group's communicator" : "more than INT_MAX elements");
		return RT_EARG;
	}
	if (kind == RT_ALL_REDUCE) {
		mrc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, ty, MPI_SUM, e->dp, &g->r[g->n]);
	} else if (kind == RT_REDUCE_SCATTER) {
		emu_move *m = &g->move[g->nmove];
		if (!(m->tmp = malloc(count ? count * esz : 1))) {
			snprintf(e->err, sizeof e->err, "out of host memory");
			return RT_ENOMEM;
		}
		m->dst = (char *)buf + (size_t)e->replica * count * esz; /* this rank's place */
		m->bytes = count * esz;
		mrc = MPI_Ireduce_scatter_block(buf, m->tmp, (int)count, ty, MPI_SUM, e->dp, &g->r[g->n]);
		if (mrc == MPI_SUCCESS)
			g->nmove++;
		else
			free(m->tmp);
	} else {
		mrc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)count, ty, e->dp,
		                     &g->r[g->n]);
	}
	if (mrc != MPI_SUCCESS) {
		snprintf(e->err, sizeof e->err, "the DP group's collective failed (the emulator's NCCL)");
		return RT_EMPI;
	}
	g->n++;
	return RT_OK;
}

static int ec_group_end(void *s, void **done)
{
	emu_comm *e = s;
	*done = e->open;
	e->open = NULL;
	return RT_OK;
}

static int ec_test(void *s, void *done, bool *complete)
{
	emu_comm *e = s;
	emu_group *g = done;
	int flag = 0;
	if (MPI_Testall(g->n, g->r, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
		snprintf(e->err, sizeof e->err, "MPI_Testall failed (the emulator's NCCL)");
		return RT_EMPI;
	}
	/* NCCL's in-place reduce-scatter: the shard at the rank's own place */
	for (int i = 0; flag && i < g->nmove; i++) {
		memcpy(g->move[i].dst, g->move[i].tmp, g->move[i].bytes);
		free(g->move[i].tmp);
	}
	if (flag)
		g->nmove = 0;
	*complete = flag;
	return RT_OK;
}

static void ec_release(void *s, void *done)
{
	(void)s;
	emu_group *g = done;
	for (int i = 0; i < g->n; i++)
		if (g->r[i] != MPI_REQUEST_NULL)
			MPI_Request_free(&g->r[i]);
	for (int i = 0; i < g->nmove; i++)
		free(g->move[i].tmp); /* not completed: the rank is failing */
	free(g->r);
	free(g->move);
	free(g);
}

static const char *ec_error(void *s)
{
	return ((emu_comm *)s)->err;
}

static void ec_destroy(void *s)
{
	emu_comm *e = s;
	if (e->open)
		ec_release(e, e->open);
	MPI_Comm_free(&e->comm);
	if (e->dp != MPI_COMM_NULL)
		MPI_Comm_free(&e->dp);
	free(e);
}

int dev_emu_comm_create(struct rt_dcomm **out, char *err, size_t errlen)
{
	emu_comm *e = calloc(1, sizeof *e);
	*out = NULL;
	if (!e) {
		snprintf(err, errlen, "device: out of host memory");
		return RT_ENOMEM;
	}
	if (MPI_Comm_dup(MPI_COMM_WORLD, &e->comm) != MPI_SUCCESS) {
		free(e);
		snprintf(err, errlen, "MPI_Comm_dup failed (the emulator's NCCL)");
		return RT_EMPI;
	}
	e->dp = MPI_COMM_NULL;
	e->c = (rt_dcomm){.self = e, .group_begin = ec_group_begin, .send = ec_send, .recv = ec_recv,
	                  .dp_init = ec_dp_init, .coll = ec_coll, .group_end = ec_group_end, .test = ec_test, .release = ec_release,
	                  .error = ec_error, .destroy = ec_destroy};
	*out = &e->c;
	return RT_OK;
}
