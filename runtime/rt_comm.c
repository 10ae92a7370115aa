/* rt_comm.c: point-to-point communication over MPI non-blocking calls.
 *
 * A send or receive is posted at once (MPI_Isend, or MPI_Issend in the
 * synchronous test mode, and MPI_Irecv) and named by a small integer handle;
 * rt_wait completes it.  A group collects several posts under one handle.
 * The MPI tag encodes (stage, micro-batch, kind), so two messages in flight
 * between the same ranks can never be taken for each other, whatever the
 * order the schedule posts them in.  A collective of the DP group
 * (rt_dp.c posts it) takes a handle of the same table through
 * rt__coll_req, so its wait has the same deadline and trace; its op
 * carries the function that completes it (the result back into the
 * layers), called through a pointer so that this file stays below rt_dp.c.
 * On a rank with a device communicator the collective is a group of that
 * communicator's (rt__coll_dcomm), finished once the group completes.
 *
 * Waits poll (MPI_Test, one request at a time) against a deadline instead
 * of blocking: a peer that died or a schedule that deadlocks becomes
 * RT_ETIMEOUT naming what is pending, which the caller turns into a
 * job-wide abort.  In the
 * synchronous mode a send completes only once its receive is posted, as
 * under rendezvous semantics, so a program that works only because small
 * sends are buffered hangs there, and the timeout makes that visible.
 *
 * A wait that times out asks who is stuck before it fails: every rank
 * answers, whenever it polls (in a wait, in a collective, around each
 * kernel), what it waits for, over a communicator of its own; the rank
 * that timed out follows that wait-for chain from the peer it waits for
 * until a rank does not answer (stopped, or stuck outside the runtime),
 * the chain closes on itself (ranks waiting for each other), or a rank is
 * not waiting (slow, not stuck), and its message says which.
 *
 * A device rank (rt_device.c) passes device buffers.  With the device's
 * own communicator (NCCL) the operations go to it, in the groups the
 * program opens (a lone operation is a group of one), and a wait polls
 * the group's completion against the same deadline.  Without one, MPI
 * moves them: directly when the host can read device memory (the
 * emulator), else through a host copy (OCTO_COMM=mpi on a GPU: the send
 * copies out when posted, the receive copies in when its wait completes,
 * both through the executor's to_host and from_host, rt_exec.h). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rt_exec.h"
#include "rt_internal.h"

#define TAG_KIND_BITS 2
#define TAG_MB_BITS 18
#define TAG_STAGE_BITS 10

static const char *msg_name(rt_msg k)
{
	static const char *const n[RT_NMSG] = {"act", "grad", "other"};
	return (unsigned)k < RT_NMSG ? n[k] : "?";
}

static int encode_tag(rt_ctx *ctx, rt_tag t, int *out)
{
	if (t.stage < 0 || t.stage >= 1 << TAG_STAGE_BITS || t.mb < 0 || t.mb >= 1 << TAG_MB_BITS ||
	    (unsigned)t.kind >= RT_NMSG)
		return rt__fail(ctx, RT_EARG,
		                "message tag out of range: stage %d (< %d), micro-batch %d (< %d), kind %d",
		                (int)t.stage, 1 << TAG_STAGE_BITS, (int)t.mb, 1 << TAG_MB_BITS, (int)t.kind);
	*out = (t.stage << (TAG_MB_BITS + TAG_KIND_BITS)) | (t.mb << TAG_KIND_BITS) | (int)t.kind;
	return RT_OK;
}

static int describe(const rt_op *o, char *buf, size_t len)
{
	static const char *const coll[RT_NCOLL] = {"all-reduce", "reduce-scatter", "all-gather"};
	if (o->coll == RT_TIE_COLL)
		return snprintf(buf, len, "the tied gradient's all-reduce with rank %d (local layer %d, "
		                "%zu bytes)", o->peer, o->h0, o->bytes);
	if (o->coll >= 0)
		return snprintf(buf, len, "%s of the DP group (local layers %d..%d, %zu bytes)",
		                o->coll < RT_NCOLL ? coll[o->coll] : "?", o->h0, o->h1, o->bytes);
	return snprintf(buf, len, "%s rank %d (stage %d, micro-batch %d, %s, %zu bytes)",
	                o->send ? "send to" : "recv from", o->peer, (int)o->tag.stage,
	                (int)o->tag.mb, msg_name(o->tag.kind), o->bytes);
}

/* A free handle, or -1 with the error recorded. */
static int new_req(rt_ctx *ctx)
{
	for (int i = 0; i < ctx->nreqs; i++)
		if (!ctx->reqs[i].used) {
			ctx->reqs[i].used = true;
			ctx->reqs[i].n = 0;
			return i;
		}
	int n = ctx->nreqs ? 2 * ctx->nreqs : 16;
	rt_req *r = realloc(ctx->reqs, (size_t)n * sizeof *r);
	if (!r) {
		rt__fail(ctx, RT_ENOMEM, "communication handles: out of memory");
		return -1;
	}
	memset(r + ctx->nreqs, 0, (size_t)(n - ctx->nreqs) * sizeof *r);
	int i = ctx->nreqs;
	ctx->reqs = r;
	ctx->nreqs = n;
	r[i].used = true;
	return i;
}

