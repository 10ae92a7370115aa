/* dev_emu.c: the host emulator backend (dev.h, docs/cuda.md).
 *
 * Device memory is host memory; GEMMs are OpenBLAS's sgemm (bf16 through f32
 * temporaries); kernels are the modules' entry points compiled for the host
 * (codegen/cuda_emu.h, cg_cuda_emu_source) and called once per thread.
 *
 * A launch runs the blocks one after another and the threads of a block in
 * turn, thread i on fiber i (a stack of its own, made with makecontext and
 * kept across launches).  __syncthreads() passes control to the next thread
 * of the block; the last one passes it back to the scheduler, which ends
 * the "phase": when every thread waits at the barrier, the next phase
 * resumes them all, in order; when every thread has returned, the block is
 * done; a mix is a kernel whose threads diverge at a barrier, an error (the
 * waiting fibers are started afresh).  Blocks run one at a time, so a
 * module's __shared__ arrays are plain statics.
 *
 * Most kernels have no barrier: thread 0 of the first block runs on its
 * fiber, and if it returns without a barrier, every other thread of the
 * launch is a plain call.  Barriers are uniform in the generated kernels; a
 * plain thread that reaches one is reported as an error.
 *
 * The thread's coordinates and the barrier reach a module through the
 * pointer to dev_emu_ctx that its first entry, octo_emu_bind, stores in the
 * module's own static (before every launch, so that emulators of one process
 * may share a loaded module); no symbol is resolved across the shared
 * object's boundary.  One launch at a time per process: the modules'
 * statics are shared. */
#undef _FORTIFY_SOURCE /* siglongjmp between fibers' stacks (below) */
#include <cblas.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "dev.h"

extern char **environ;

/* What a module reads threadIdx ... and __syncthreads from is
 * octo_emu_ctx (emu_abi.h): the modules are compiled against the same
 * header's text, so the two cannot disagree, and no layout is checked at
 * run time (a module is compiled by the octopipe that links it with this
 * runtime, or at run time from its source). */
typedef octo_emu_ctx dev_emu_ctx;

enum { MAX_THREADS = 1024, STACK_BYTES = 256 << 10 };

typedef enum fiber_state { F_WAIT, F_DONE } fiber_state;

/* Where the scheduler or a fiber is parked, and (for AddressSanitizer's
 * fiber annotations) its stack. */
typedef struct park {
	sigjmp_buf jb;
	void *fake;
	const void *bottom;
	size_t size;
} park;

typedef struct fiber {
	ucontext_t uc;  /* its start */
	park park;
	void *map;      /* guard page + stack */
	unsigned id;    /* the thread it runs */
	fiber_state st; /* at a barrier or returned (valid after a phase) */
} fiber;

typedef struct module {
	char *name;
	const dev_emu_entry *table; /* table[0] is octo_emu_bind */
	void *dl;                   /* dlopen handle, or NULL (linked into the program) */
} module;

typedef struct emu {
	rt_dev dev;
	dev_emu_ctx ctx;
	module *mods;
	int nmods, capmods;
	fiber *fib[MAX_THREADS]; /* allocated up to the largest block launched */
	unsigned nfib;
	park sched;              /* the scheduler, parked while a block runs */
	park *from;              /* the last to switch away (AddressSanitizer) */
	float *tmp; /* the bf16 GEMM's f32 operands */
	size_t ntmp;

	/* the launch in progress */
	const char *mod_name, *fn;
	void (*call)(void **args);
	void **args;
	unsigned block;    /* threads per block */
	unsigned cur;      /* the fiber running */
	bool in_fibers;    /* false: threads are plain calls */
	bool probing;      /* thread 0 of the first block, no barrier met yet */
	bool plain_sync;   /* a plain thread reached a barrier */
	unsigned sync_thread, sync_block;
	unsigned row_define; /* OCTO_ROW of the modules compiled from source (0: the ABI's) */
	struct emu_put { const void *src; void *was; size_t bytes; } *puts; /* put_async's, not waited for */
	int nputs, capputs;
} emu;

static emu *of_ctx(dev_emu_ctx *ctx)
{
	return (emu *)((char *)ctx - offsetof(emu, ctx));
}

/* ---- memory ------------------------------------------------------------------ */

