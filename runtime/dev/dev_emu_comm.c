/* dev_emu_comm.c: the host emulator's stand-in for NCCL (OCTO_COMM=nccl
 * on an emulated rank; rt_device_attach_emu), so that the runtime's path
 * through a device's communicator (rt_dcomm, rt_comm.c) runs without a
 * GPU.  It keeps NCCL's semantics over MPI: no tags, messages between two
 * ranks matched in the order they are posted (MPI's non-overtaking rule on
 * a communicator of its own), and a group's operations completing as one. */
#include <stdio.h>
#include <stdlib.h>

#include "dev.h"
#include "rt_internal.h"

typedef struct emu_group {
	int n, cap;
	MPI_Request *r;
} emu_group;

typedef struct emu_comm {
	rt_dcomm c;
	MPI_Comm comm;
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

static int ec_post(emu_comm *e, bool send, void *buf, size_t bytes, int peer)
{
	emu_group *g = e->open;
	if (g->n == g->cap) {
		int cap = g->cap ? 2 * g->cap : 4;
		MPI_Request *r = realloc(g->r, (size_t)cap * sizeof *r);
		if (!r) {
			snprintf(e->err, sizeof e->err, "out of host memory");
			return RT_ENOMEM;
		}
		g->r = r;
		g->cap = cap;
	}
	int rc = send ? MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, 0, e->comm, &g->r[g->n])
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
	free(g->r);
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
	e->c = (rt_dcomm){.self = e, .group_begin = ec_group_begin, .send = ec_send, .recv = ec_recv,
	                  .group_end = ec_group_end, .test = ec_test, .release = ec_release,
	                  .error = ec_error, .destroy = ec_destroy};
	*out = &e->c;
	return RT_OK;
}