static int push(rt_ctx *ctx, rt_req *r, const rt_op *op, MPI_Request **mr)
{
	if (r->n == r->cap) {
		int cap = r->cap ? 2 * r->cap : 2;
		MPI_Request *m = realloc(r->mr, (size_t)cap * sizeof *m);
		if (!m)
			return rt__fail(ctx, RT_ENOMEM, "communication handles: out of memory");
		r->mr = m;
		rt_op *o = realloc(r->ops, (size_t)cap * sizeof *o);
		if (!o)
			return rt__fail(ctx, RT_ENOMEM, "communication handles: out of memory");
		r->ops = o;
		r->cap = cap;
	}
	r->ops[r->n] = *op;
	*mr = &r->mr[r->n++];
	return RT_OK;
}

/* A device rank over MPI, device memory the host cannot read: the host
 * copy a send moves (made now) or a receive lands in. */
static int stage(rt_ctx *ctx, rt_op *op, void *buf)
{
	char desc[160];
	if (!(op->stage = malloc(op->bytes ? op->bytes : 1)))
		return rt__fail(ctx, RT_ENOMEM, "communication: out of host memory");
	if (!op->send) {
		op->dst = buf;
		return RT_OK;
	}
	int rc = ctx->exec->to_host(ctx, op->stage, buf, op->bytes);
	if (rc) {
		char why[sizeof ctx->err];
		snprintf(why, sizeof why, "%s", ctx->err);
		free(op->stage);
		op->stage = NULL;
		describe(op, desc, sizeof desc);
		return rt__fail(ctx, rc, "%s: copy from the device: %s", desc, why);
	}
	return RT_OK;
}

/* The device's communicator: the operation joins the open group, or is a
 * group of its own. */
static int post_dcomm(rt_ctx *ctx, int h, rt_op *op, void *buf, int *req, int64_t t0)
{
	const rt_dcomm *c = ctx->dcomm;
	char desc[160];
	MPI_Request *mr;
	bool alone = ctx->group < 0;
	int rc;
	op->dcomm = true;
	if ((rc = push(ctx, &ctx->reqs[h], op, &mr))) {
		if (alone)
			ctx->reqs[h].used = false;
		return rc;
	}
	*mr = MPI_REQUEST_NULL;
	if (alone && (rc = c->group_begin(c->self)))
		goto fail;
	if ((rc = op->send ? c->send(c->self, buf, op->bytes, op->peer)
	                   : c->recv(c->self, buf, op->bytes, op->peer)))
		goto fail;
	if (alone && (rc = c->group_end(c->self, &ctx->reqs[h].done)))
		goto fail;
	if (alone)
		*req = h;
	rt__trace(ctx, op->send ? "send" : "recv", t0, -1, op->tag.mb, op->peer, (int64_t)op->bytes);
	return RT_OK;
fail:
	ctx->reqs[h].n--;
	if (alone)
		ctx->reqs[h].used = false;
	describe(op, desc, sizeof desc);
	return rt__fail(ctx, rc, "%s: %s", desc, c->error(c->self));
}