/* Device memory is poisoned: every byte 0xff, a NaN in f32 and in bf16
 * and -1 as an index, so that a kernel or GEMM reading what nothing wrote
 * shows in its results, as cudaMalloc's leftovers would on a GPU. */
static int emu_alloc(rt_dev *d, size_t bytes, void **p)
{
	size_t n = bytes ? (bytes + 255) & ~(size_t)255 : 256;
	if (n < bytes || !(*p = aligned_alloc(256, n)))
		return dev_fail(d, RT_ENOMEM, "emu: cannot allocate %zu bytes", bytes);
	memset(*p, 0xff, n);
	return RT_OK;
}

static void emu_free(rt_dev *d, void *p)
{
	free(p);
}

/* The wait put_async's contract asks for: every source given since the
 * last wait must still hold what was copied (on a GPU the copy may read
 * it until now). */
static int settle(rt_dev *d)
{
	emu *e = d->impl;
	int rc = RT_OK;
	for (int i = 0; i < e->nputs; i++) {
		struct emu_put *p = &e->puts[i];
		if (!rc && memcmp(p->src, p->was, p->bytes) != 0)
			rc = dev_fail(d, RT_EDEVICE, "emu: the host memory at %p (%zu bytes) of an asynchronous "
			              "copy to the device was written before the device was waited for",
			              p->src, p->bytes);
		free(p->was);
	}
	e->nputs = 0;
	return rc;
}

static int emu_copy(rt_dev *d, void *dst, const void *src, size_t bytes, dev_dir dir)
{
	if (bytes)
		memmove(dst, src, bytes);
	return dir == DEV_D2H ? settle(d) : RT_OK; /* CUDA's waits for the stream */
}

static int emu_host_alloc(rt_dev *d, size_t bytes, void **p)
{
	if (!(*p = malloc(bytes ? bytes : 1)))
		return dev_fail(d, RT_ENOMEM, "emu: cannot allocate %zu bytes of host memory", bytes);
	return RT_OK;
}

static void emu_host_free(rt_dev *d, void *p)
{
	free(p);
}

static int emu_put_async(rt_dev *d, void *dst, const void *src, size_t bytes)
{
	emu *e = d->impl;
	if (!bytes)
		return RT_OK;
	if (e->nputs == e->capputs) {
		int cap = e->capputs ? 2 * e->capputs : 8;
		struct emu_put *more = realloc(e->puts, (size_t)cap * sizeof *more);
		if (!more)
			return dev_fail(d, RT_ENOMEM, "emu: out of host memory");
		e->puts = more;
		e->capputs = cap;
	}
	void *was = malloc(bytes);
	if (!was)
		return dev_fail(d, RT_ENOMEM, "emu: out of host memory");
	memcpy(was, src, bytes);
	memcpy(dst, src, bytes);
	e->puts[e->nputs++] = (struct emu_put){src, was, bytes};
	return RT_OK;
}

static int emu_zero(rt_dev *d, void *p, size_t bytes)
{
	if (bytes)
		memset(p, 0, bytes);
	return RT_OK;
}

static int emu_sync_dev(rt_dev *d)
{
	return settle(d);
}

/* Marks: the host's clock (the emulator's work is done when its call
 * returns). */
static int emu_mark(rt_dev *d, void **m)
{
	struct timespec *t = malloc(sizeof *t);
	if (!t)
		return dev_fail(d, RT_ENOMEM, "emu: out of host memory");
	clock_gettime(CLOCK_MONOTONIC, t);
	*m = t;
	return RT_OK;
}

static int emu_elapsed(rt_dev *d, void *from, void *to, double *ms)
{
	const struct timespec *a = from, *b = to;
	*ms = (double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) * 1e-6;
	return RT_OK;
}

static void emu_unmark(rt_dev *d, void *m)
{
	free(m);
}

/* ---- GEMM -------------------------------------------------------------------- */

static void widen(const uint16_t *src, int64_t rows, int64_t cols, int64_t ld, float *dst)
{
	for (int64_t i = 0; i < rows; i++)
		for (int64_t j = 0; j < cols; j++)
			dst[i * cols + j] = dev_from_bf16(src[i * ld + j]);
}

static void narrow(const float *src, int64_t rows, int64_t cols, uint16_t *dst, int64_t ld)
{
	for (int64_t i = 0; i < rows; i++)
		for (int64_t j = 0; j < cols; j++)
			dst[i * ld + j] = dev_to_bf16(src[i * cols + j]);
}

