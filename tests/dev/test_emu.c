/* test_emu.c: Check suite for the host emulator of the device executor
 * (runtime/dev/dev_emu.c): barriers and block statics through the fiber
 * scheduler, "each" coverage, GEMMs against a naive loop in f32 and bf16,
 * the errors (divergent barrier, unknown kernel, compile failure), a
 * real module (cg_cuda_emu_source) against a direct computation, the
 * device optimizer's weight decay per tensor (tests/runtime/decay_step.h:
 * the flags of docs/layers.md, as on the host), the asynchronous copy
 * from page-locked memory and its check, and a step's token ids through
 * it, with no copy from pageable memory.
 *
 * The hand-written kernels are compiled once, in the unchecked fixture
 * (the parent process); each test runs forked, so a hang is a timeout. */
#include <check.h>
#include <dlfcn.h>
#include <ftw.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_emu_text.h" /* cg_cuda_emu: the shim (codegen/cuda_emu.h) */
#include "cuda_kernels.h"
#include "cuda_lib.h" /* cg_cuda_lib: the kernel templates (codegen/cuda_lib.cu) */
#include "dev.h"
#include "rt_internal.h" /* rt__dev_attach */
#include "../runtime/decay_step.h"

static char workdir[] = "/tmp/octo-test-emu-XXXXXX";

static const char KERNELS[] =
    /* A tree sum of each block's slice (blockDim.x a power of two). */
    "OCTO_KERNEL void reduce(const float *x, float *out)\n"
    "{\n"
    "	__shared__ float sh[1024];\n"
    "	unsigned t = threadIdx.x, n = blockDim.x;\n"
    "	sh[t] = x[blockIdx.x * n + t];\n"
    "	__syncthreads();\n"
    "	for (unsigned s = n / 2; s > 0; s >>= 1) {\n"
    "		if (t < s)\n"
    "			sh[t] += sh[t + s];\n"
    "		__syncthreads();\n"
    "	}\n"
    "	if (t == 0)\n"
    "		out[blockIdx.x] = sh[0];\n"
    "}\n"
    "OCTO_KERNEL void cover(int *hits, long n)\n"
    "{\n"
    "	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)\n"
    "		hits[i]++;\n"
    "}\n"
    "OCTO_KERNEL void half_waits(int *x)\n"
    "{\n"
    "	if (threadIdx.x < blockDim.x / 2)\n"
    "		__syncthreads();\n"
    "	x[threadIdx.x] = 1;\n"
    "}\n"
    "OCTO_KERNEL void first_returns(int *x)\n"
    "{\n"
    "	if (threadIdx.x > 0)\n"
    "		__syncthreads();\n"
    "	x[threadIdx.x] = 1;\n"
    "}\n"
    "extern \"C\" const octo_emu_entry octo_emu_table[] = {\n"
    "    {\"octo_emu_bind\", octo_emu_bind},\n"
    "    {\"reduce\", octo_emu_thunk<reduce>::call},\n"
    "    {\"cover\", octo_emu_thunk<cover>::call},\n"
    "    {\"half_waits\", octo_emu_thunk<half_waits>::call},\n"
    "    {\"first_returns\", octo_emu_thunk<first_returns>::call},\n"
    "    {nullptr, nullptr}};\n";

static rt_dev *dev; /* f32, the module "hand" */