static int post(rt_ctx *ctx, bool send, int peer, void *buf, size_t bytes, rt_tag tag, int *req)
{
	int rc, mtag = 0, h;
	char desc[160], mpimsg[MPI_MAX_ERROR_STRING];
	rt_op op = {.peer = peer, .tag = tag, .bytes = bytes, .send = send, .coll = -1};

	if (!ctx)
		return RT_EARG;
	if (req)
		*req = -1;
	if (!req && ctx->group < 0)
		return rt__fail(ctx, RT_EARG, "%s: no handle to return outside a group",
		                send ? "rt_send" : "rt_recv");
	if (peer < 0 || peer >= ctx->world)
		return rt__fail(ctx, RT_EARG, "%s: peer rank %d outside 0..%d", send ? "rt_send" : "rt_recv",
		                peer, ctx->world - 1);
	if (bytes && !buf)
		return rt__fail(ctx, RT_EARG, "%s: %zu bytes at NULL", send ? "rt_send" : "rt_recv", bytes);
	/* MPI counts are ints; NCCL's are size_t. */
	if (bytes > INT_MAX && !ctx->dcomm)
		return rt__fail(ctx, RT_EARG, "%s: %zu bytes: over MPI's %d a message (the CUDA ranks "
		                "talk through NCCL, which takes more)", send ? "rt_send" : "rt_recv",
		                bytes, INT_MAX);
	if ((rc = encode_tag(ctx, tag, &mtag)))
		return rc;

	int64_t t0 = rt__now_ns();
	h = ctx->group >= 0 ? ctx->group : new_req(ctx);
	if (h < 0)
		return RT_ENOMEM;
	MPI_Request *mr = NULL;
	if (ctx->dcomm)
		return post_dcomm(ctx, h, &op, buf, req, t0);
	if (ctx->comm_stage && (rc = stage(ctx, &op, buf))) {
		if (ctx->group < 0)
			ctx->reqs[h].used = false;
		return rc;
	}
	if ((rc = push(ctx, &ctx->reqs[h], &op, &mr))) {
		free(op.stage);
		if (ctx->group < 0)
			ctx->reqs[h].used = false;
		return rc;
	}
	if (op.stage)
		buf = op.stage;
	if (send && (ctx->flags & RT_COMM_SYNC))
		rc = MPI_Issend(buf, (int)bytes, MPI_BYTE, peer, mtag, MPI_COMM_WORLD, mr);
	else if (send)
		rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, mtag, MPI_COMM_WORLD, mr);
	else
		rc = MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, mtag, MPI_COMM_WORLD, mr);
	if (rc != MPI_SUCCESS) {
		ctx->reqs[h].n--;
		free(op.stage);
		if (ctx->group < 0)
			ctx->reqs[h].used = false;
		describe(&op, desc, sizeof desc);
		return rt__fail(ctx, RT_EMPI, "%s: %s", desc, rt__mpierr(rc, mpimsg));
	}
	if (ctx->group < 0)
		*req = h;
	rt__trace(ctx, send ? "send" : "recv", t0, -1, tag.mb, peer, (int64_t)bytes);
	return RT_OK;
}

int rt_send(rt_ctx *ctx, int peer, const void *buf, size_t bytes, rt_tag tag, int *req)
{
	return post(ctx, true, peer, (void *)buf, bytes, tag, req);
}

int rt_recv(rt_ctx *ctx, int peer, void *buf, size_t bytes, rt_tag tag, int *req)
{
	return post(ctx, false, peer, buf, bytes, tag, req);
}

int rt_group_begin(rt_ctx *ctx)
{
	if (!ctx)
		return RT_EARG;
	if (ctx->group >= 0)
		return rt__fail(ctx, RT_ESTATE, "rt_group_begin: a group is already open");
	int h = new_req(ctx);
	if (h < 0)
		return RT_ENOMEM;
	if (ctx->dcomm) {
		int rc = ctx->dcomm->group_begin(ctx->dcomm->self);
		if (rc) {
			ctx->reqs[h].used = false;
			return rt__fail(ctx, rc, "rt_group_begin: %s", ctx->dcomm->error(ctx->dcomm->self));
		}
	}
	ctx->group = h;
	return RT_OK;
}

int rt_group_end(rt_ctx *ctx, int *req)
{
	if (!ctx || !req)
		return RT_EARG;
	if (ctx->group < 0)
		return rt__fail(ctx, RT_ESTATE, "rt_group_end: no group is open");
	int h = ctx->group;
	ctx->group = -1;
	if (ctx->dcomm) {
		int rc = ctx->dcomm->group_end(ctx->dcomm->self, &ctx->reqs[h].done);
		if (rc) {
			ctx->reqs[h].used = false;
			return rt__fail(ctx, rc, "rt_group_end: %s", ctx->dcomm->error(ctx->dcomm->self));
		}
	}
	*req = h;
	return RT_OK;
}

/* ---- the wait-for chain ------------------------------------------------------ */

enum { TAG_ASK = 1, TAG_TELL = 2 };
#define WS_WORDS ((int)(sizeof(rt_waitstate) / sizeof(int64_t)))