/* kernels.inc's mm() in f32. */
static void mm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
               int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
	if (k == 0) {
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++)
				c[i * ldc + j] = beta == 0 ? 0 : beta * c[i * ldc + j];
		return;
	}
	cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
	            (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

/* The sizes BLAS takes (it would only print a complaint and skip the product). */
static int emu_gemm_check(rt_dev *d, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                          int64_t lda, int64_t ldb, int64_t ldc)
{
	if (m < 0 || n < 0 || k < 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX ||
	    ldb > INT_MAX || ldc > INT_MAX)
		return dev_fail(d, RT_EARG, "emu gemm: sizes m %lld n %lld k %lld (lda %lld ldb %lld "
		                "ldc %lld) out of range", (long long)m, (long long)n, (long long)k,
		                (long long)lda, (long long)ldb, (long long)ldc);
	int64_t ac = ta ? m : k, bc = tb ? k : n;
	if (m && n && (lda < (ac > 1 ? ac : 1) || ldb < (bc > 1 ? bc : 1) || ldc < n))
		return dev_fail(d, RT_EARG, "emu gemm: leading dimensions lda %lld ldb %lld ldc %lld "
		                "narrower than the rows (%lld, %lld, %lld)", (long long)lda, (long long)ldb,
		                (long long)ldc, (long long)ac, (long long)bc, (long long)n);
	return RT_OK;
}

static int emu_gemm(rt_dev *d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                    const void *a, int64_t lda, const void *b, int64_t ldb, float beta, void *c,
                    int64_t ldc, bool c_f32)
{
	emu *e = d->impl;
	DEV_TRY(emu_gemm_check(d, ta, tb, m, n, k, lda, ldb, ldc));
	if (m == 0 || n == 0)
		return RT_OK;
	int64_t ac = ta ? m : k, bc = tb ? k : n;
	if (!d->bf16) {
		mm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
		return RT_OK;
	}
	/* bf16: A, B (and C unless c_f32) widened to dense f32 copies. */
	int64_t ar = ta ? k : m, br = tb ? n : k;
	size_t need = (size_t)(ar * ac + br * bc + (c_f32 ? 0 : m * n));
	if (need > e->ntmp) {
		float *t = realloc(e->tmp, need * sizeof *t);
		if (!t)
			return dev_fail(d, RT_ENOMEM, "emu gemm: cannot allocate %zu floats", need);
		e->tmp = t;
		e->ntmp = need;
	}
	float *A = e->tmp, *B = A + ar * ac, *C = B + br * bc;
	widen(a, ar, ac, lda, A);
	widen(b, br, bc, ldb, B);
	if (c_f32) {
		mm(ta, tb, m, n, k, alpha, A, ac, B, bc, beta, c, ldc);
		return RT_OK;
	}
	if (beta == 0)
		memset(C, 0, (size_t)(m * n) * sizeof *C);
	else
		widen(c, m, n, ldc, C);
	mm(ta, tb, m, n, k, alpha, A, ac, B, bc, beta, C, n);
	narrow(C, m, n, c, ldc);
	return RT_OK;
}

/* A loop over the batch: f32 operands (ab_f32, or f32 storage) straight
 * to mm(), the others through emu_gemm. */
static int emu_gemm_sb(rt_dev *d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                       const void *a, int64_t lda, int64_t sa, const void *b, int64_t ldb,
                       int64_t sb, float beta, void *c, int64_t ldc, int64_t sc, int64_t batch,
                       bool ab_f32, bool c_f32)
{
	if (batch < 0)
		return dev_fail(d, RT_EARG, "emu gemm: batch %lld", (long long)batch);
	if (ab_f32 && d->bf16 && !c_f32)
		return dev_fail(d, RT_EARG, "emu gemm: f32 operands need an f32 result");
	bool f32 = ab_f32 || !d->bf16;
	size_t ea = f32 ? sizeof(float) : dev_esz(d), ec = c_f32 || !d->bf16 ? sizeof(float) : 2;
	for (int64_t i = 0; i < batch; i++) {
		const char *ai = (const char *)a + (size_t)(i * sa) * ea;
		const char *bi = (const char *)b + (size_t)(i * sb) * ea;
		char *ci = (char *)c + (size_t)(i * sc) * ec;
		if (f32) {
			DEV_TRY(emu_gemm_check(d, ta, tb, m, n, k, lda, ldb, ldc));
			if (m && n)
				mm(ta, tb, m, n, k, alpha, (const float *)ai, lda, (const float *)bi, ldb, beta,
				   (float *)ci, ldc);
		} else {
			DEV_TRY(emu_gemm(d, ta, tb, m, n, k, alpha, ai, lda, bi, ldb, beta, ci, ldc, c_f32));
		}
	}
	return RT_OK;
}

/* ---- fibers -------------------------------------------------------------------
 *
 * Fiber i always runs thread i.  It is started once (makecontext, setcontext)
 * and then loops: run the kernel for the current thread, pass on, run again
 * when resumed.  Control moves between the fibers and the scheduler with
 * sigsetjmp(.., 0) / siglongjmp, which save no signal mask: swapcontext
 * makes a system call (rt_sigprocmask) per switch, and a row kernel over 128
 * rows took 5.6 ms with it, 0.7 ms without.  The stacks are distinct and
 * every frame jumped to is live, which glibc's longjmp allows; its
 * _FORTIFY_SOURCE check (__longjmp_chk) does not know about fibers, hence
 * the #undef at the top. */

static void fiber_main(unsigned hi, unsigned lo, unsigned id);

/* AddressSanitizer must be told of every stack switch, else it warns and
 * may report false positives; the stack arrived from is learnt on arrival
 * (the scheduler's is the caller's). */
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/common_interface_defs.h>
#define LEAVE(e, self, to) \
	((e)->from = (self), __sanitizer_start_switch_fiber(&(self)->fake, (to)->bottom, (to)->size))
#define ARRIVE(e, self) \
	__sanitizer_finish_switch_fiber((self)->fake, &(e)->from->bottom, &(e)->from->size)
#else
#define LEAVE(e, self, to) ((void)0)
#define ARRIVE(e, self) ((void)0)
#endif

/* Park here and resume `to`. */
static void switch_to(emu *e, park *self, park *to)
{
	if (!sigsetjmp(self->jb, 0)) {
		LEAVE(e, self, to);
		siglongjmp(to->jb, 1);
	}
	ARRIVE(e, self);
}

/* (Re)start fiber f: it runs up to its park point and comes back. */
static void boot(emu *e, fiber *f)
{
	uintptr_t p = (uintptr_t)e;
	f->uc.uc_stack.ss_sp = (void *)f->park.bottom;
	f->uc.uc_stack.ss_size = f->park.size;
	f->uc.uc_link = NULL;
	f->park.fake = NULL;
	makecontext(&f->uc, (void (*)(void))fiber_main, 3, (unsigned)((uint64_t)p >> 32), (unsigned)p,
	            f->id);
	if (!sigsetjmp(e->sched.jb, 0)) {
		LEAVE(e, &e->sched, &f->park);
		setcontext(&f->uc);
	}
	ARRIVE(e, &e->sched);
}

/* e->fib[id], started. */
static int new_fiber(emu *e, unsigned id)
{
	long page = sysconf(_SC_PAGESIZE);
	fiber *f = calloc(1, sizeof *f);
	if (!f)
		return RT_ENOMEM;
	/* The lowest page is a guard: an overflowing kernel faults, not corrupts. */
	f->map = mmap(NULL, STACK_BYTES + (size_t)page, PROT_READ | PROT_WRITE,
	              MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (f->map == MAP_FAILED || mprotect(f->map, (size_t)page, PROT_NONE) ||
	    getcontext(&f->uc)) {
		if (f->map != MAP_FAILED)
			munmap(f->map, STACK_BYTES + (size_t)page);
		free(f);
		return RT_ENOMEM;
	}
	f->park.bottom = (char *)f->map + page;
	f->park.size = STACK_BYTES;
	f->id = id;
	e->fib[id] = f;
	boot(e, f);
	return RT_OK;
}

static void free_fiber(fiber *f)
{
	munmap(f->map, STACK_BYTES + (size_t)sysconf(_SC_PAGESIZE));
	free(f);
}

/* Fiber i has reached a barrier or returned: on to the next thread of the
 * block, or back to the scheduler after the last (or after the probe). */
static void pass(emu *e, unsigned i)
{
	if (e->probing || i + 1 == e->block) {
		switch_to(e, &e->fib[i]->park, &e->sched);
		return;
	}
	e->cur = i + 1;
	e->ctx.thread.x = i + 1;
	switch_to(e, &e->fib[i]->park, &e->fib[i + 1]->park);
}

static void fiber_main(unsigned hi, unsigned lo, unsigned id)
{
	emu *e = (emu *)(((uintptr_t)((uint64_t)hi << 32)) | lo);
	fiber *f = e->fib[id];
	ARRIVE(e, &f->park);
	switch_to(e, &f->park, &e->sched);
	for (;;) {
		e->call(e->args);
		f->st = F_DONE;
		pass(e, id);
	}
}

/* __syncthreads() of the module running. */
static void emu_barrier(dev_emu_ctx *ctx)
{
	emu *e = of_ctx(ctx);
	if (!e->in_fibers) {
		if (!e->plain_sync) {
			e->plain_sync = true;
			e->sync_thread = ctx->thread.x;
			e->sync_block = ctx->block.x;
		}
		return;
	}
	unsigned i = e->cur;
	e->probing = false;
	e->fib[i]->st = F_WAIT;
	pass(e, i);
}

/* Block b on fibers, phase after phase.  *plain (first block only): thread
 * 0 returned without a barrier, the other threads are left to run plain. */
/* Blocks run in reverse order (grid - 1 first), and so do the threads of
 * a block that meets no barrier: a GPU promises no order, and a kernel
 * whose result depends on one fails here rather than on the first GPU. */
static int run_block(emu *e, unsigned b, bool first, bool *plain)
{
	e->ctx.block.x = b;
	e->probing = first;
	for (;;) {
		e->cur = 0;
		e->ctx.thread.x = 0;
		switch_to(e, &e->sched, &e->fib[0]->park);
		if (e->probing) {
			*plain = true;
			return RT_OK;
		}
		unsigned done = 0, ret = 0, wait = 0;
		for (unsigned i = 0; i < e->block; i++) {
			if (e->fib[i]->st == F_DONE)
				done++, ret = i;
			else
				wait = i;
		}
		if (done == e->block)
			return RT_OK;
		if (done) {
			/* The waiting fibers are inside the kernel: start them afresh. */
			for (unsigned i = 0; i < e->block; i++)
				if (e->fib[i]->st == F_WAIT)
					boot(e, e->fib[i]);
			return dev_fail(&e->dev, RT_EINVAL, "emu module %s: kernel %s: threads of block %u "
			                "diverge at __syncthreads (thread %u returned, thread %u waits)",
			                e->mod_name, e->fn, b, ret, wait);
		}
	}
}

static int emu_launch(rt_dev *d, int mod, const char *fn, unsigned grid, unsigned block, void **args)
{
	emu *e = d->impl;
	if (mod < 0 || mod >= e->nmods)
		return dev_fail(d, RT_EARG, "emu: kernel %s: no module %d (%d loaded)", fn, mod, e->nmods);
	module *m = &e->mods[mod];
	const dev_emu_entry *ent = m->table + 1;
	while (ent->name && strcmp(ent->name, fn) != 0)
		ent++;
	if (!ent->name)
		return dev_fail(d, RT_EARG, "emu module %s: no kernel %s", m->name, fn);
	if (block == 0 || block > MAX_THREADS)
		return dev_fail(d, RT_EARG, "emu module %s: kernel %s: %u threads per block (1 to %d)",
		                m->name, fn, block, MAX_THREADS);
	if (grid == 0)
		return RT_OK;
	for (; e->nfib < block; e->nfib++)
		if (new_fiber(e, e->nfib))
			return dev_fail(d, RT_ENOMEM, "emu module %s: kernel %s: no stack for thread %u",
			                m->name, fn, e->nfib);
	m->table[0].call((void *[]){&e->ctx});
	e->ctx.block_dim = (octo_emu_dim3){block, 1, 1};
	e->ctx.grid_dim = (octo_emu_dim3){grid, 1, 1};
	e->ctx.thread = e->ctx.block = (octo_emu_dim3){0, 0, 0};
	e->mod_name = m->name;
	e->fn = fn;
	e->call = ent->call;
	e->args = args;
	e->block = block;
	e->plain_sync = false;

	e->in_fibers = true;
	bool plain = false;
	int rc = RT_OK;
	unsigned b = 0;
	for (; b < grid && !plain && rc == RT_OK; b++)
		rc = run_block(e, grid - 1 - b, b == 0, &plain);
	e->in_fibers = false;
	if (rc || !plain)
		return rc;

	/* The fast path: thread 0 of the last block has run; the rest are
	 * calls, from the last thread down. */
	e->ctx.block.x = grid - 1;
	for (unsigned i = block - 1; i >= 1; i--) {
		e->ctx.thread.x = i;
		e->call(args);
	}
	for (b = 1; b < grid && !e->plain_sync; b++) {
		e->ctx.block.x = grid - 1 - b;
		for (unsigned i = block; i-- > 0;) {
			e->ctx.thread.x = i;
			e->call(args);
		}
	}
	if (e->plain_sync)
		return dev_fail(d, RT_EINVAL, "emu module %s: kernel %s: threads diverge at "
		                "__syncthreads (thread %u of block %u waits, thread 0 of block %u returned "
		                "without one)", m->name, fn, e->sync_thread, e->sync_block, grid - 1);
	return RT_OK;
}

/* ---- modules ------------------------------------------------------------------ */

static void emu_destroy(rt_dev *d)
{
	emu *e = d->impl;
	for (int i = 0; i < e->nmods; i++) {
		if (e->mods[i].dl)
			dlclose(e->mods[i].dl);
		free(e->mods[i].name);
	}
	free(e->mods);
	for (unsigned i = 0; i < e->nfib; i++)
		free_fiber(e->fib[i]);
	for (int i = 0; i < e->nputs; i++) /* their sources may be freed: not compared */
		free(e->puts[i].was);
	free(e->puts);
	free(e->tmp);
	free(e);
}

static const dev_ops emu_ops = {
    .name = "emu",
    .gemm = emu_gemm,
    .gemm_sb = emu_gemm_sb,
    .launch = emu_launch,
    .copy = emu_copy,
    .zero = emu_zero,
    .alloc = emu_alloc,
    .free = emu_free,
    .sync = emu_sync_dev,
    .destroy = emu_destroy,
    .mark = emu_mark,
    .elapsed = emu_elapsed,
    .unmark = emu_unmark,
    .host_alloc = emu_host_alloc,
    .host_free = emu_host_free,
    .put_async = emu_put_async,
};

void dev_emu_gpu_launch(rt_dev *d)
{
	emu *e = d->impl;
	e->row_define = 256;
	d->row = d->each_block = 256;
	d->max_grid = 8192;
}

int dev_emu_create(int rank, bool bf16, rt_dev **out)
{
	emu *e = calloc(1, sizeof *e);
	if (!e)
		return RT_ENOMEM;
	e->dev = (rt_dev){
	    .ops = &emu_ops,
	    .bf16 = bf16,
	    .row = DEV_EMU_ROW,
	    .each_block = 32,
	    .max_grid = 64,
	    .rank = rank,
	    .name = "the host emulator of the CUDA path",
	    .impl = e,
	};
	long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
	e->dev.cache_bytes = l2 > 0 ? (size_t)l2 : (size_t)1 << 20;
	e->ctx.sync = emu_barrier;
	*out = &e->dev;
	return RT_OK;
}

static int add_module(rt_dev *d, const char *name, const dev_emu_entry *table, void *dl)
{
	emu *e = d->impl;
	if (!table || !table[0].name || strcmp(table[0].name, "octo_emu_bind") != 0)
		return dev_fail(d, RT_EARG, "emu module %s: the table does not start with octo_emu_bind "
		                "(cg_cuda_emu_source makes it)", name);
	table[0].call((void *[]){&e->ctx});
	if (e->nmods == e->capmods) {
		int cap = e->capmods ? 2 * e->capmods : 8;
		module *m = realloc(e->mods, (size_t)cap * sizeof *m);
		if (!m)
			return dev_fail(d, RT_ENOMEM, "emu module %s: out of memory", name);
		e->mods = m;
		e->capmods = cap;
	}
	char *copy = strdup(name);
	if (!copy)
		return dev_fail(d, RT_ENOMEM, "emu module %s: out of memory", name);
	e->mods[e->nmods++] = (module){copy, table, dl};
	return RT_OK;
}

int dev_emu_add_table(rt_dev *d, const char *name, const dev_emu_entry *table)
{
	return add_module(d, name, table, NULL);
}

static int write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	int bad = fputs(text, f) < 0;
	return fclose(f) || bad ? -1 : 0;
}

/* The compiler's log from its first error on, as much as fits in out. */
static void log_excerpt(const char *path, char *out, size_t cap)
{
	char buf[4096];
	out[0] = 0;
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *s = strstr(buf, "error");
	if (s)
		while (s > buf && s[-1] != '\n')
			s--;
	else
		s = buf;
	size_t len = strlen(s);
	if (len < cap) {
		memcpy(out, s, len + 1);
	} else if (cap > 4) {
		memcpy(out, s, cap - 4);
		memcpy(out + cap - 4, "...", 4);
	}
}

int dev_emu_add_source(rt_dev *d, const char *name, const char *src, const char *cxx,
                       const char *workdir)
{
	/* The object's name carries the source's hash: dlopen returns an object
	 * already loaded from the same path, so a changed source under a name
	 * loaded before must be a new file. */
	emu *e = d->impl;
	uint64_t h = 0xcbf29ce484222325ull ^ e->row_define; /* FNV-1a, and OCTO_ROW */
	for (const char *p = src; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
	char cpp[PATH_MAX], so[PATH_MAX], log[PATH_MAX];
	if (snprintf(cpp, sizeof cpp, "%s/%s.cpp", workdir, name) >= (int)sizeof cpp ||
	    snprintf(so, sizeof so, "%s/%s-%016llx.so", workdir, name, (unsigned long long)h) >=
	        (int)sizeof so ||
	    snprintf(log, sizeof log, "%s/%s.log", workdir, name) >= (int)sizeof log)
		return dev_fail(d, RT_EARG, "emu module %s: path under '%s' too long", name, workdir);
	/* An object of this source built before (a directory of modules kept
	 * from an earlier run: dev_check --modules) is loaded as it is, so a
	 * machine without the compiler can run the modules it was given. */
	if (access(so, R_OK) == 0)
		goto load;
	char tmp[PATH_MAX + 32];
	snprintf(tmp, sizeof tmp, "%s.%ld.tmp", so, (long)getpid());
	if (mkdir(workdir, 0777) && errno != EEXIST)
		return dev_fail(d, RT_EIO, "emu module %s: cannot create '%s': %s", name, workdir,
		                strerror(errno));
	if (write_file(cpp, src))
		return dev_fail(d, RT_EIO, "emu module %s: cannot write '%s': %s", name, cpp,
		                strerror(errno));

	/* cxx -std=c++17 -O1 -fPIC -shared -o SO CPP [-DOCTO_ROW=N], its output
	 * into LOG. */
	char row[32];
	snprintf(row, sizeof row, "-DOCTO_ROW=%u", e->row_define);
	char *argv[] = {(char *)cxx, "-std=c++17", "-O1", "-fPIC", "-shared", "-o", tmp, cpp,
	                e->row_define ? row : NULL, NULL};
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0666);
	posix_spawn_file_actions_adddup2(&fa, 2, 1);
	pid_t pid;
	int err = posix_spawnp(&pid, cxx, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (err)
		return dev_fail(d, RT_EIO, "emu module %s: cannot run the C++ compiler '%s': %s", name,
		                cxx, strerror(err));
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return dev_fail(d, RT_EIO, "emu module %s: waiting for '%s': %s", name, cxx,
			                strerror(errno));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		char text[480];
		log_excerpt(log, text, sizeof text);
		return dev_fail(d, RT_EINVAL, "emu module %s: '%s' failed (%s %d; log %s):\n%s", name,
		                cxx, WIFEXITED(status) ? "exit" : "signal",
		                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), log, text);
	}
	/* Whole or not at all under its final name: a run killed while it
	 * compiled leaves no object that a later run would take as built. */
	if (rename(tmp, so))
		return dev_fail(d, RT_EIO, "emu module %s: cannot rename '%s': %s", name, tmp,
		                strerror(errno));
load:;
	void *dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
	if (!dl)
		return dev_fail(d, RT_EIO, "emu module %s: dlopen: %s", name, dlerror());
	const dev_emu_entry *table = dlsym(dl, DEV_EMU_TABLE);
	if (!table) {
		dlclose(dl);
		return dev_fail(d, RT_EINVAL, "emu module %s: no table '%s' in %s", name, DEV_EMU_TABLE,
		                so);
	}
	int rc = add_module(d, name, table, dl);
	if (rc)
		dlclose(dl);
	return rc;
}
