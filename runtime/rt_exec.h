/* rt_exec.h: the executor of a rank -- what runs its layers' F, B, W and
 * the optimizer step, and holds the training state the kernels read.  One
 * table of functions, two implementations: the host's CPU kernels
 * (rt_exec_cpu.c: the state is the host's arrays in the arena) and a
 * device (rt_device.c: the state on the device, the host's arrays a copy).
 * The table is chosen in two places only: rt_init takes the CPU's, and
 * rt_device_attach_* (rt__dev_attach) replaces it with the device's; every
 * other file calls through ctx->exec and never asks which it is.
 *
 * Every function returns RT_OK or an RT_ code with its message in ctx->err
 * (the caller adds where it was: the step, the layer, the phase).  Private
 * to the runtime. */
#ifndef OCTO_RT_EXEC_H
#define OCTO_RT_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "octo_rt.h"

/* What an executor runs on, as the profile reports it. */
typedef struct rt_exec_info {
	const char *device; /* the device's name; NULL: the host's CPU kernels */
	bool bf16;          /* the programs' buffers hold bf16 values (else f32) */
	size_t value_bytes; /* one value of an activation or gradient in them */
	size_t cache_bytes; /* the cache a cold run evicts (the host's per-core L2) */
} rt_exec_info;

typedef struct rt_exec {
	const char *name; /* in the profile's header: "CPU kernels, f32", ... */
	const char *on;   /* in messages after the micro-batch: "" or " on the device" */

	/* ---- the model and the step (rt_model.c, rt_ckpt.c) ---- */
	/* After the host's arrays are laid out and initialised. */
	int (*model_init)(rt_ctx *ctx);
	/* F, B, W of local layer h on the programs' buffers; F of the
	 * embedding and the head takes micro-batch mb's ids from the data, and
	 * the head's F records mb's loss (now, or by collect). */
	int (*f)(rt_ctx *ctx, int h, int64_t mb, const void *x, void *y, void *act);
	int (*b)(rt_ctx *ctx, int h, const void *dy, float dscale, void *dx, const void *act, void *ws);
	int (*w)(rt_ctx *ctx, int h, const void *ws);
	/* The step's work finished and the head's losses in ctx->mb_loss. */
	int (*collect)(rt_ctx *ctx);
	/* The optimizer step of every layer rt_update has not updated this
	 * step (step ctx->step + 1), gradients cleared; the host's arrays may
	 * lag until pull.  (update below, over each such layer whole.) */
	int (*optimize)(rt_ctx *ctx);
	/* The host's parameters and moments current (a checkpoint, the model
	 * hash, rt_layer_get read them). */
	int (*pull)(rt_ctx *ctx);
	/* The host's parameters and moments to the executor, gradients cleared
	 * (after a checkpoint is loaded into them). */
	int (*upload)(rt_ctx *ctx);
	/* Clears layer h's gradients (the profile's W runs added to them). */
	int (*zero_grad)(rt_ctx *ctx, int h);
	/* Layer h's buffer sizes as this executor runs it (stashes in its
	 * storage type). */
	int (*sizes)(rt_ctx *ctx, int h, rt_sizes *sz);

	/* ---- the memory the programs' buffers are in (rt_profile.c, rt_comm.c) ---- */
	int (*alloc)(rt_ctx *ctx, size_t bytes, void **p); /* zeroed */
	void (*release)(rt_ctx *ctx, void *p);               /* NULL is nothing */
	/* n f32 values from the host into a buffer, in its storage type. */
	int (*put)(rt_ctx *ctx, void *dst, const float *src, int64_t n);
	/* Raw bytes between a buffer and host memory, complete on return. */
	int (*to_host)(rt_ctx *ctx, void *dst, const void *src, size_t bytes);
	int (*from_host)(rt_ctx *ctx, void *dst, const void *src, size_t bytes);
	/* Waits for the work issued (a no-op on the host). */
	int (*sync)(rt_ctx *ctx);
	/* Writes buf (bytes, from alloc) to evict the cache before a cold run. */
	int (*evict)(rt_ctx *ctx, void *buf, size_t bytes);
	void (*info)(const rt_ctx *ctx, rt_exec_info *out);

	/* ---- data parallelism (rt_dp.c) ---- */
	/* rt_dp.c keeps what a bucket is (its layers, the shard, the exact
	 * digits) and posts its collective on a buffer of the programs' memory
	 * (through MPI, or the device's communicator: rt_comm.c); these move a
	 * layer's state in and out of such a buffer and run its update.  On a
	 * device they are in the compute stream's order, which the device
	 * communicator's groups wait for and are waited for by. */
	/* Elements [a, b) of layer h's gradients (grad) or parameters, f32,
	 * between the executor's state and buf (element a at buf[0]): into buf
	 * (to_buf), or back (parameters: the master copy and the kernels'
	 * storage type, rounded as the optimizer's step rounds it). */
	int (*dp_copy)(rt_ctx *ctx, int h, bool grad, int64_t a, int64_t b, void *buf, bool to_buf);
	/* Layer h's gradients and the host's array l->g, which the exact mode
	 * adds from and rounds into (rt_exact.c): all of them to the host
	 * (to_host), or elements [a, b) from it.  Nothing to move on the CPU,
	 * whose l->g they are. */
	int (*grad_sync)(rt_ctx *ctx, int h, int64_t a, int64_t b, bool to_host);
	/* Elements [a, b) of layer h's gradients times s, in f32, where the
	 * update reads them (clipping's scale, rt_sched.c, before the update;
	 * on a device the host's l->g, which the norm read, is not changed). */
	int (*scale_grad)(rt_ctx *ctx, int h, int64_t a, int64_t b, float s);
	/* The optimizer step (step ctx->step + 1) of elements [a, b) of layer
	 * h (maybe empty; the moments held are [l->mlo, l->mhi), which the
	 * range is inside), then all of h's gradients cleared. */
	int (*update)(rt_ctx *ctx, int h, int64_t a, int64_t b);
	/* Zeroes bytes of a buffer (alloc's, or the programs' block). */
	int (*clear)(rt_ctx *ctx, void *p, size_t bytes);

	/* ---- timing the executor's work (rt_trace.c) ---- */
	/* A mark in the order of the work issued (a device: an event on the
	 * compute stream), the nanoseconds from one mark to a later one once
	 * both are reached (after sync), and a mark freed.  NULL on the host,
	 * whose F, B and W are over when their call returns: the host's clock
	 * times them. */
	int (*mark)(rt_ctx *ctx, void **m);
	int (*since)(rt_ctx *ctx, void *from, void *to, int64_t *ns);
	void (*unmark)(rt_ctx *ctx, void *m);

	/* ---- the end ---- */
	/* Before MPI_Abort: stop what runs on the device (nothing on the host). */
	void (*abort)(rt_ctx *ctx);
	/* Frees the executor's state (rt_finalize, after the communication). */
	void (*free)(rt_ctx *ctx);
} rt_exec;

/* The host's CPU kernels (rt_exec_cpu.c): every context's until a device
 * is attached. */
extern const rt_exec rt__exec_cpu;

#endif