static void nap(void);

int rt__ctl_init(rt_ctx *ctx)
{
	MPI_Request req;
	MPI_Comm c = MPI_COMM_NULL;
	char mpimsg[MPI_MAX_ERROR_STRING];
	int rc = rt__coll(ctx, MPI_Comm_idup(MPI_COMM_WORLD, &c, &req), &req, "rt_init");
	if (rc)
		return rc;
	MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
	for (int i = 0; i < RT_NTELL; i++)
		ctx->tell[i].req = MPI_REQUEST_NULL;
	if ((rc = MPI_Irecv(&ctx->ask_buf, 1, MPI_INT, MPI_ANY_SOURCE, TAG_ASK, c, &ctx->ask)) !=
	    MPI_SUCCESS) {
		MPI_Comm_free(&c);
		return rt__fail(ctx, RT_EMPI, "rt_init: %s", rt__mpierr(rc, mpimsg));
	}
	ctx->ctl = c;
	return RT_OK;
}

void rt__ctl_free(rt_ctx *ctx)
{
	if (ctx->ctl == MPI_COMM_NULL)
		return;
	if (ctx->ask != MPI_REQUEST_NULL) {
		MPI_Cancel(&ctx->ask);
		MPI_Wait(&ctx->ask, MPI_STATUS_IGNORE);
	}
	for (int i = 0; i < RT_NTELL; i++)
		if (ctx->tell[i].req != MPI_REQUEST_NULL)
			MPI_Request_free(&ctx->tell[i].req);
	MPI_Comm_free(&ctx->ctl);
	ctx->ctl = MPI_COMM_NULL;
}

/* Answers a question, if one came: what this rank waits for. */
static void serve(rt_ctx *ctx)
{
	MPI_Status st;
	int flag = 0;
	if (ctx->ctl == MPI_COMM_NULL || ctx->ask == MPI_REQUEST_NULL ||
	    MPI_Test(&ctx->ask, &flag, &st) != MPI_SUCCESS || !flag)
		return;
	for (int k = 0; k < RT_NTELL; k++) {
		int i = (ctx->next_tell + k) % RT_NTELL, free_ = 1;
		if (ctx->tell[i].req != MPI_REQUEST_NULL)
			MPI_Test(&ctx->tell[i].req, &free_, MPI_STATUS_IGNORE);
		if (!free_)
			continue;
		ctx->tell[i].ws = ctx->waiting;
		MPI_Isend(&ctx->tell[i].ws, WS_WORDS, MPI_INT64_T, st.MPI_SOURCE, TAG_TELL, ctx->ctl,
		          &ctx->tell[i].req);
		ctx->next_tell = (i + 1) % RT_NTELL;
		break;
	}
	MPI_Irecv(&ctx->ask_buf, 1, MPI_INT, MPI_ANY_SOURCE, TAG_ASK, ctx->ctl, &ctx->ask);
}

/* Asks ranks[0..n-1] at once what they wait for, answering questions
 * meanwhile; answered[i] says who did within grace_s seconds. */