static void setup(void)
{
	ck_assert_ptr_nonnull(mkdtemp(workdir));
	size_t n = strlen(cg_cuda_emu) + strlen(KERNELS) + 2;
	char *src = malloc(n);
	snprintf(src, n, "%s\n%s", cg_cuda_emu, KERNELS);
	ck_assert_int_eq(dev_emu_create(0, false, &dev), RT_OK);
	int rc = dev_emu_add_source(dev, "hand", src, OCTO_CXX, workdir);
	ck_assert_msg(rc == RT_OK, "%s", dev->err);
	free(src);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

static void teardown(void)
{
	dev->ops->destroy(dev);
	nftw(workdir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- kernels and the scheduler ---------------------------------------------------- */

START_TEST(test_tree_sum)
{
	/* Small integers: every partial sum is exact, whatever the order. */
	for (unsigned block = 1; block <= 1024; block *= 2) {
		const unsigned grid = 5;
		float *x = malloc(sizeof *x * grid * block), out[5];
		for (unsigned i = 0; i < grid * block; i++)
			x[i] = (float)((i * 7919u) % 13u) - 6.f;
		float *xp = x, *op = out;
		ck_assert_int_eq(dev->ops->launch(dev, 0, "reduce", grid, block, (void *[]){&xp, &op}),
		                 RT_OK);
		for (unsigned b = 0; b < grid; b++) {
			float want = 0;
			for (unsigned i = 0; i < block; i++)
				want += x[b * block + i];
			ck_assert_msg(out[b] == want, "block %u of %u threads: %g, want %g", b, block,
			              (double)out[b], (double)want);
		}
		free(x);
	}
}
END_TEST

START_TEST(test_each_covers)
{
	for (long n = 1; n <= 100003; n = n * 37 + 5) {
		int *hits = calloc((size_t)n, sizeof *hits);
		unsigned grid = dev_each_grid(dev, n);
		ck_assert_int_eq(dev->ops->launch(dev, 0, "cover", grid, dev->each_block,
		                                  (void *[]){&hits, &n}),
		                 RT_OK);
		for (long i = 0; i < n; i++)
			ck_assert_msg(hits[i] == 1, "n %ld: item %ld hit %d times", n, i, hits[i]);
		free(hits);
	}
}
END_TEST

START_TEST(test_diverge)
{
	int x[64];
	int *xp = x;
	int rc = dev->ops->launch(dev, 0, "half_waits", 3, 64, (void *[]){&xp});
	ck_assert_int_ne(rc, RT_OK);
	ck_assert_msg(strstr(dev->err, "diverge") && strstr(dev->err, "half_waits") &&
	                  strstr(dev->err, "hand"),
	              "%s", dev->err);
	rc = dev->ops->launch(dev, 0, "first_returns", 3, 64, (void *[]){&xp});
	ck_assert_int_ne(rc, RT_OK);
	ck_assert_msg(strstr(dev->err, "diverge") && strstr(dev->err, "first_returns"), "%s",
	              dev->err);
	/* The emulator still runs kernels after a failed launch. */
	float v[32], s;
	for (int i = 0; i < 32; i++)
		v[i] = (float)i;
	float *vp = v, *sp = &s;
	ck_assert_int_eq(dev->ops->launch(dev, 0, "reduce", 1, 32, (void *[]){&vp, &sp}), RT_OK);
	ck_assert(s == 496.f);
}
END_TEST

START_TEST(test_launch_errors)
{
	int *p = NULL;
	ck_assert_int_ne(dev->ops->launch(dev, 0, "nope", 1, 32, (void *[]){&p}), RT_OK);
	ck_assert_msg(strstr(dev->err, "nope") && strstr(dev->err, "hand"), "%s", dev->err);
	ck_assert_int_ne(dev->ops->launch(dev, 7, "cover", 1, 32, (void *[]){&p}), RT_OK);
	ck_assert_int_ne(dev->ops->launch(dev, 0, "cover", 1, 1025, (void *[]){&p}), RT_OK);
	ck_assert_msg(strstr(dev->err, "1025"), "%s", dev->err);
	/* A table without the bind entry first. */
	static const dev_emu_entry bad[] = {{"cover", NULL}, {NULL, NULL}};
	ck_assert_int_ne(dev_emu_add_table(dev, "bad", bad), RT_OK);
	ck_assert_msg(strstr(dev->err, "octo_emu_bind") && strstr(dev->err, "bad"), "%s", dev->err);
}
END_TEST

START_TEST(test_compile_error)
{
	rt_dev *d;
	ck_assert_int_eq(dev_emu_create(0, false, &d), RT_OK);
	int rc = dev_emu_add_source(d, "broken", "int f() { return no_such_name_here; }\n",
	                            OCTO_CXX, workdir);
	ck_assert_int_ne(rc, RT_OK);
	ck_assert_msg(strstr(d->err, "broken") && strstr(d->err, "no_such_name_here"), "%s", d->err);
	/* Compiles, but is not a module. */
	rc = dev_emu_add_source(d, "tableless", "int f() { return 1; }\n", OCTO_CXX, workdir);
	ck_assert_int_ne(rc, RT_OK);
	ck_assert_msg(strstr(d->err, DEV_EMU_TABLE), "%s", d->err);
	rc = dev_emu_add_source(d, "x", "", "/nonexistent/c++", workdir);
	ck_assert_int_ne(rc, RT_OK);
	ck_assert_msg(strstr(d->err, "/nonexistent/c++"), "%s", d->err);
	d->ops->destroy(d);
}
END_TEST

/* ---- GEMM ---------------------------------------------------------------------------- */

/* C = alpha op(A) op(B) + beta C in double, row-major. */
static void naive(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                  const float *b, int ldb, float beta, float *c, int ldc)
{
	for (int i = 0; i < m; i++)
		for (int j = 0; j < n; j++) {
			double s = 0;
			for (int p = 0; p < k; p++)
				s += (double)(ta ? a[p * lda + i] : a[i * lda + p]) *
				     (double)(tb ? b[j * ldb + p] : b[p * ldb + j]);
			c[i * ldc + j] = (float)(alpha * s + (beta == 0 ? 0 : beta * c[i * ldc + j]));
		}
}

/* Multiples of 1/8 in [-2, 2): products and their short sums are exact in
 * f32, so BLAS and the naive loop agree to the bit before any rounding. */
static float val(int i)
{
	return (float)((i * 37 + 11) % 32 - 16) / 8.f;
}

START_TEST(test_gemm_f32)
{
	const int m = 5, n = 7, k = 3, ld = 11; /* every leading dimension wider than its rows */
	float a0[16 * 11] = {0}, c0[16 * 11];
	for (int t = 0; t < 4; t++) {
		bool ta = t & 1, tb = t & 2;
		float a[16 * 11], b[16 * 11], c[16 * 11], want[16 * 11];
		for (int i = 0; i < 16 * 11; i++)
			a[i] = val(i), b[i] = val(3 * i + 1), c[i] = want[i] = val(5 * i + 2);
		naive(ta, tb, m, n, k, 0.5f, a, ld, b, ld, 2.f, want, ld);
		ck_assert_int_eq(dev->ops->gemm(dev, ta, tb, m, n, k, 0.5f, a, ld, b, ld, 2.f, c, ld, false),
		                 RT_OK);
		for (int i = 0; i < 16 * 11; i++)
			ck_assert_msg(c[i] == want[i], "ta %d tb %d: c[%d] %g, want %g", ta, tb, i,
			              (double)c[i], (double)want[i]);
		/* beta 0: C is not read (NaN there stays out of the result). */
		for (int i = 0; i < 16 * 11; i++)
			c[i] = NAN, want[i] = NAN;
		naive(ta, tb, m, n, k, 1.f, a, ld, b, ld, 0.f, want, ld);
		ck_assert_int_eq(dev->ops->gemm(dev, ta, tb, m, n, k, 1.f, a, ld, b, ld, 0.f, c, ld, true),
		                 RT_OK);
		for (int i = 0; i < m; i++)
			for (int j = 0; j < n; j++)
				ck_assert(c[i * ld + j] == want[i * ld + j]);
		ck_assert(isnan(c[n])); /* outside the n columns: untouched */
	}
	/* Leading dimensions narrower than the rows: an error, not BLAS's complaint. */
	ck_assert_int_ne(dev->ops->gemm(dev, false, false, m, n, k, 1.f, a0, 2, a0, ld, 0.f, c0, ld, false),
	                 RT_OK);
	ck_assert_msg(strstr(dev->err, "lda 2"), "%s", dev->err);
	/* k == 0: C = beta C. */
	float c[4] = {1, 2, 3, 4}, z = 0;
	ck_assert_int_eq(dev->ops->gemm(dev, false, false, 2, 2, 0, 1.f, &z, 1, &z, 2, 3.f, c, 2, false),
	                 RT_OK);
	ck_assert(c[0] == 3 && c[1] == 6 && c[2] == 9 && c[3] == 12);
}
END_TEST

START_TEST(test_gemm_bf16)
{
	rt_dev *d;
	ck_assert_int_eq(dev_emu_create(0, true, &d), RT_OK);
	const int m = 6, n = 5, k = 9, ld = 13;
	for (int t = 0; t < 4; t++) {
		bool ta = t & 1, tb = t & 2;
		uint16_t a[16 * 13], b[16 * 13], c[16 * 13];
		float af[16 * 13], bfl[16 * 13], want[16 * 13], cf[16 * 13];
		for (int i = 0; i < 16 * 13; i++) {
			a[i] = dev_to_bf16(val(i)), b[i] = dev_to_bf16(val(7 * i + 3));
			c[i] = dev_to_bf16(val(2 * i) * 1.001f);
			af[i] = dev_from_bf16(a[i]), bfl[i] = dev_from_bf16(b[i]);
			want[i] = dev_from_bf16(c[i]), cf[i] = want[i];
		}
		/* alpha 1/3: the f32 result needs rounding to bf16. */
		naive(ta, tb, m, n, k, 1.f / 3, af, ld, bfl, ld, 0.75f, want, ld);
		ck_assert_int_eq(d->ops->gemm(d, ta, tb, m, n, k, 1.f / 3, a, ld, b, ld, 0.75f, c, ld, false),
		                 RT_OK);
		for (int i = 0; i < 16 * 13; i++) {
			uint16_t w = dev_to_bf16(want[i]);
			/* BLAS's f32 may differ from the double-rounded loop by an ulp,
			 * which can move the bf16 rounding by one. */
			ck_assert_msg(abs((int)c[i] - (int)w) <= 1, "ta %d tb %d: c[%d] %#x, want %#x", ta, tb,
			              i, c[i], w);
		}
		/* c_f32: C is f32, beta 1 accumulates (the weight gradients). */
		float cw[16 * 13];
		memcpy(cw, cf, sizeof cw);
		naive(ta, tb, m, n, k, 1.f, af, ld, bfl, ld, 1.f, cw, ld);
		ck_assert_int_eq(d->ops->gemm(d, ta, tb, m, n, k, 1.f, a, ld, b, ld, 1.f, cf, ld, true),
		                 RT_OK);
		for (int i = 0; i < 16 * 13; i++)
			ck_assert_msg(cf[i] == cw[i], "c_f32 ta %d tb %d: c[%d] %g, want %g", ta, tb, i,
			              (double)cf[i], (double)cw[i]);
	}
	/* A NaN operand gives bf16's quiet NaN; ties round to even. */
	uint16_t a1[1] = {0x7fa0} /* signalling NaN */, b1[1] = {dev_to_bf16(1.f)}, c1[1];
	ck_assert_int_eq(d->ops->gemm(d, false, false, 1, 1, 1, 1.f, a1, 1, b1, 1, 0.f, c1, 1, false),
	                 RT_OK);
	ck_assert_msg((c1[0] & 0x7fc0) == 0x7fc0, "%#x", c1[0]);
	uint16_t a2[2] = {dev_to_bf16(1.f), dev_to_bf16(1.f)};
	uint16_t b2[2] = {dev_to_bf16(1.f), dev_to_bf16(1.f / 256)}, c2[1];
	ck_assert_int_eq(d->ops->gemm(d, false, false, 1, 1, 2, 1.f, a2, 2, b2, 1, 0.f, c2, 1, false),
	                 RT_OK);
	ck_assert_msg(c2[0] == dev_to_bf16(1.f), "1 + 2^-8 rounds to 1 (even): %#x", c2[0]); /* a tie */
	d->ops->destroy(d);
}
END_TEST

/* gemm_sb: each product of the batch at its strides, as gemm would make it
 * (f32; bf16 storage with an f32 C; f32 operands on a bf16 device), f32
 * operands into bf16 refused; dev_bmm over two indices, either one the
 * larger. */
START_TEST(test_gemm_sb)
{
	const int m = 3, n = 4, k = 5, ld = 6, sa = 20, sb = 31, sc = 19, nb = 3;
	float a[nb * 31], b[nb * 31], c[nb * 31], want[nb * 31];
	uint16_t ah[nb * 31], bh[nb * 31];
	for (int dv = 0; dv < 3; dv++) { /* f32 device; bf16 device, bf16 and f32 operands */
		rt_dev *d;
		ck_assert_int_eq(dev_emu_create(0, dv > 0, &d), RT_OK);
		bool ab_f32 = dv == 2;
		for (int i = 0; i < nb * 31; i++) {
			a[i] = val(i), b[i] = val(3 * i + 1), c[i] = want[i] = val(5 * i + 2);
			ah[i] = dev_to_bf16(a[i]), bh[i] = dev_to_bf16(b[i]);
		}
		for (int e = 0; e < nb; e++)
			naive(e & 1, true, m, n, k, 0.5f, a + e * sa, ld, b + e * sb, ld, 2.f, want + e * sc,
			      ld);
		/* ta alternating is not one call: two calls, entries 0, 2 and entry 1 */
		for (int ta = 0; ta < 2; ta++) {
			const void *pa = dv == 1 ? (const void *)(ah + ta * sa) : (const void *)(a + ta * sa);
			const void *pb = dv == 1 ? (const void *)(bh + ta * sb) : (const void *)(b + ta * sb);
			ck_assert_int_eq(d->ops->gemm_sb(d, ta, true, m, n, k, 0.5f, pa, ld, 2 * sa, pb, ld,
			                                 2 * sb, 2.f, c + ta * sc, ld, 2 * sc, ta ? 1 : 2,
			                                 ab_f32, true),
			                 RT_OK);
		}
		for (int i = 0; i < nb * 31; i++)
			ck_assert_msg(c[i] == want[i], "device %d: c[%d] %g, want %g", dv, i, (double)c[i],
			              (double)want[i]);
		if (dv == 2) {
			ck_assert_int_ne(d->ops->gemm_sb(d, false, false, m, n, k, 1.f, a, ld, sa, b, ld, sb,
			                                 0.f, c, ld, sc, nb, true, false),
			                 RT_OK);
			ck_assert_msg(strstr(d->err, "f32 result"), "%s", d->err);
		}
		/* dev_bmm: product (i, j) at i*(sa) + j*(7), etc.; i < 2, j < 3 and i < 3, j < 2 */
		for (int sw = 0; sw < 2 && dv != 1; sw++) {
			int n1 = sw ? 3 : 2, n2 = sw ? 2 : 3;
			float cc[6 * 31];
			for (int i = 0; i < 6 * 31; i++)
				cc[i] = NAN;
			for (int i = 0; i < n1; i++)
				for (int j = 0; j < n2; j++)
					naive(false, false, 2, 2, 2, 1.f, a + i * 9 + j * 2, ld, b + i * 5 + j * 3, ld,
					      0.f, want + (i * n2 + j) * 4, 2);
			ck_assert_int_eq(dev_bmm(d, false, false, 2, 2, 2, a, ld, b, ld, 0.f, cc, 2,
			                         (dev_bdim){n1, 9, 5, n2 * 4}, (dev_bdim){n2, 2, 3, 4}),
			                 RT_OK);
			for (int i = 0; i < n1 * n2 * 4; i++)
				ck_assert_msg(cc[i] == want[i], "dev_bmm %d: c[%d] %g, want %g", sw, i,
				              (double)cc[i], (double)want[i]);
		}
		d->ops->destroy(d);
	}
}
END_TEST

/* ---- a real module -------------------------------------------------------------------- */

/* ---- the warp tile products (cuda_lib.cu's mma_*) --------------------------------- */

/* C [32][48] (+)= op(A) op(B) over k < 48, each layout, by two warps taking
 * the six 16x16 blocks in turn; the leading dimensions are wider than the
 * blocks' rows. */
static const char MMA_KERNELS[] =
    "enum { LDA = 64, LDB = 64, LDC = 48 };\n"
    "template <bool AC, bool BC> __device__ void mm(const real *A, const real *B, float *C, int acc)\n"
    "{\n"
    "	for (int t = threadIdx.x / 32; t < 6; t += blockDim.x / 32) {\n"
    "		int ti = t / 3, tj = t % 3;\n"
    "		mma_acc c;\n"
    "		if (acc)\n"
    "			mma_load_c(c, C + ti * 16 * LDC + tj * 16, LDC);\n"
    "		else\n"
    "			mma_zero(c);\n"
    "		for (int k = 0; k < 48; k += 16) {\n"
    "			mma_a a;\n"
    "			mma_b b;\n"
    "			mma_load_a<AC>(a, AC ? A + k * LDA + ti * 16 : A + ti * 16 * LDA + k, LDA);\n"
    "			mma_load_b<BC>(b, BC ? B + tj * 16 * LDB + k : B + k * LDB + tj * 16, LDB);\n"
    "			mma_run<AC, BC>(c, a, b);\n"
    "		}\n"
    "		mma_store(C + ti * 16 * LDC + tj * 16, c, LDC);\n"
    "	}\n"
    "}\n"
    "OCTO_KERNEL void mm_rr(const real *A, const real *B, float *C, int acc) { mm<false, false>(A, B, C, acc); }\n"
    "OCTO_KERNEL void mm_rc(const real *A, const real *B, float *C, int acc) { mm<false, true>(A, B, C, acc); }\n"
    "OCTO_KERNEL void mm_cr(const real *A, const real *B, float *C, int acc) { mm<true, false>(A, B, C, acc); }\n"
    "OCTO_KERNEL void mm_cc(const real *A, const real *B, float *C, int acc) { mm<true, true>(A, B, C, acc); }\n"
    "extern \"C\" const octo_emu_entry octo_emu_table[] = {\n"
    "    {\"octo_emu_bind\", octo_emu_bind},\n"
    "    {\"mm_rr\", octo_emu_thunk<mm_rr>::call},\n"
    "    {\"mm_rc\", octo_emu_thunk<mm_rc>::call},\n"
    "    {\"mm_cr\", octo_emu_thunk<mm_cr>::call},\n"
    "    {\"mm_cc\", octo_emu_thunk<mm_cc>::call},\n"
    "    {nullptr, nullptr}};\n";

/* Multiples of 1/8 in [-2, 2): exact in bf16, and every product and sum of
 * 48 of them exact in f32, whatever the order. */
START_TEST(test_mma)
{
	rt_dev *d;
	ck_assert_int_eq(dev_emu_create(0, false, &d), RT_OK);
	for (int bf = 0; bf < 2; bf++) {
		size_t n = strlen(cg_cuda_emu) + strlen(cg_cuda_lib) + strlen(MMA_KERNELS) + 64;
		char *src = malloc(n), name[16];
		snprintf(src, n, "%s\n#define OCTO_BF16 %d\n%s\n%s", cg_cuda_emu, bf, cg_cuda_lib,
		         MMA_KERNELS);
		snprintf(name, sizeof name, "mma%d", bf);
		int rc = dev_emu_add_source(d, name, src, OCTO_CXX, workdir);
		ck_assert_msg(rc == RT_OK, "%s", d->err);
		free(src);
	}
	enum { LDA = 64, LDB = 64, LDC = 48, NA = 48 * 64 };
	static float a[NA], b[NA], c[32 * LDC], want[32 * LDC];
	static uint16_t a16[NA], b16[NA];
	for (int i = 0; i < NA; i++) {
		a[i] = val(i), b[i] = val(7 * i + 3);
		uint32_t u;
		memcpy(&u, &a[i], 4);
		a16[i] = (uint16_t)(u >> 16);
		memcpy(&u, &b[i], 4);
		b16[i] = (uint16_t)(u >> 16);
	}
	const char *fn[4] = {"mm_rr", "mm_rc", "mm_cr", "mm_cc"};
	for (int bf = 0; bf < 2; bf++)
		for (int l = 0; l < 4; l++)
			for (int acc = 0; acc < 2; acc++) {
				bool ac = l & 2, bc = l & 1;
				for (int i = 0; i < 32 * LDC; i++)
					c[i] = val(11 * i + 5), want[i] = acc ? c[i] : 0.f;
				naive(ac, bc, 32, 48, 48, 1.f, a, LDA, b, LDB, 1.f, want, LDC);
				void *pa = bf ? (void *)a16 : (void *)a, *pb = bf ? (void *)b16 : (void *)b;
				float *pc = c;
				ck_assert_int_eq(d->ops->launch(d, bf, fn[l], 1, 64, (void *[]){&pa, &pb, &pc, &acc}),
				                 RT_OK);
				for (int i = 0; i < 32 * LDC; i++)
					ck_assert_msg(c[i] == want[i], "bf16 %d %s acc %d: c[%d] %g, want %g", bf,
					              fn[l], acc, i, (double)c[i], (double)want[i]);
			}
	d->ops->destroy(d);
}
END_TEST

/* An f32 emulated device with the module of one layer (its first, 0),
 * whose source (in a) is *src. */
static rt_dev *layer_dev(const rt_layer_desc *desc, arena *a, char **src)
{
	*src = cg_cuda_emu_source(desc, false, DEV_EMU_TABLE, a);
	ck_assert_ptr_nonnull(*src);
	rt_dev *d;
	ck_assert_int_eq(dev_emu_create(0, false, &d), RT_OK);
	int rc = dev_emu_add_source(d, cg_cuda_module_name(desc, *src, a), *src, OCTO_CXX, workdir);
	ck_assert_msg(rc == RT_OK, "%s", d->err);
	return d;
}

/* The MoE routing (moe_F_route, a warp per token) against one thread's
 * loop, p, sel and w bit for bit, on logits with many ties (multiples of
 * 1/4: ties go to the lower expert); and the layout (moe_F_layout, a
 * counting sort in one block) against the serial one: expert e's rows
 * off[e]..off[e+1], its pairs (t, k) in ascending order, bit for bit.
 * T K = 2000 pairs over 64 experts (fewer chunks than threads, the last
 * one short; 250 tokens, the last block's warps partly past them), some
 * experts without any. */
START_TEST(test_moe_route_layout)
{
	const rt_layer_desc desc = {.kind = RT_MOE, .hidden = 16, .seq = 50, .mbs = 5, .experts = 64,
	                            .top_k = 8, .expert_ffn = 16};
	enum { T = 250, K = 8, E = 64, N = T * K };
	ck_assert_int_eq(rt_layer_check(&desc), RT_OK);
	arena *a = arena_new();
	char *src;
	rt_dev *d = layer_dev(&desc, a, &src);
	int rc;
	static int32_t sel[N], off[E + 1], slot[N], rowtok[N], woff[E + 1], wslot[N], wrow[N];
	static float lg[T * E], p[T * E], w[N], wp[T * E], ww[N];
	static int32_t wsel[N];
	uint32_t x = 12345;
	for (int i = 0; i < T * E; i++) {
		x = x * 1103515245u + 12345u;
		lg[i] = (float)((int)((x >> 16) % 13) - 6) / 4;
	}
	for (int t = 0; t < T; t++) {
		const float *l = lg + t * E;
		float m = -INFINITY, sum = 0.f, tot = 0.f;
		for (int e = 0; e < E; e++)
			m = fmaxf(m, l[e]);
		for (int e = 0; e < E; e++)
			sum += expf(l[e] - m);
		for (int e = 0; e < E; e++)
			wp[t * E + e] = expf(l[e] - m) / sum;
		for (int k = 0; k < K; k++) {
			int best = -1;
			for (int e = 0; e < E; e++) {
				bool taken = false;
				for (int kk = 0; kk < k; kk++)
					taken |= wsel[t * K + kk] == e;
				if (!taken && (best < 0 || wp[t * E + e] > wp[t * E + best]))
					best = e;
			}
			wsel[t * K + k] = best;
			tot += wp[t * E + best];
		}
		for (int k = 0; k < K; k++)
			ww[t * K + k] = wp[t * E + wsel[t * K + k]] / tot;
	}
	float *pl0 = lg, *pp = p, *pw = w;
	int32_t *psel = sel;
	rc = d->ops->launch(d, 0, "moe_F_route", (T + 7) / 8, 256, (void *[]){&pl0, &pp, &pw, &psel});
	ck_assert_msg(rc == RT_OK, "%s", d->err);
	ck_assert_int_eq(memcmp(p, wp, sizeof p), 0);
	ck_assert_int_eq(memcmp(sel, wsel, sizeof sel), 0);
	ck_assert_int_eq(memcmp(w, ww, sizeof w), 0);

	for (int i = 0; i < N; i++) {
		x = x * 1103515245u + 12345u;
		int e = (int)((x >> 16) % 61); /* experts 61..63 empty */
		sel[i] = e < 30 ? e / 3 : e;   /* and 0..9 crowded */
	}
	memset(woff, 0, sizeof woff);
	for (int i = 0; i < N; i++)
		woff[sel[i] + 1]++;
	for (int e = 0; e < E; e++)
		woff[e + 1] += woff[e];
	int next[E];
	memcpy(next, woff, sizeof next);
	for (int i = 0; i < N; i++) {
		wslot[i] = next[sel[i]]++;
		wrow[wslot[i]] = i / K;
	}
	int32_t *ps = sel, *po = off, *pl = slot, *pr = rowtok;
	rc = d->ops->launch(d, 0, "moe_F_layout", 1, 256, (void *[]){&ps, &po, &pl, &pr});
	ck_assert_msg(rc == RT_OK, "%s", d->err);
	ck_assert_int_eq(memcmp(off, woff, sizeof off), 0);
	ck_assert_int_eq(memcmp(slot, wslot, sizeof slot), 0);
	ck_assert_int_eq(memcmp(rowtok, wrow, sizeof rowtok), 0);
	d->ops->destroy(d);
	arena_free(a);
}
END_TEST

START_TEST(test_mlp_module)
{
	const rt_layer_desc desc = {.kind = RT_MLP, .hidden = 64, .seq = 8, .mbs = 2, .ffn = 128,
	                            .act = RT_SWIGLU};
	enum { H = 64, ROWS = 128 }; /* the timing below runs 128 rows */
	arena *a = arena_new();
	char *src;
	rt_dev *d = layer_dev(&desc, a, &src);

	float *x = malloc(sizeof(float) * ROWS * H), *u = malloc(sizeof(float) * ROWS * H),
	      *xhat = malloc(sizeof(float) * ROWS * H), g[H], r[ROWS];
	for (int i = 0; i < ROWS * H; i++)
		x[i] = sinf(0.37f * (float)i) * (1 + (float)(i % 5));
	for (int j = 0; j < H; j++)
		g[j] = 0.5f + 0.01f * (float)j;
	float *gp = g, *rp = r;
	void *args[] = {&x, &gp, &u, &xhat, &rp};
	const int T = 16;
	ck_assert_int_eq(d->ops->launch(d, 0, "mlp_F_norm", T, d->row, args), RT_OK);
	for (int t = 0; t < T; t++) {
		double s = 0;
		for (int j = 0; j < H; j++)
			s += (double)x[t * H + j] * x[t * H + j];
		double rr = 1 / sqrt(s / H + 1e-5);
		ck_assert_msg(fabs(r[t] - rr) <= 1e-6 * rr, "r[%d] %g, want %g", t, (double)r[t], rr);
		for (int j = 0; j < H; j++) {
			double xh = x[t * H + j] * rr, want = xh * g[j];
			ck_assert_msg(fabs(xhat[t * H + j] - xh) <= 1e-6 * fabs(xh) + 1e-30, "xhat");
			ck_assert_msg(fabs(u[t * H + j] - want) <= 1e-6 * fabs(want) + 1e-30,
			              "u[%d][%d] %g, want %g", t, j, (double)u[t * H + j], want);
		}
	}
	/* The table has a row per entry point of the module, these among them. */
	static const char *const names[] = {"mlp_F_norm", "mlp_B_norm", "mlp_W_scale", "mlp_W_norm",
	                                    "mlp_F_act", "mlp_B_act"};
	int rows = 0, entries = 0;
	for (const char *p = src; (p = strstr(p, "::call},")); p++)
		rows++;
	for (const char *p = src; (p = strstr(p, "\nOCTO_KERNEL void ")); p++)
		entries++;
	ck_assert_int_ge(entries, 6);
	ck_assert_int_eq(rows, entries);
	for (int i = 0; i < 6; i++) {
		char row[96];
		snprintf(row, sizeof row, "{\"%s\", octo_emu_thunk<%s>::call},", names[i], names[i]);
		ck_assert_msg(strstr(src, row), "%s", row);
	}
	ck_assert_int_ne(d->ops->launch(d, 0, "moe_F_route", 1, 32, args), RT_OK);

	/* Times (printed, not checked; the best of 10): a row kernel, 128 blocks
	 * of 32 threads through 7 barriers (block_sum); an "each" kernel over 1e5
	 * items. */
	long n = 100000;
	int *hits = calloc((size_t)n, sizeof *hits);
	double row_ms = INFINITY, each_ms = INFINITY;
	for (int i = 0; i < 10; i++) {
		double t0 = now();
		ck_assert_int_eq(d->ops->launch(d, 0, "mlp_F_norm", ROWS, d->row, args), RT_OK);
		double t1 = now();
		ck_assert_int_eq(dev->ops->launch(dev, 0, "cover", dev_each_grid(dev, n), dev->each_block,
		                                  (void *[]){&hits, &n}),
		                 RT_OK);
		row_ms = fmin(row_ms, (t1 - t0) * 1e3);
		each_ms = fmin(each_ms, (now() - t1) * 1e3);
	}
	printf("emu: row kernel (mlp_F_norm, %d x %u threads): %.2f ms per launch; "
	       "each kernel (%ld items, %u x %u threads): %.3f ms per launch\n",
	       ROWS, d->row, row_ms, n, dev_each_grid(dev, n), dev->each_block, each_ms);
	free(hits);
	free(x);
	free(u);
	free(xhat);
	d->ops->destroy(d);
	arena_free(a);
}
END_TEST

/* The table of a module with conditional entries: MLA without a q latent
 * (OCTO_RQ 0) has no q norm; Mamba-1 has the gate, not the gated norm. */
/* W's column sums in two stages (mlp_W_norm's partials of each chunk of
 * COLCH rows, then col_sum): the same bits for any grid, within 1e-5 of the
 * sum in double, added to what the gradient held. */
START_TEST(test_col_sums)
{
	const rt_layer_desc desc = {.kind = RT_MLP, .hidden = 48, .seq = 101, .mbs = 2, .ffn = 64,
	                            .act = RT_SWIGLU};
	enum { H = 48, T = 202 };
	const long nch = (T + RT_COL_CHUNK - 1) / RT_COL_CHUNK, lw = H;
	arena *a = arena_new();
	char *src;
	rt_dev *d = layer_dev(&desc, a, &src);
	float *du = malloc(sizeof(float) * T * H), *xh = malloc(sizeof(float) * T * H);
	float *part = malloc(sizeof(float) * (size_t)nch * H), dg[3][H];
	for (int i = 0; i < T * H; i++) {
		du[i] = sinf(0.37f * (float)i) * (1 + (float)(i % 7));
		xh[i] = cosf(0.11f * (float)i) - 0.25f;
	}
	const unsigned grids[3] = {1, 5, 400};
	for (int k = 0; k < 3; k++) {
		for (int j = 0; j < H; j++)
			dg[k][j] = 0.5f;
		float *g = dg[k];
		ck_assert_int_eq(d->ops->launch(d, 0, "mlp_W_norm", grids[k], 32,
		                                (void *[]){&du, &xh, &part}), RT_OK);
		ck_assert_int_eq(d->ops->launch(d, 0, "col_sum", grids[k], 32,
		                                (void *[]){&part, &g, (void *)&nch, (void *)&lw}), RT_OK);
	}
	for (int j = 0; j < H; j++) {
		double want = 0.5, mag = 0.5;
		for (int t = 0; t < T; t++) {
			want += (double)du[t * H + j] * xh[t * H + j];
			mag += fabs((double)du[t * H + j] * xh[t * H + j]);
		}
		ck_assert_msg(fabs(dg[0][j] - want) <= 1e-5 * mag, "dg[%d] %g, want %g", j,
		              (double)dg[0][j], want);
		for (int k = 1; k < 3; k++)
			ck_assert_msg(memcmp(&dg[k][j], &dg[0][j], sizeof(float)) == 0,
			              "dg[%d] with %u blocks %a, with 1 %a", j, grids[k], (double)dg[k][j],
			              (double)dg[0][j]);
	}
	free(du), free(xh), free(part);
	d->ops->destroy(d);
	arena_free(a);
}
END_TEST

START_TEST(test_conditional_entries)
{
	const rt_layer_desc mla = {.kind = RT_ATTENTION, .hidden = 64, .seq = 8, .mbs = 1, .heads = 4,
	                           .head_dim = 16, .kv_lora_rank = 32, .qk_rope_dim = 8};
	const rt_layer_desc m1 = {.kind = RT_MAMBA, .hidden = 32, .seq = 8, .mbs = 1, .version = 1,
	                          .state = 4};
	ck_assert_int_eq(rt_layer_check(&mla), RT_OK);
	ck_assert_int_eq(rt_layer_check(&m1), RT_OK);
	const rt_layer_desc *descs[] = {&mla, &m1};
	const char *absent[] = {"attention_F_qnorm", "mamba_F_gnorm"};
	const char *present[] = {"attention_F_kvnorm", "mamba_F_gate"};
	arena *a = arena_new();
	for (int i = 0; i < 2; i++) {
		char *src = cg_cuda_emu_source(descs[i], true, DEV_EMU_TABLE, a);
		ck_assert_ptr_nonnull(src);
		rt_dev *d;
		ck_assert_int_eq(dev_emu_create(0, true, &d), RT_OK);
		int rc = dev_emu_add_source(d, cg_cuda_module_name(descs[i], src, a), src, OCTO_CXX,
		                            workdir);
		ck_assert_msg(rc == RT_OK, "%s", d->err);
		void *p = NULL;
		void *args[16] = {&p, &p, &p, &p, &p, &p, &p, &p, &p, &p, &p, &p, &p, &p, &p, &p};
		ck_assert_int_ne(d->ops->launch(d, 0, absent[i], 1, 32, args), RT_OK);
		ck_assert_msg(strstr(d->err, "no kernel"), "%s", d->err);
		/* Present: found (grid 0 runs nothing). */
		ck_assert_int_eq(d->ops->launch(d, 0, present[i], 0, 32, args), RT_OK);
		d->ops->destroy(d);
	}
	arena_free(a);
}
END_TEST

/* ---- weight decay on the device --------------------------------------------------- */

/* The layers' modules, compiled once per process (dev_emu_add_source) and
 * loaded again for every later device from the shared object it left. */
static const dev_emu_entry *decay_tables[DK_LAYERS];
static const char *decay_names[DK_LAYERS];
static int32_t decay_mod[DK_LAYERS];

/* A device with decay_layers' modules. */
static rt_dev *emu_device(const rt_layer_spec *L)
{
	static arena *a;
	rt_dev *d;
	ck_assert_int_eq(dev_emu_create(0, false, &d), RT_OK);
	for (int h = 0; h < DK_LAYERS; h++) {
		decay_mod[h] = h;
		if (decay_tables[h]) {
			ck_assert_int_eq(dev_emu_add_table(d, decay_names[h], decay_tables[h]), RT_OK);
			continue;
		}
		if (!a)
			a = arena_new();
		char *src = cg_cuda_emu_source(&L[h].desc, false, DEV_EMU_TABLE, a);
		ck_assert_ptr_nonnull(src);
		decay_names[h] = cg_cuda_module_name(&L[h].desc, src, a);
		int rc = dev_emu_add_source(d, decay_names[h], src, OCTO_CXX, workdir);
		ck_assert_msg(rc == RT_OK, "%s", d->err);
		char pat[4200];
		glob_t g;
		snprintf(pat, sizeof pat, "%s/%s-*.so", workdir, decay_names[h]);
		ck_assert_int_eq(glob(pat, 0, NULL, &g), 0);
		ck_assert_int_eq((int)g.gl_pathc, 1);
		void *dl = dlopen(g.gl_pathv[0], RTLD_NOW | RTLD_LOCAL); /* the loaded one, kept */
		globfree(&g);
		ck_assert_ptr_nonnull(dl);
		ck_assert_ptr_nonnull(decay_tables[h] = dlsym(dl, DEV_EMU_TABLE));
	}
	return d;
}

static void emu_attach(rt_ctx *c, const rt_layer_spec *L)
{
	ck_assert_int_eq(rt__dev_attach(c, emu_device(L), decay_mod, NULL, false), RT_OK);
}

/* The buffers in the device's block, at its layers' sizes. */
static void emu_buffers(rt_ctx *c, const rt_layer_spec *L, decay_bufs *b)
{
	rt_sizes sz[DK_LAYERS];
	size_t at = 0, off[2 * DK_LAYERS + 2];
	size_t want[2 * DK_LAYERS + 2] = {8 * 8 * sizeof(float), 8 * 8 * sizeof(float)};
	for (int h = 0; h < DK_LAYERS; h++) {
		ck_assert_int_eq(dev_layer_sizes(&L[h].desc, false, &sz[h]), RT_OK);
		want[2 + 2 * h] = (size_t)sz[h].act, want[3 + 2 * h] = (size_t)sz[h].wstash;
	}
	for (int i = 0; i < 2 * DK_LAYERS + 2; i++) {
		off[i] = at;
		at += (want[i] + RT_ALIGN - 1) / RT_ALIGN * RT_ALIGN;
	}
	char *base;
	ck_assert_msg(rt_device_buffers(c, at, (void **)&base) == RT_OK, "%s", rt_errmsg(c));
	b->x = (float *)(base + off[0]), b->g = (float *)(base + off[1]);
	for (int h = 0; h < DK_LAYERS; h++)
		b->act[h] = base + off[2 + 2 * h], b->ws[h] = base + off[3 + 2 * h];
}

/* The device's optimizer (the device executor's optimize, rt_device.c) decays exactly the tensors
 * docs/layers.md marks, as the host's does: Mamba-1's A_log not at all.
 * _i: 0 AdamW, 1 SGD (a process each: MPI starts once per process). */
START_TEST(test_decay_device)
{
	static const decay_target emu = {emu_attach, emu_buffers};
	decay_check(&emu, _i ? RT_SGD : RT_ADAMW);
}
END_TEST

/* ---- the token ids' copy ------------------------------------------------------------ */

/* put_async copies at once, and the next wait (sync, or a copy to the
 * host) says so when its source was written before it: on a GPU the copy
 * could still be reading it. */
START_TEST(test_put_async)
{
	int32_t *h, *dv, back[64];
	ck_assert_int_eq(dev->ops->host_alloc(dev, sizeof back, (void **)&h), RT_OK);
	ck_assert_int_eq(dev->ops->alloc(dev, sizeof back, (void **)&dv), RT_OK);
	for (int i = 0; i < 64; i++)
		h[i] = i;
	ck_assert_int_eq(dev->ops->put_async(dev, dv, h, sizeof back), RT_OK);
	ck_assert_int_eq(dev->ops->sync(dev), RT_OK);
	ck_assert_int_eq(dev->ops->copy(dev, back, dv, sizeof back, DEV_D2H), RT_OK);
	ck_assert_int_eq(memcmp(back, h, sizeof back), 0);
	/* written again after the wait: fine; before the next: refused */
	h[5] = -5;
	ck_assert_int_eq(dev->ops->put_async(dev, dv, h, sizeof back), RT_OK);
	h[7] = -7;
	ck_assert_int_eq(dev->ops->sync(dev), RT_EDEVICE);
	ck_assert_ptr_nonnull(strstr(dev->err, "written before the device was waited for"));
	ck_assert_int_eq(dev->ops->put_async(dev, dv, h, sizeof back), RT_OK);
	h[9] = -9;
	ck_assert_int_eq(dev->ops->copy(dev, back, dv, sizeof back, DEV_D2H), RT_EDEVICE);
	ck_assert_int_eq(dev->ops->sync(dev), RT_OK); /* settled */
	dev->ops->free(dev, dv);
	dev->ops->host_free(dev, h);
}
END_TEST

/* The device's copies during a step, counted under the emulator's. */
static const dev_ops *ids_inner;
static dev_ops ids_ops;
static bool ids_counting;
static int ids_h2d, ids_d2h, ids_sync, ids_async;

static int ids_copy(rt_dev *d, void *dst, const void *src, size_t bytes, dev_dir dir)
{
	ids_h2d += ids_counting && dir == DEV_H2D;
	ids_d2h += ids_counting && dir == DEV_D2H;
	return ids_inner->copy(d, dst, src, bytes, dir);
}

static int ids_wait(rt_dev *d)
{
	ids_sync += ids_counting;
	return ids_inner->sync(d);
}

static int ids_put(rt_dev *d, void *dst, const void *src, size_t bytes)
{
	ids_async += ids_counting;
	return ids_inner->put_async(d, dst, src, bytes);
}

static void ids_attach(rt_ctx *c, const rt_layer_spec *L)
{
	rt_dev *d = emu_device(L);
	ids_inner = d->ops;
	ids_ops = *d->ops;
	ids_ops.copy = ids_copy;
	ids_ops.put_async = ids_put;
	ids_ops.sync = ids_wait;
	d->ops = &ids_ops;
	ck_assert_int_eq(rt__dev_attach(c, d, decay_mod, NULL, false), RT_OK);
}

static void ids_buffers(rt_ctx *c, const rt_layer_spec *L, decay_bufs *b)
{
	emu_buffers(c, L, b);
	ids_counting = true; /* the step: after the model's upload */
}

/* A step's F of the embedding and of the head take the ids (inputs and
 * targets) from one asynchronous copy of page-locked memory, made before
 * the first of them, and no copy from pageable memory (which waits for
 * the device) runs in the step.  The step waits for the device once, at
 * its end, to copy the loss to the host: F, B and W of every layer, the
 * MoE's among them (its grouped GEMMs read the experts' rows on the
 * device), neither wait nor copy to the host. */
START_TEST(test_ids_async)
{
	static const decay_target tg = {ids_attach, ids_buffers};
	rt_train t = {.seed = 3, .seq = 4, .mbs = 2, .vocab = 16, .lr = 1e-2f};
	rt_ctx *c = decay_step(t, &tg);
	ck_assert_int_eq(ids_h2d, 0);
	ck_assert_int_eq(ids_async, 1);
	ck_assert_int_eq(ids_d2h, 1);
	ck_assert_int_eq(ids_sync, 1);
	ck_assert_int_eq(rt_finalize(c), RT_OK);
}
END_TEST

static Suite *emu_suite(void)
{
	Suite *s = suite_create("dev_emu");
	TCase *tc = tcase_create("emu");
	tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_tree_sum);
	tcase_add_test(tc, test_each_covers);
	tcase_add_test(tc, test_diverge);
	tcase_add_test(tc, test_launch_errors);
	tcase_add_test(tc, test_compile_error);
	tcase_add_test(tc, test_gemm_f32);
	tcase_add_test(tc, test_gemm_bf16);
	tcase_add_test(tc, test_gemm_sb);
	tcase_add_test(tc, test_mma);
	tcase_add_test(tc, test_moe_route_layout);
	tcase_add_test(tc, test_mlp_module);
	tcase_add_test(tc, test_col_sums);
	tcase_add_test(tc, test_conditional_entries);
	tcase_add_loop_test(tc, test_decay_device, 0, 2);
	tcase_add_test(tc, test_put_async);
	tcase_add_test(tc, test_ids_async);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(emu_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