static int ask(rt_ctx *ctx, int n, const int *ranks, rt_waitstate *ws, bool *answered,
               double grace_s)
{
	MPI_Request *rr = malloc((size_t)n * 2 * sizeof *rr);
	if (!rr)
		return RT_ENOMEM;
	MPI_Request *sr = rr + n;
	for (int i = 0; i < n; i++) {
		answered[i] = false;
		rr[i] = sr[i] = MPI_REQUEST_NULL;
		if (MPI_Irecv(&ws[i], WS_WORDS, MPI_INT64_T, ranks[i], TAG_TELL, ctx->ctl, &rr[i]) ==
		    MPI_SUCCESS)
			MPI_Isend(&ctx->rank, 1, MPI_INT, ranks[i], TAG_ASK, ctx->ctl, &sr[i]);
	}
	int64_t end = rt__now_ns() + (int64_t)(grace_s * 1e9);
	for (long spin = 0;; spin++) {
		int left = 0;
		for (int i = 0; i < n; i++) {
			int done = 0;
			if (!answered[i] && rr[i] != MPI_REQUEST_NULL &&
			    MPI_Test(&rr[i], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)
				answered[i] = true;
			left += !answered[i];
		}
		serve(ctx);
		if (!left || rt__now_ns() > end)
			break;
		if (spin > 64)
			nap();
	}
	for (int i = 0; i < n; i++) {
		if (rr[i] != MPI_REQUEST_NULL) {
			MPI_Cancel(&rr[i]);
			MPI_Wait(&rr[i], MPI_STATUS_IGNORE);
		}
		if (sr[i] != MPI_REQUEST_NULL)
			MPI_Request_free(&sr[i]); /* the question is ctx->rank: it stays */
	}
	free(rr);
	return RT_OK;
}

static double grace(const rt_ctx *ctx)
{
	return ctx->timeout_s / 2 > 1 ? ctx->timeout_s / 2 : 1;
}

/* Appends to ctx->err what the wait-for chain from `peer` finds. */
static void diagnose(rt_ctx *ctx, int peer)
{
	char chain[512];
	size_t at, len = strlen(ctx->err);
	bool *seen = calloc((size_t)ctx->world, sizeof *seen);
	if (ctx->ctl == MPI_COMM_NULL || peer < 0 || peer >= ctx->world || !seen) {
		free(seen);
		return;
	}
	if (peer == ctx->rank) {
		snprintf(ctx->err + len, sizeof ctx->err - len, ": rank %d waits for itself (the matching "
		         "operation is its own and not posted)", peer);
		free(seen);
		return;
	}
	double g = grace(ctx);
	at = (size_t)snprintf(chain, sizeof chain, "rank %d waits for rank %d", ctx->rank, peer);
	seen[ctx->rank] = true;
	for (int cur = peer;;) {
		rt_waitstate ws;
		bool answered;
		seen[cur] = true;
		if (ask(ctx, 1, &cur, &ws, &answered, g))
			break;
		char *e = ctx->err + len;
		size_t room = sizeof ctx->err - len;
		if (!answered) {
			snprintf(e, room, ": rank %d stopped answering (%s, which has not answered for %g s: "
			         "stopped, or stuck outside the runtime)", cur, chain, g);
		} else if ((ws.state == RT_WS_SEND || ws.state == RT_WS_RECV) && ws.peer >= 0 &&
		           ws.peer < ctx->world) {
			if (at < sizeof chain)
				at += (size_t)snprintf(chain + at, sizeof chain - at, ", which waits for rank %lld",
				                       (long long)ws.peer);
			if (!seen[ws.peer]) {
				cur = (int)ws.peer;
				continue;
			}
			snprintf(e, room, ": the ranks wait for each other (%s: a deadlock, or sends and "
			         "receives that do not match)", chain);
		} else if (ws.state == RT_WS_COLL) {
			snprintf(e, room, " (%s, which waits in an operation of all ranks)", chain);
		} else {
			snprintf(e, room, " (%s, which answers and is not waiting: slow, not stuck)", chain);
		}
		break;
	}
	free(seen);
}

/* After a collective timed out: which ranks do not answer, or are not in it. */
static void diagnose_all(rt_ctx *ctx)
{
	int n = ctx->world - 1, *ranks = malloc((size_t)(n ? n : 1) * sizeof *ranks);
	rt_waitstate *ws = malloc((size_t)(n ? n : 1) * sizeof *ws);
	bool *answered = malloc((size_t)(n ? n : 1) * sizeof *answered);
	if (ctx->ctl == MPI_COMM_NULL || !ranks || !ws || !answered || !n)
		goto out;
	for (int i = 0, r = 0; r < ctx->world; r++)
		if (r != ctx->rank)
			ranks[i++] = r;
	if (ask(ctx, n, ranks, ws, answered, grace(ctx)))
		goto out;
	size_t len = strlen(ctx->err);
	int shown = 0;
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < n && shown < 8 && len < sizeof ctx->err; i++) {
			if (pass == 0 && !answered[i])
				len += (size_t)snprintf(ctx->err + len, sizeof ctx->err - len,
				                        "%s rank %d stopped answering", shown++ ? ";" : ":",
				                        ranks[i]);
			else if (pass == 1 && answered[i] && ws[i].state == RT_WS_RUNNING)
				len += (size_t)snprintf(ctx->err + len, sizeof ctx->err - len,
				                        "%s rank %d is not in it (running)", shown++ ? ";" : ":",
				                        ranks[i]);
			else if (pass == 1 && answered[i] && ws[i].state != RT_WS_COLL)
				len += (size_t)snprintf(ctx->err + len, sizeof ctx->err - len,
				                        "%s rank %d is not in it (it waits for rank %lld)",
				                        shown++ ? ";" : ":", ranks[i], (long long)ws[i].peer);
		}
out:
	free(answered);
	free(ws);
	free(ranks);
}

static void set_waiting(rt_ctx *ctx, const rt_op *o)
{
	if (o->coll >= 0) {
		ctx->waiting = (rt_waitstate){RT_WS_COLL, -1, 0, 0, (int64_t)o->coll, (int64_t)o->bytes};
		return;
	}
	ctx->waiting = (rt_waitstate){o->send ? RT_WS_SEND : RT_WS_RECV, o->peer, o->tag.stage,
	                              o->tag.mb, (int64_t)o->tag.kind, (int64_t)o->bytes};
}

static void nap(void)
{
	struct timespec ts = {0, 20000};
	nanosleep(&ts, NULL);
}

/* The pending operations of the handles, for a timeout message. */
static void pending(rt_ctx *ctx, int n, const int *hs, char *buf, size_t len)
{
	size_t at = 0;
	int shown = 0;
	buf[0] = 0;
	for (int i = 0; i < n; i++) {
		rt_req *r = &ctx->reqs[hs[i]];
		for (int j = 0; j < r->n; j++) {
			int done = 0;
			if (r->ops[j].done)
				continue;
			MPI_Request_get_status(r->mr[j], &done, MPI_STATUS_IGNORE);
			if (done)
				continue;
			if (shown == 4 || at >= len) {
				if (at < len)
					snprintf(buf + at, len - at, "; ...");
				return;
			}
			if (at < len)
				at += (size_t)snprintf(buf + at, len - at, "%s", shown ? "; " : "");
			if (at < len)
				at += (size_t)describe(&r->ops[j], buf + at, len - at);
			shown++;
		}
	}
}

/* Request j of handle r has completed (MPI_Test succeeded; the status's
 * MPI_ERROR field is not set by single-request calls): check a receive's
 * size. */
static int check_done(rt_ctx *ctx, rt_req *r, int j, MPI_Status *st)
{
	char desc[160];
	int count = 0;
	if (r->ops[j].dcomm)
		return RT_OK;
	if (r->ops[j].coll >= 0)
		return r->ops[j].finish ? r->ops[j].finish(ctx, &r->ops[j]) : RT_OK;
	if (!r->ops[j].send) {
		MPI_Get_count(st, MPI_BYTE, &count);
		if ((size_t)count != r->ops[j].bytes) {
			describe(&r->ops[j], desc, sizeof desc);
			return rt__fail(ctx, RT_EMPI, "%s: the message has %d bytes", desc, count);
		}
	}
	rt_op *o = &r->ops[j];
	if (o->dst) {
		/* complete on return: the host copy is freed below */
		int rc = ctx->exec->from_host(ctx, o->dst, o->stage, o->bytes);
		if (rc) {
			char why[sizeof ctx->err];
			snprintf(why, sizeof why, "%s", ctx->err);
			describe(o, desc, sizeof desc);
			return rt__fail(ctx, rc, "%s: copy to the device: %s", desc, why);
		}
	}
	free(o->stage);
	o->stage = o->dst = NULL;
	return RT_OK;
}

/* The device communicator's group of handle r has completed, polled
 * against the deadline. */
static int wait_dcomm(rt_ctx *ctx, rt_req *r, int64_t deadline)
{
	const rt_dcomm *c = ctx->dcomm;
	char what[700];
	size_t at = 0;
	for (long spin = 0;; spin++) {
		bool complete = false;
		int rc = c->test(c->self, r->done, &complete);
		if (rc)
			return rt__fail(ctx, rc, "%s", c->error(c->self));
		if (complete)
			break;
		if (r->n)
			set_waiting(ctx, &r->ops[0]);
		serve(ctx);
		if (rt__now_ns() > deadline) {
			what[0] = 0;
			for (int j = 0; j < r->n && at < sizeof what; j++)
				at += (size_t)describe(&r->ops[j], what + at, sizeof what - at);
			rt__fail(ctx, RT_ETIMEOUT, "timed out after %g s waiting for the device's group: %s",
			         ctx->timeout_s, what);
			if (r->n && r->ops[0].coll >= 0)
				diagnose_all(ctx);
			else
				diagnose(ctx, r->n ? r->ops[0].peer : -1);
			return RT_ETIMEOUT;
		}
		if (spin > 64)
			nap();
	}
	c->release(c->self, r->done);
	r->done = NULL;
	/* a collective's result is there now */
	for (int j = 0; j < r->n; j++) {
		int rc;
		if (r->ops[j].coll >= 0 && r->ops[j].finish && (rc = r->ops[j].finish(ctx, &r->ops[j])))
			return rc;
	}
	return RT_OK;
}

static int waitall(rt_ctx *ctx, int n, const int *hs, bool keep);

int rt_waitall(rt_ctx *ctx, int n, const int *hs)
{
	if (!ctx)
		return RT_EARG;
	int rc = waitall(ctx, n, hs, false);
	ctx->waiting = (rt_waitstate){RT_WS_RUNNING, -1, 0, 0, 0, 0};
	return rc;
}

int rt__comm_drain(rt_ctx *ctx)
{
	int rc = RT_OK;
	for (int i = 0; i < ctx->nreqs && !rc; i++) {
		const rt_req *r = &ctx->reqs[i];
		bool coll = r->used && r->n > 0 && i != ctx->group;
		for (int j = 0; coll && j < r->n; j++)
			coll = r->ops[j].coll >= 0;
		if (coll)
			rc = waitall(ctx, 1, &i, true);
	}
	ctx->waiting = (rt_waitstate){RT_WS_RUNNING, -1, 0, 0, 0, 0};
	return rc;
}

/* keep: complete the requests' operations but leave the handles pending,
 * for the program's own wait (rt__comm_drain). */
static int waitall(rt_ctx *ctx, int n, const int *hs, bool keep)
{
	char mpimsg[MPI_MAX_ERROR_STRING];
	if (!ctx || n < 0 || (n && !hs))
		return RT_EARG;
	/* RT_NO_REQ is nothing to wait for: a carried wait in the first step
	 * (nothing was posted before it), or an op an evaluation pass dropped
	 * (codegen/host.c): the others are waited for. */
	for (int i = 0; i < n; i++)
		if (hs[i] == RT_NO_REQ) {
			int *live = malloc((size_t)n * sizeof *live), m = 0;
			if (!live)
				return rt__fail(ctx, RT_ENOMEM, "rt_wait: out of memory");
			for (int k = 0; k < n; k++)
				if (hs[k] != RT_NO_REQ)
					live[m++] = hs[k];
			int rc = waitall(ctx, m, live, keep);
			free(live);
			return rc;
		}
	for (int i = 0; i < n; i++)
		if (hs[i] < 0 || hs[i] >= ctx->nreqs || !ctx->reqs[hs[i]].used || hs[i] == ctx->group)
			return rt__fail(ctx, RT_EARG, "rt_wait: %d is not a pending handle", hs[i]);

	int64_t t0 = rt__now_ns();
	int64_t deadline = t0 + (int64_t)(ctx->timeout_s * 1e9);
	int64_t bytes = 0;
	for (int i = 0; i < n; i++) {
		rt_req *r = &ctx->reqs[hs[i]];
		for (int j = 0; j < r->n; j++) {
			MPI_Status st;
			int done = 0;
			if (r->ops[j].done)
				continue;
			set_waiting(ctx, &r->ops[j]);
			for (long spin = 0;; spin++) {
				int rc = MPI_Test(&r->mr[j], &done, &st);
				if (rc != MPI_SUCCESS) {
					char desc[160];
					describe(&r->ops[j], desc, sizeof desc);
					return rt__fail(ctx, RT_EMPI, "%s: %s", desc, rt__mpierr(rc, mpimsg));
				}
				if (done)
					break;
				serve(ctx);
				if (rt__now_ns() > deadline) {
					char what[400];
					pending(ctx, n, hs, what, sizeof what);
					rt__fail(ctx, RT_ETIMEOUT, "timed out after %g s waiting for: %s",
					         ctx->timeout_s, what);
					if (r->ops[j].coll >= 0)
						diagnose_all(ctx);
					else
						diagnose(ctx, r->ops[j].peer);
					return RT_ETIMEOUT;
				}
				/* Ranks may share cores: spin briefly, then sleep. */
				if (spin > 64)
					nap();
			}
			r->ops[j].done = true;
			int rc = check_done(ctx, r, j, &st);
			if (rc)
				return rc;
			bytes += (int64_t)r->ops[j].bytes;
		}
		if (r->done) {
			int rc = wait_dcomm(ctx, r, deadline);
			if (rc)
				return rc;
		}
	}
	for (int i = 0; i < n && !keep; i++) {
		rt_req *r = &ctx->reqs[hs[i]];
		int peer = r->n == 1 ? r->ops[0].peer : -1;
		int64_t mb = r->n == 1 ? r->ops[0].tag.mb : -1;
		r->used = false;
		r->n = 0;
		if (i == n - 1)
			rt__trace(ctx, "wait", t0, -1, mb, peer, bytes);
	}
	return RT_OK;
}

int rt_wait(rt_ctx *ctx, int req)
{
	return rt_waitall(ctx, 1, &req);
}

int rt__coll_req(rt_ctx *ctx, const rt_op *op, int *req, MPI_Request **mr)
{
	*req = -1;
	if (ctx->group >= 0)
		return rt__fail(ctx, RT_ESTATE, "rt_post_coll: inside a group (a collective has a handle "
		                "of its own)");
	int h = new_req(ctx), rc;
	if (h < 0)
		return RT_ENOMEM;
	if ((rc = push(ctx, &ctx->reqs[h], op, mr))) {
		ctx->reqs[h].used = false;
		return rc;
	}
	**mr = MPI_REQUEST_NULL;
	*req = h;
	return RT_OK;
}

void rt__coll_drop(rt_ctx *ctx, int req)
{
	ctx->reqs[req].used = false;
	ctx->reqs[req].n = 0;
}

int rt__coll_dcomm(rt_ctx *ctx, const rt_op *op, void *buf, size_t count, bool i64, int *req)
{
	const rt_dcomm *c = ctx->dcomm;
	MPI_Request *mr;
	char desc[160];
	int h, rc;
	if ((rc = rt__coll_req(ctx, op, &h, &mr)))
		return rc;
	ctx->reqs[h].ops[0].dcomm = true;
	if ((rc = c->group_begin(c->self)))
		goto fail;
	if ((rc = c->coll(c->self, op->coll, buf, count, i64))) {
		void *done;
		if (!c->group_end(c->self, &done))
			c->release(c->self, done);
		goto fail;
	}
	if ((rc = c->group_end(c->self, &ctx->reqs[h].done)))
		goto fail;
	*req = h;
	return RT_OK;
fail:
	rt__coll_drop(ctx, h);
	describe(op, desc, sizeof desc);
	return rt__fail(ctx, rc, "rt_post_coll: %s, on the device's communicator: %s", desc,
	                c->error(c->self));
}

int rt__coll(rt_ctx *ctx, int posted, MPI_Request *r, const char *what)
{
	char mpimsg[MPI_MAX_ERROR_STRING];
	int64_t deadline = rt__now_ns() + (int64_t)(ctx->timeout_s * 1e9);
	if (posted != MPI_SUCCESS)
		return rt__fail(ctx, RT_EMPI, "%s: %s", what, rt__mpierr(posted, mpimsg));
	rt_waitstate was = ctx->waiting;
	ctx->waiting = (rt_waitstate){RT_WS_COLL, -1, 0, 0, 0, 0};
	int rc;
	for (long spin = 0;; spin++) {
		int done = 0;
		if ((rc = MPI_Test(r, &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS) {
			rc = rt__fail(ctx, RT_EMPI, "%s: %s", what, rt__mpierr(rc, mpimsg));
			break;
		}
		if (done) {
			rc = RT_OK;
			break;
		}
		serve(ctx);
		if (rt__now_ns() > deadline) {
			rc = rt__fail(ctx, RT_ETIMEOUT, "%s: timed out after %g s in an operation of all ranks",
			              what, ctx->timeout_s);
			diagnose_all(ctx);
			break;
		}
		if (spin > 64)
			nap();
	}
	ctx->waiting = was;
	return rc;
}

void rt__progress(rt_ctx *ctx)
{
	serve(ctx);
	/* Any MPI call drives Open MPI's progress engine: a rendezvous send
	 * posted before a long computation moves on while the kernels run
	 * between calls, instead of waiting for this rank's next wait. */
	for (int i = 0; i < ctx->nreqs; i++)
		if (ctx->reqs[i].used && ctx->reqs[i].n) {
			int flag;
			MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
			return;
		}
}

int rt__comm_free_all(rt_ctx *ctx)
{
	for (int i = 0; i < ctx->nreqs; i++) {
		for (int j = 0; j < ctx->reqs[i].n; j++)
			free(ctx->reqs[i].ops[j].stage);
		if (ctx->reqs[i].done && ctx->dcomm)
			ctx->dcomm->release(ctx->dcomm->self, ctx->reqs[i].done);
		free(ctx->reqs[i].mr);
		free(ctx->reqs[i].ops);
	}
	free(ctx->reqs);
	ctx->reqs = NULL;
	ctx->nreqs = 0;
	return RT_OK;
}
