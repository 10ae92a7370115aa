/* cuda_lib.cu: the non-GEMM GPU kernels, written once as templates over the
 * shapes (docs/cuda.md, the math of docs/layers.md).
 *
 * codegen/cuda_kernels.c prepends the constants of one layer (OCTO_BF16, T,
 * H, ...) and appends the extern "C" kernels of that layer kind, which call
 * these templates with the widths baked in; NVRTC compiles the result.
 * Matrix products run through cuBLAS, but for the MoE experts' grouped GEMMs
 * (moe_gmm, on the warp tile products).
 *
 * Storage: activations and parameters are `real` (f32, or bf16 kept as its
 * 16 bits), weight gradients and per-row statistics f32; arithmetic is f32.
 * Launch shapes: "row" kernels take one block of OCTO_ROW threads per row
 * (grid = rows); "each" kernels take any grid and stride over n; "col"
 * kernels take one thread per column and sum rows in ascending order, so
 * every weight gradient is deterministic. */
#ifndef OCTO_ROW
#define OCTO_ROW 256 /* the host emulator compiles the modules with its own */
#endif
/* The entry points of codegen/cuda_kernels.c.  Each declares the most
 * threads a block it is launched with, so that ptxas keeps its registers
 * within what such a block may hold (spilling if it must) and the driver
 * refuses a larger launch by name: OCTO_ROW for the row and "each" kernels
 * (the runtime's row and each_block), OCTO_KERNEL_THREADS(n) for the few
 * launched otherwise. */
#ifndef OCTO_KERNEL
#define OCTO_KERNEL extern "C" __global__ __launch_bounds__(OCTO_ROW)
#define OCTO_KERNEL_THREADS(n) extern "C" __global__ __launch_bounds__(n)
#endif
#ifndef INFINITY /* NVRTC has no <math.h> */
#define INFINITY __int_as_float(0x7f800000)
#endif

#if OCTO_BF16
typedef unsigned short real;
__device__ __forceinline__ float ld(real v) { return __uint_as_float(((unsigned)v) << 16); }
__device__ __forceinline__ real st(float f)
{
	unsigned u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (real)((u >> 16) | 0x40u); /* quiet NaN */
	u += 0x7fffu + ((u >> 16) & 1u);      /* round to nearest even */
	return (real)(u >> 16);
}
#else
typedef float real;
__device__ __forceinline__ float ld(real v) { return v; }
__device__ __forceinline__ real st(float f) { return f; }
#endif

#define EACH(i, n) for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < (long)(n); \
                        i += (long)gridDim.x * blockDim.x)

__device__ __forceinline__ float sigm(float v) { return 1.f / (1.f + expf(-v)); }
__device__ __forceinline__ float silu(float v) { return v * sigm(v); }
__device__ __forceinline__ float dsilu(float v) { float s = sigm(v); return s * (1.f + v * (1.f - s)); }
__device__ __forceinline__ float softplus(float v) { return v > 20.f ? v : log1pf(expf(v)); }

/* Sum over the block in a fixed tree order (deterministic). */
__device__ float block_sum(float v)
{
	__shared__ float sh[OCTO_ROW];
	__syncthreads();
	sh[threadIdx.x] = v;
	__syncthreads();
	for (int s = OCTO_ROW / 2; s > 0; s >>= 1) {
		if ((int)threadIdx.x < s)
			sh[threadIdx.x] += sh[threadIdx.x + s];
		__syncthreads();
	}
	return sh[0];
}

__device__ float block_max(float v)
{
	__shared__ float sh[OCTO_ROW];
	__syncthreads();
	sh[threadIdx.x] = v;
	__syncthreads();
	for (int s = OCTO_ROW / 2; s > 0; s >>= 1) {
		if ((int)threadIdx.x < s)
			sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
		__syncthreads();
	}
	return sh[0];
}

/* ---- warp tile products: 16x16 blocks of C += A B, f32 accumulation ----
 * A warp multiplies a 16x16 block of A by a 16x16 block of B into a 16x16
 * f32 accumulator it holds (mma_acc) across calls, so that a kernel keeps its
 * sums in registers over a whole reduction:
 *   mma_zero(c); for each k block: mma_load_a<ACOL>(a, pa, lda);
 *   mma_load_b<BCOL>(b, pb, ldb); mma_run(c, a, b); then mma_store(pc, c, ldc)
 * (mma_load_c reads an accumulator back).  Element (i, k) of the A block is
 * pa[i*lda + k], or pa[k*lda + i] when ACOL; (k, j) of B is pb[k*ldb + j], or
 * pb[j*ldb + k] when BCOL; C is row-major.  Every lane of the warp makes the
 * same calls with the same pointers (warp-uniform control flow).
 * In bf16 on the GPU these are the tensor cores' wmma m16n16k16 (bf16 in, f32
 * sums); the pointers must be 32-byte aligned and lda, ldb, ldc multiples of
 * 16 elements.  In f32, and in the emulator, a lane owns the accumulator's
 * elements lane + 32 e (e < 8) and sums k ascending: the same results for
 * any block order, and for the emulator's sequential lanes. */
#if OCTO_BF16 && !defined(OCTO_EMU)
struct mma_acc { float x[8]; };
struct mma_a { unsigned x[4]; };
struct mma_b { unsigned x[4]; };
__device__ __forceinline__ void mma_zero(mma_acc &c)
{
	for (int e = 0; e < 8; e++) c.x[e] = 0.f;
}
template <bool COL> __device__ __forceinline__ void mma_load_a(mma_a &a, const real *p, int ld)
{
	if (COL)
		asm volatile("wmma.load.a.sync.aligned.col.m16n16k16.bf16 {%0, %1, %2, %3}, [%4], %5;"
		             : "=r"(a.x[0]), "=r"(a.x[1]), "=r"(a.x[2]), "=r"(a.x[3]) : "l"(p), "r"(ld));
	else
		asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.bf16 {%0, %1, %2, %3}, [%4], %5;"
		             : "=r"(a.x[0]), "=r"(a.x[1]), "=r"(a.x[2]), "=r"(a.x[3]) : "l"(p), "r"(ld));
}
template <bool COL> __device__ __forceinline__ void mma_load_b(mma_b &b, const real *p, int ld)
{
	if (COL)
		asm volatile("wmma.load.b.sync.aligned.col.m16n16k16.bf16 {%0, %1, %2, %3}, [%4], %5;"
		             : "=r"(b.x[0]), "=r"(b.x[1]), "=r"(b.x[2]), "=r"(b.x[3]) : "l"(p), "r"(ld));
	else
		asm volatile("wmma.load.b.sync.aligned.row.m16n16k16.bf16 {%0, %1, %2, %3}, [%4], %5;"
		             : "=r"(b.x[0]), "=r"(b.x[1]), "=r"(b.x[2]), "=r"(b.x[3]) : "l"(p), "r"(ld));
}
__device__ __forceinline__ void mma_load_c(mma_acc &c, const float *p, int ld)
{
	asm volatile("wmma.load.c.sync.aligned.row.m16n16k16.f32 {%0, %1, %2, %3, %4, %5, %6, %7}, [%8], %9;"
	             : "=f"(c.x[0]), "=f"(c.x[1]), "=f"(c.x[2]), "=f"(c.x[3]), "=f"(c.x[4]),
	               "=f"(c.x[5]), "=f"(c.x[6]), "=f"(c.x[7])
	             : "l"(p), "r"(ld));
}
/* The a and b layouts are fixed at load time; the mma names them again. */
template <bool ACOL, bool BCOL>
__device__ __forceinline__ void mma_run(mma_acc &c, const mma_a &a, const mma_b &b)
{
#define OCTO_MMA(L)                                                                         \
	asm volatile("wmma.mma.sync.aligned." L ".m16n16k16.f32.bf16.bf16.f32 "              \
	             "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, "                 \
	             "{%12, %13, %14, %15}, {%0, %1, %2, %3, %4, %5, %6, %7};"                \
	             : "+f"(c.x[0]), "+f"(c.x[1]), "+f"(c.x[2]), "+f"(c.x[3]), "+f"(c.x[4]),   \
	               "+f"(c.x[5]), "+f"(c.x[6]), "+f"(c.x[7])                                \
	             : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]),        \
	               "r"(b.x[1]), "r"(b.x[2]), "r"(b.x[3]))
	if (ACOL && BCOL) OCTO_MMA("col.col");
	else if (ACOL) OCTO_MMA("col.row");
	else if (BCOL) OCTO_MMA("row.col");
	else OCTO_MMA("row.row");
#undef OCTO_MMA
}
__device__ __forceinline__ void mma_store(float *p, const mma_acc &c, int ld)
{
	asm volatile("wmma.store.d.sync.aligned.row.m16n16k16.f32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8}, %9;"
	             :: "l"(p), "f"(c.x[0]), "f"(c.x[1]), "f"(c.x[2]), "f"(c.x[3]), "f"(c.x[4]),
	               "f"(c.x[5]), "f"(c.x[6]), "f"(c.x[7]), "r"(ld) : "memory");
}
#else
struct mma_acc { float x[8]; };
struct mma_a { const real *p; int ld; };
struct mma_b { const real *p; int ld; };
__device__ __forceinline__ void mma_zero(mma_acc &c)
{
	#pragma unroll
	for (int e = 0; e < 8; e++) c.x[e] = 0.f;
}
template <bool COL> __device__ __forceinline__ void mma_load_a(mma_a &a, const real *p, int ld)
{
	a.p = p;
	a.ld = ld;
}
template <bool COL> __device__ __forceinline__ void mma_load_b(mma_b &b, const real *p, int ld)
{
	b.p = p;
	b.ld = ld;
}
__device__ __forceinline__ void mma_load_c(mma_acc &c, const float *p, int ld)
{
	#pragma unroll
	for (int e = 0; e < 8; e++) {
		int i = (int)(threadIdx.x % 32) + 32 * e;
		c.x[e] = p[(i / 16) * ld + i % 16];
	}
}
template <bool ACOL, bool BCOL>
__device__ __forceinline__ void mma_run(mma_acc &c, const mma_a &a, const mma_b &b)
{
	#pragma unroll
	for (int e = 0; e < 8; e++) {
		int i = (int)(threadIdx.x % 32) + 32 * e, r = i / 16, j = i % 16;
		float s = c.x[e];
		for (int k = 0; k < 16; k++)
			s += ld(ACOL ? a.p[k * a.ld + r] : a.p[r * a.ld + k]) *
			     ld(BCOL ? b.p[j * b.ld + k] : b.p[k * b.ld + j]);
		c.x[e] = s;
	}
}
__device__ __forceinline__ void mma_store(float *p, const mma_acc &c, int ld)
{
	#pragma unroll
	for (int e = 0; e < 8; e++) {
		int i = (int)(threadIdx.x % 32) + 32 * e;
		p[(i / 16) * ld + i % 16] = c.x[e];
	}
}
#endif

/* ---- RMSNorm (eps 1e-5); row kernels over rows of width W at stride LD ---- */

/* F: r = 1/sqrt(mean x^2 + eps), xhat = x r, u = xhat g.  xhat may be NULL. */
template <int W, int LD>
__device__ void rmsnorm_f(const real *x, const real *g, real *u, real *xhat, float *r)
{
	long t = blockIdx.x;
	const real *xr = x + t * LD;
	float s = 0.f;
	for (int j = threadIdx.x; j < W; j += OCTO_ROW) {
		float v = ld(xr[j]);
		s += v * v;
	}
	float rr = rsqrtf(block_sum(s) / W + 1e-5f);
	if (threadIdx.x == 0)
		r[t] = rr;
	for (int j = threadIdx.x; j < W; j += OCTO_ROW) {
		float xh = ld(xr[j]) * rr;
		if (xhat)
			xhat[t * W + j] = st(xh);
		u[t * W + j] = st(g ? xh * ld(g[j]) : xh);
	}
}

/* B: e = du g, dx = resid + r (e - xhat mean(e xhat)); resid may be NULL;
 * g NULL is the unscaled norm (Mamba-2's gated norm takes du pre-scaled).
 * du has rows at stride LDU (MLA's kv latent: W wide into a wider dx). */
template <int W, int LD, int LDU = LD>
__device__ void rmsnorm_b(const real *du, const real *g, const real *xhat, const float *r,
                          const real *resid, real *dx)
{
	long t = blockIdx.x;
	float s = 0.f;
	for (int j = threadIdx.x; j < W; j += OCTO_ROW) {
		float e = ld(du[t * LDU + j]) * (g ? ld(g[j]) : 1.f);
		s += e * ld(xhat[t * W + j]);
	}
	float mean = block_sum(s) / W;
	for (int j = threadIdx.x; j < W; j += OCTO_ROW) {
		float e = ld(du[t * LDU + j]) * (g ? ld(g[j]) : 1.f);
		float v = r[t] * (e - ld(xhat[t * W + j]) * mean);
		dx[t * LD + j] = st((resid ? ld(resid[t * LD + j]) : 0.f) + v);
	}
}

/* ---- column sums in two stages ----
 * W's sums over rows (a norm's scale, biases, the convolution's weights,
 * dt_bias) in one order whatever the launch: stage 1 (colpart_prod,
 * conv_w), one thread per (chunk of CH rows, column), sums its chunk's rows
 * ascending into part [chunks][W]; stage 2 (col_sums: col_sum in every
 * module) adds each column's partials, chunks ascending, to the gradient.
 * CH is the module's COLCH (the runtime's RT_COL_CHUNK), not the grid's. */
template <int CH> __device__ __forceinline__ long col_chunks(long rows) { return (rows + CH - 1) / CH; }

/* Stage 1: part[c][j] = sum over chunk c's rows t of a[t][j] b[t][j] (b
 * null: a alone), a and b at stride LD. */
template <int W, int LD, int CH>
__device__ void colpart_prod(const real *a, const real *b, float *part, long rows)
{
	EACH(i, col_chunks<CH>(rows) * W) {
		long c = i / W, t1 = (c + 1) * CH < rows ? (c + 1) * CH : rows;
		int j = (int)(i % W);
		float s = 0.f;
		for (long t = c * CH; t < t1; t++)
			s += ld(a[t * LD + j]) * (b ? ld(b[t * LD + j]) : 1.f);
		part[i] = s;
	}
}

/* Stage 2: dst[j] += sum over chunks c ascending of part[c][j], j < w. */
__device__ void col_sums(const float *part, float *dst, long chunks, long w)
{
	EACH(j, w) {
		float s = 0.f;
		for (long c = 0; c < chunks; c++) s += part[c * w + j];
		dst[j] += s;
	}
}

/* y[t][j] += b[j] over rows of W (a projection's bias). */
template <int W>
__device__ void add_bias(real *y, const real *b, long rows)
{
	EACH(i, rows * W) y[i] = st(ld(y[i]) + ld(b[i % W]));
}

/* u = xhat g (W's input to the weight GEMMs). */
template <int W, int ROWS>
__device__ void scale_cols(const real *xhat, const real *g, real *u)
{
	EACH(i, (long)ROWS * W) u[i] = st(ld(xhat[i]) * ld(g[i % W]));
}

/* ---- feed-forward activations (act: 0 swiglu 1 geglu 2 gelu 3 relu 4 relu2) ---- */

template <int ACT> __device__ __forceinline__ float act_f(float a)
{
	if (ACT == 0) return silu(a);
	if (ACT == 1 || ACT == 2) return 0.5f * a * (1.f + erff(a * 0.70710678118654752f));
	if (ACT == 3) return fmaxf(a, 0.f);
	return a > 0.f ? a * a : 0.f;
}

template <int ACT> __device__ __forceinline__ float act_d(float a)
{
	if (ACT == 0) return dsilu(a);
	if (ACT == 1 || ACT == 2)
		return 0.5f * (1.f + erff(a * 0.70710678118654752f)) + a * expf(-0.5f * a * a) * 0.3989422804014327f;
	if (ACT == 3) return a > 0.f ? 1.f : 0.f;
	return a > 0.f ? 2.f * a : 0.f;
}

/* F: h = act(a) (* b when gated), n elements. */
template <int ACT, bool GATED>
__device__ void ffn_act_f(const real *a, const real *b, real *h, long n)
{
	EACH(i, n) h[i] = st(act_f<ACT>(ld(a[i])) * (GATED ? ld(b[i]) : 1.f));
}

/* B: da = dh (b) act'(a); db = dh act(a) (gated). */
template <int ACT, bool GATED>
__device__ void ffn_act_b(const real *dh, const real *a, const real *b, real *da, real *db, long n)
{
	EACH(i, n) {
		float av = ld(a[i]), d = ld(dh[i]);
		da[i] = st(d * (GATED ? ld(b[i]) : 1.f) * act_d<ACT>(av));
		if (GATED)
			db[i] = st(d * act_f<ACT>(av));
	}
}

/* ---- rotary embedding: "rotate half" of the last L features of each head ---- */

/* The rotation's table, made each F and B before it rotates: cos and sin
 * (times mscale) per (position, pair), cs and sn [SEQ][L/2] f32, computed
 * in double and rounded as the CPU's rope_tables makes them; inv the pairs'
 * inverse frequencies and mscale the factor, the module's constants
 * ROPE_INV_FREQ and ROPE_MSCALE (the CPU's, from rt__rope_freq: the
 * layer's rope_theta and rope_scaling). */
template <int SEQ, int L>
__device__ void rope_table(float *cs, float *sn, const double *inv, double mscale)
{
	const int half = L / 2;
	EACH(i, (long)SEQ * half) {
		double th = (double)(i / half) * inv[i % half];
		cs[i] = (float)(mscale * cos(th));
		sn[i] = (float)(mscale * sin(th));
	}
}

/* One thread per (row, head, pair); sign -1 is the inverse (B); cs, sn
 * the table (rope_table). */
template <int SEQ, int NH, int STRIDE, int OFF, int L>
__device__ void rope(real *x, long rows, float sign, const float *cs, const float *sn)
{
	const int half = L / 2;
	EACH(i, rows * NH * half) {
		long t = i / (NH * half);
		int h = (int)(i / half % NH), k = (int)(i % half);
		long at = (t % SEQ) * half + k;
		float c = cs[at], n = sign * sn[at];
		real *p = x + t * (long)(NH * STRIDE) + (long)h * STRIDE + OFF;
		float a = ld(p[k]), b = ld(p[k + half]);
		p[k] = st(a * c - b * n);
		p[k + half] = st(a * n + b * c);
	}
}

/* ---- attention core: tiled flash attention (FlashAttention-2's loops) ----
 * q [T][NH*DQK], k [T][NKV*DQK], v [T][NKV*DV], o [T][NH*DV] (T = MBS*SEQ
 * rows), lse and Dsum [MBS][NH][SEQ] f32.  Query i sees key j iff j <= i
 * and, with a window, j > i - WIN; query head h reads kv head h / (NH/NKV).
 *
 * A block of ATT_THREADS (4 warps) holds a tile of M rows for its whole
 * run (the queries of F and B_q, the keys of B_kv, of one sequence and
 * head) and steps over tiles of N rows of the other side, skipping those
 * wholly masked.  Operands are staged in shared memory as `real`, head
 * dims padded with zeros to multiples of 16 (the tile products' blocks);
 * the scores of a step go through a shared f32 tile, where one thread per
 * element (or per row, for the online softmax's statistics) applies the
 * mask and the exponentials, and the probabilities (B: dS) are rounded to
 * `real` for the next product.  Sums that span steps (F's o, B's dq, dk,
 * dv) stay in registers (mma_acc): the warps split the M rows into M/16
 * row groups and, within one, the 16-column blocks.  Every sum has one
 * order, fixed by the shapes alone: no atomics, the same bits every run.
 *
 * The runtime launches blocks of ATT_THREADS, ceil(SEQ/64) per (sequence,
 * head) for F and B_q, per (sequence, kv head) for B_kv; M is at most 64,
 * so no block is left without a tile, and a block takes tiles grid apart
 * when M is smaller (runtime/dev/dev_attn.c).  M and N are the first of
 * att_tiles' candidates (largest first) whose static shared memory fits
 * 48 KB for the layer's DQK, DV and `real`. */
#define ATT_THREADS 128

__device__ constexpr int att_r16(int d) { return (d + 15) / 16 * 16; }
__device__ constexpr int att_max(int a, int b) { return a > b ? a : b; }
__device__ constexpr int att_min(int a, int b) { return a < b ? a : b; }

/* Static shared bytes of a kernel: M rows of held operands (hw elements a
 * row), N rows of streamed ones (s1 + s2 a row, or the wider of the two when
 * one buffer takes them in turn), the real tile [M][N], the f32 tile (also
 * the warps' 16x16 scratch: at least 4 x 256 floats) and per-row
 * statistics. */
__device__ constexpr long att_bytes(int m, int n, int hw, int s1, int s2, bool one)
{
	return (long)sizeof(real) * ((long)m * hw + (long)n * (one ? att_max(s1, s2) : s1 + s2) + m * n) +
	       4L * (att_max(m * n, 1024) + 4 * 64);
}

/* The tile: M * 10000 + N * 10 + one (streamed operands through one
 * buffer), the first candidate that fits; F always streams k then v
 * through one buffer (only_one). */
__device__ constexpr int att_tiles(int hw, int s1, int s2, bool only_one)
{
	const int cand[8][2] = {{64, 64}, {64, 32}, {32, 64}, {32, 32},
	                        {64, 16}, {32, 16}, {16, 32}, {16, 16}};
	for (int c = 0; c < 8; c++)
		for (int one = only_one ? 1 : 0; one < 2; one++)
			if (att_bytes(cand[c][0], cand[c][1], hw, s1, s2, one) <= 48 * 1024)
				return cand[c][0] * 10000 + cand[c][1] * 10 + one;
	return 0;
}

/* What a warp syncs on between writing a 16x16 block to its scratch and
 * reading it back element-wise (and again before the next write).  In the
 * emulator each lane touches only the elements lane + 32 e, the very ones
 * its mma_store wrote and its mma_load_c reads, so it needs none. */
#ifdef OCTO_EMU
#define att_warp_sync()
#else
#define att_warp_sync() __syncwarp()
#endif

template <int WIN> __device__ __forceinline__ bool att_sees(int i, int j, int seq)
{
	return i < seq && j <= i && (WIN <= 0 || j > i - WIN);
}

/* dst[N][DP] = rows [0, nv) of src (ld), columns [0, D); zeros elsewhere. */
template <int N, int D, int DP>
__device__ void att_stage(real *dst, const real *src, long ld, int nv)
{
	for (int i = threadIdx.x; i < N * DP; i += ATT_THREADS) {
		int r = i / DP, c = i % DP;
		dst[i] = r < nv && c < D ? src[r * ld + c] : (real)0;
	}
}

/* c[MR][NC] (f32, ld NC) = a[MR][KD] b[NC][KD]^T (a at lda, b at ldb, both
 * row-major): the block's warps take the 16x16 blocks in turn. */
template <int MR, int NC, int KD>
__device__ __forceinline__ void att_mm_nt(float *c, const real *a, int lda, const real *b, int ldb)
{
	for (int blk = threadIdx.x / 32; blk < (MR / 16) * (NC / 16); blk += ATT_THREADS / 32) {
		int r = blk / (NC / 16), n = blk % (NC / 16);
		mma_acc acc;
		mma_zero(acc);
		#pragma unroll 2
		for (int k = 0; k < KD; k += 16) {
			mma_a fa;
			mma_b fb;
			mma_load_a<false>(fa, a + r * 16 * lda + k, lda);
			mma_load_b<true>(fb, b + n * 16 * ldb + k, ldb);
			mma_run<false, true>(acc, fa, fb);
		}
		mma_store(c + r * 16 * NC + n * 16, acc, NC);
	}
}

/* The warp's share of an M-row tile with NB 16-column blocks: its row group
 * and the column blocks cw, cw + CP, ... (NA at most). */
template <int M, int NB> struct att_part {
	static constexpr int RG = M / 16, CP = 4 / RG, NA = (NB + CP - 1) / CP;
};

/* acc += the warp's blocks of A B, k ascending: A [M][KD] at lda or, ACOL,
 * stored transposed ([KD][M]); B [KD][NB * 16] row-major at ldb. */
template <int M, int NB, bool ACOL, int KD>
__device__ __forceinline__ void att_mm_acc(mma_acc *acc, const real *a, int lda, const real *b, int ldb)
{
	typedef att_part<M, NB> W;
	int w = threadIdx.x / 32, rw = w % W::RG, cw = w / W::RG;
	#pragma unroll 1
	for (int k = 0; k < KD; k += 16) {
		mma_a fa;
		mma_load_a<ACOL>(fa, ACOL ? a + k * lda + rw * 16 : a + rw * 16 * lda + k, lda);
		#pragma unroll
		for (int t = 0; t < W::NA; t++)
			if (cw + W::CP * t < NB) {
				mma_b fb;
				mma_load_b<false>(fb, b + k * ldb + (cw + W::CP * t) * 16, ldb);
				mma_run<ACOL, false>(acc[t], fa, fb);
			}
	}
}

/* Through the warp's scratch (256 floats): the accumulators' rows times
 * f[row] (att_acc_scale), or (att_acc_out) times f[row] if f, rounded into
 * dst's rows [0, nv), columns [0, D). */
template <int M, int NB>
__device__ __forceinline__ void att_acc_scale(mma_acc *acc, float *scr, const float *f)
{
	typedef att_part<M, NB> W;
	int rw = (int)(threadIdx.x / 32) % W::RG, lane = threadIdx.x % 32;
	#pragma unroll
	for (int t = 0; t < W::NA; t++) {
		mma_store(scr, acc[t], 16);
		att_warp_sync();
		for (int e = 0; e < 8; e++)
			scr[lane + 32 * e] *= f[rw * 16 + (lane + 32 * e) / 16];
		att_warp_sync();
		mma_load_c(acc[t], scr, 16);
		att_warp_sync();
	}
}

template <int M, int NB, int D>
__device__ __forceinline__ void att_acc_out(const mma_acc *acc, float *scr, const float *f, real *dst, long ld,
                            int nv)
{
	typedef att_part<M, NB> W;
	int w = threadIdx.x / 32, rw = w % W::RG, cw = w / W::RG, lane = threadIdx.x % 32;
	#pragma unroll
	for (int t = 0; t < W::NA; t++)
		if (cw + W::CP * t < NB) {
			mma_store(scr, acc[t], 16);
			att_warp_sync();
			for (int e = 0; e < 8; e++) {
				int i = lane + 32 * e, r = rw * 16 + i / 16, c = (cw + W::CP * t) * 16 + i % 16;
				if (r < nv && c < D)
					dst[r * ld + c] = st(f ? scr[i] * f[r] : scr[i]);
			}
			att_warp_sync();
		}
}

/* F: per query tile, o = softmax(q k^T sc) v online over the key tiles
 * (running row max m, sum l, o rescaled when m grows), lse = m + log l. */
template <int SEQ, int NH, int NKV, int DQK, int DV, int WIN>
__device__ void attn_f_tiles(const real *q, const real *k, const real *v, real *o, float *lse, int mbs,
                       float qs)
{
	constexpr int DQP = att_r16(DQK), DVP = att_r16(DV), DMP = att_max(DQP, DVP);
	constexpr int TL = att_tiles(DQP, DQP, DVP, true), BQ = TL / 10000, BK = TL / 10 % 1000;
	constexpr int NQT = (SEQ + BQ - 1) / BQ, NA = att_part<BQ, DVP / 16>::NA;
	alignas(32) __shared__ real qt[BQ * DQP];
	alignas(32) __shared__ real kv[BK * DMP];
	alignas(32) __shared__ real pt[BQ * BK];
	alignas(32) __shared__ float sf[att_max(BQ * BK, 1024)];
	__shared__ float mrow[BQ], lrow[BQ], crow[BQ];
	__shared__ int resc;
	const float sc = rsqrtf((float)DQK) * qs;
	float *scr = sf + threadIdx.x / 32 * 256;
	for (long tile = blockIdx.x; tile < (long)mbs * NH * NQT; tile += gridDim.x) {
		int q0 = (NQT - 1 - (int)(tile % NQT)) * BQ, h = (int)(tile / NQT % NH);
		long b = tile / ((long)NQT * NH);
		int g = h / (NH / NKV), nq = att_min(BQ, SEQ - q0);
		int lo = WIN > 0 ? att_max(0, q0 - WIN + 1) : 0, hi = q0 + nq - 1;
		__syncthreads();
		att_stage<BQ, DQK, DQP>(qt, q + (b * SEQ + q0) * (NH * DQK) + h * DQK, NH * DQK, nq);
		for (int r = threadIdx.x; r < BQ; r += ATT_THREADS) {
			mrow[r] = -INFINITY;
			lrow[r] = 0.f;
		}
		mma_acc acc[NA];
		#pragma unroll
		for (int t = 0; t < NA; t++) mma_zero(acc[t]);
		for (int k0 = lo / BK * BK; k0 <= hi; k0 += BK) {
			int nk = att_min(BK, SEQ - k0);
			__syncthreads();
			att_stage<BK, DQK, DMP>(kv, k + (b * SEQ + k0) * (NKV * DQK) + g * DQK, NKV * DQK, nk);
			if (threadIdx.x == 0)
				resc = 0;
			__syncthreads();
			att_mm_nt<BQ, BK, DQP>(sf, qt, DQP, kv, DMP);
			__syncthreads();
			/* k read: v takes its place while the scores become probabilities */
			att_stage<BK, DV, DMP>(kv, v + (b * SEQ + k0) * (NKV * DV) + g * DV, NKV * DV, nk);
			for (int r = threadIdx.x; r < BQ; r += ATT_THREADS) {
				int i = q0 + r;
				float mx = mrow[r], sum = 0.f;
				#pragma unroll 4
				for (int c = 0; c < BK; c++)
					if (att_sees<WIN>(i, k0 + c, SEQ))
						mx = fmaxf(mx, sf[r * BK + c] * sc);
				#pragma unroll 4
				for (int c = 0; c < BK; c++) {
					float p = att_sees<WIN>(i, k0 + c, SEQ) ? expf(sf[r * BK + c] * sc - mx) : 0.f;
					pt[r * BK + c] = st(p);
					sum += p;
				}
				/* o's factor; 1 while the row has seen nothing (o is 0) */
				float cf = mrow[r] == -INFINITY || mrow[r] == mx ? 1.f : expf(mrow[r] - mx);
				lrow[r] = lrow[r] * cf + sum;
				mrow[r] = mx;
				crow[r] = cf;
				if (cf != 1.f)
					resc = 1;
			}
			__syncthreads();
			if (resc)
				att_acc_scale<BQ, DVP / 16>(acc, scr, crow);
			att_mm_acc<BQ, DVP / 16, false, BK>(acc, pt, BK, kv, DMP);
		}
		__syncthreads();
		for (int r = threadIdx.x; r < nq; r += ATT_THREADS) {
			lse[(b * NH + h) * SEQ + q0 + r] = mrow[r] + logf(lrow[r]);
			crow[r] = 1.f / lrow[r];
		}
		__syncthreads();
		att_acc_out<BQ, DVP / 16, DV>(acc, scr, crow, o + (b * SEQ + q0) * (NH * DV) + h * DV,
		                              NH * DV, nq);
	}
}

/* The streamed pair of a backward step: x then y into two buffers, or (one)
 * into one buffer in turn, x staged again for the step's last product. */
template <int N, int DX, int DY, bool ONE> struct att_pair {
	static constexpr int LX = ONE ? att_max(att_r16(DX), att_r16(DY)) : att_r16(DX);
	static constexpr int LY = ONE ? LX : att_r16(DY);
	static constexpr int SIZE = ONE ? N * LX : N * (LX + LY);
};

/* B, queries: per query tile, D_i = sum_e dO_ie O_ie; over the key tiles,
 * dS = P (dO v^T - D) sc with P = exp(q k^T sc - lse), dq += dS k. */
template <int SEQ, int NH, int NKV, int DQK, int DV, int WIN>
__device__ void attn_b_q_tiles(const real *q, const real *k, const real *v, const real *o,
                         const real *dout, const float *lse, float *Dsum, real *dq, int mbs,
                         float qs)
{
	constexpr int DQP = att_r16(DQK), DVP = att_r16(DV);
	constexpr int TL = att_tiles(DQP + DVP, DQP, DVP, false), BQ = TL / 10000, BK = TL / 10 % 1000;
	constexpr bool ONE = TL % 10;
	typedef att_pair<BK, DQK, DV, ONE> KV;
	constexpr int NQT = (SEQ + BQ - 1) / BQ, NA = att_part<BQ, DQP / 16>::NA;
	alignas(32) __shared__ real qt[BQ * DQP];
	alignas(32) __shared__ real dot[BQ * DVP];
	alignas(32) __shared__ real kvb[KV::SIZE];
	alignas(32) __shared__ real pt[BQ * BK];
	alignas(32) __shared__ float sf[att_max(BQ * BK, 1024)];
	__shared__ float lrow[BQ], drow[BQ];
	real *kb = kvb, *vb = kvb + (ONE ? 0 : BK * KV::LX);
	const float sc = rsqrtf((float)DQK) * qs;
	float *scr = sf + threadIdx.x / 32 * 256;
	for (long tile = blockIdx.x; tile < (long)mbs * NH * NQT; tile += gridDim.x) {
		int q0 = (NQT - 1 - (int)(tile % NQT)) * BQ, h = (int)(tile / NQT % NH);
		long b = tile / ((long)NQT * NH);
		int g = h / (NH / NKV), nq = att_min(BQ, SEQ - q0);
		int lo = WIN > 0 ? att_max(0, q0 - WIN + 1) : 0, hi = q0 + nq - 1;
		long row0 = b * SEQ + q0, st0 = (b * NH + h) * SEQ + q0;
		const real *kg = k + b * SEQ * (NKV * DQK) + g * DQK, *vg = v + b * SEQ * (NKV * DV) + g * DV;
		__syncthreads();
		att_stage<BQ, DQK, DQP>(qt, q + row0 * (NH * DQK) + h * DQK, NH * DQK, nq);
		att_stage<BQ, DV, DVP>(dot, dout + row0 * (NH * DV) + h * DV, NH * DV, nq);
		for (int r = threadIdx.x; r < BQ; r += ATT_THREADS) {
			lrow[r] = drow[r] = 0.f; /* rows past the sequence: read, not used */
			if (r >= nq)
				continue;
			const real *orow = o + (row0 + r) * (NH * DV) + h * DV;
			const real *drw = dout + (row0 + r) * (NH * DV) + h * DV;
			float d = 0.f;
			for (int e = 0; e < DV; e++) d += ld(drw[e]) * ld(orow[e]);
			Dsum[st0 + r] = drow[r] = d;
			lrow[r] = lse[st0 + r];
		}
		mma_acc acc[NA];
		#pragma unroll
		for (int t = 0; t < NA; t++) mma_zero(acc[t]);
		for (int k0 = lo / BK * BK; k0 <= hi; k0 += BK) {
			int nk = att_min(BK, SEQ - k0);
			__syncthreads();
			att_stage<BK, DQK, KV::LX>(kb, kg + k0 * (NKV * DQK), NKV * DQK, nk);
			if (!ONE)
				att_stage<BK, DV, KV::LY>(vb, vg + k0 * (NKV * DV), NKV * DV, nk);
			__syncthreads();
			att_mm_nt<BQ, BK, DQP>(sf, qt, DQP, kb, KV::LX);
			__syncthreads();
			for (int i = threadIdx.x; i < BQ * BK; i += ATT_THREADS) {
				int r = i / BK;
				pt[i] = st(att_sees<WIN>(q0 + r, k0 + i % BK, SEQ) ? expf(sf[i] * sc - lrow[r]) : 0.f);
			}
			if (ONE) /* k read: v takes its place */
				att_stage<BK, DV, KV::LY>(vb, vg + k0 * (NKV * DV), NKV * DV, nk);
			__syncthreads();
			att_mm_nt<BQ, BK, DVP>(sf, dot, DVP, vb, KV::LY);
			__syncthreads();
			for (int i = threadIdx.x; i < BQ * BK; i += ATT_THREADS)
				pt[i] = st(ld(pt[i]) * (sf[i] - drow[i / BK]) * sc);
			if (ONE) /* v read: k again */
				att_stage<BK, DQK, KV::LX>(kb, kg + k0 * (NKV * DQK), NKV * DQK, nk);
			__syncthreads();
			att_mm_acc<BQ, DQP / 16, false, BK>(acc, pt, BK, kb, KV::LX);
		}
		att_acc_out<BQ, DQP / 16, DQK>(acc, scr, nullptr, dq + row0 * (NH * DQK) + h * DQK,
		                               NH * DQK, nq);
	}
}

/* B, keys and values: per key tile of a kv head, over the group's query
 * heads ascending and their query tiles ascending, dv += P^T dO and
 * dk += dS^T q, with P and dS as in attn_b_q (Dsum from it). */
template <int SEQ, int NH, int NKV, int DQK, int DV, int WIN>
__device__ void attn_b_kv_tiles(const real *q, const real *k, const real *v, const real *dout,
                          const float *lse, const float *Dsum, real *dk, real *dv, int mbs,
                          float qs)
{
	constexpr int DQP = att_r16(DQK), DVP = att_r16(DV);
	constexpr int TL = att_tiles(DQP + DVP, DQP, DVP, false), BK = TL / 10000, BQ = TL / 10 % 1000;
	constexpr bool ONE = TL % 10;
	typedef att_pair<BQ, DQK, DV, ONE> QO;
	constexpr int NKT = (SEQ + BK - 1) / BK;
	constexpr int NAK = att_part<BK, DQP / 16>::NA, NAV = att_part<BK, DVP / 16>::NA;
	alignas(32) __shared__ real kt[BK * DQP];
	alignas(32) __shared__ real vt[BK * DVP];
	alignas(32) __shared__ real qob[QO::SIZE];
	alignas(32) __shared__ real pt[BQ * BK];
	alignas(32) __shared__ float sf[att_max(BQ * BK, 1024)];
	__shared__ float lrow[BQ], drow[BQ];
	real *qb = qob, *ob = qob + (ONE ? 0 : BQ * QO::LX);
	const float sc = rsqrtf((float)DQK) * qs;
	float *scr = sf + threadIdx.x / 32 * 256;
	for (long tile = blockIdx.x; tile < (long)mbs * NKV * NKT; tile += gridDim.x) {
		int k0 = (NKT - 1 - (int)(tile % NKT)) * BK, g = (int)(tile / NKT % NKV);
		long b = tile / ((long)NKT * NKV);
		int nk = att_min(BK, SEQ - k0);
		int hi = WIN > 0 ? att_min(SEQ - 1, k0 + nk - 1 + WIN - 1) : SEQ - 1;
		__syncthreads();
		att_stage<BK, DQK, DQP>(kt, k + (b * SEQ + k0) * (NKV * DQK) + g * DQK, NKV * DQK, nk);
		att_stage<BK, DV, DVP>(vt, v + (b * SEQ + k0) * (NKV * DV) + g * DV, NKV * DV, nk);
		mma_acc ak[NAK], av[NAV];
		#pragma unroll
		for (int t = 0; t < NAK; t++) mma_zero(ak[t]);
		#pragma unroll
		for (int t = 0; t < NAV; t++) mma_zero(av[t]);
		for (int h = g * (NH / NKV); h < (g + 1) * (NH / NKV); h++) {
			const real *qg = q + b * SEQ * (NH * DQK) + h * DQK;
			const real *og = dout + b * SEQ * (NH * DV) + h * DV;
			for (int q0 = k0 / BQ * BQ; q0 <= hi; q0 += BQ) {
				int nq = att_min(BQ, SEQ - q0);
				long st0 = (b * NH + h) * SEQ + q0;
				__syncthreads();
				att_stage<BQ, DQK, QO::LX>(qb, qg + q0 * (NH * DQK), NH * DQK, nq);
				if (!ONE)
					att_stage<BQ, DV, QO::LY>(ob, og + q0 * (NH * DV), NH * DV, nq);
				for (int r = threadIdx.x; r < BQ; r += ATT_THREADS) {
					lrow[r] = r < nq ? lse[st0 + r] : 0.f;
					drow[r] = r < nq ? Dsum[st0 + r] : 0.f;
				}
				__syncthreads();
				att_mm_nt<BQ, BK, DQP>(sf, qb, QO::LX, kt, DQP);
				__syncthreads();
				for (int i = threadIdx.x; i < BQ * BK; i += ATT_THREADS) {
					int r = i / BK;
					pt[i] = st(att_sees<WIN>(q0 + r, k0 + i % BK, SEQ) ? expf(sf[i] * sc - lrow[r])
					                                                    : 0.f);
				}
				if (ONE) /* q read: dO takes its place */
					att_stage<BQ, DV, QO::LY>(ob, og + q0 * (NH * DV), NH * DV, nq);
				__syncthreads();
				att_mm_acc<BK, DVP / 16, true, BQ>(av, pt, BK, ob, QO::LY);
				att_mm_nt<BQ, BK, DVP>(sf, ob, QO::LY, vt, DVP);
				__syncthreads();
				for (int i = threadIdx.x; i < BQ * BK; i += ATT_THREADS)
					pt[i] = st(ld(pt[i]) * (sf[i] - drow[i / BK]) * sc);
				if (ONE) /* dO read: q again */
					att_stage<BQ, DQK, QO::LX>(qb, qg + q0 * (NH * DQK), NH * DQK, nq);
				__syncthreads();
				att_mm_acc<BK, DQP / 16, true, BQ>(ak, pt, BK, qb, QO::LX);
			}
		}
		att_acc_out<BK, DQP / 16, DQK>(ak, scr, nullptr, dk + (b * SEQ + k0) * (NKV * DQK) + g * DQK,
		                               NKV * DQK, nk);
		att_acc_out<BK, DVP / 16, DV>(av, scr, nullptr, dv + (b * SEQ + k0) * (NKV * DV) + g * DV,
		                              NKV * DV, nk);
	}
}

/* MLA: k_h = [kv_h[:DN], c[RKV:]], v_h = kv_h[DN:DN+DV] (F), and back (B):
 * dkv_h = [dk_h[:DN], dv_h], dc[RKV:] = sum_h dk_h[DN:] (heads ascending). */
template <int NH, int DN, int DR, int DV, int RKV>
__device__ void mla_split(const real *kv, const real *c, real *k, real *v, long rows)
{
	EACH(i, rows * NH) {
		long t = i / NH;
		int h = (int)(i % NH);
		const real *src = kv + t * (NH * (DN + DV)) + h * (DN + DV);
		real *kh = k + t * (NH * (DN + DR)) + h * (DN + DR);
		for (int e = 0; e < DN; e++) kh[e] = src[e];
		for (int e = 0; e < DR; e++) kh[DN + e] = c[t * (RKV + DR) + RKV + e];
		for (int e = 0; e < DV; e++) v[t * (NH * DV) + h * DV + e] = src[DN + e];
	}
}

template <int NH, int DN, int DR, int DV, int RKV>
__device__ void mla_join(const real *dk, const real *dv, real *dkv, real *dc, long rows)
{
	EACH(t, rows) {
		for (int h = 0; h < NH; h++) {
			real *d = dkv + t * (NH * (DN + DV)) + h * (DN + DV);
			for (int e = 0; e < DN; e++) d[e] = dk[t * (NH * (DN + DR)) + h * (DN + DR) + e];
			for (int e = 0; e < DV; e++) d[DN + e] = dv[t * (NH * DV) + h * DV + e];
		}
		for (int e = 0; e < DR; e++) {
			float s = 0.f;
			for (int h = 0; h < NH; h++) s += ld(dk[t * (NH * (DN + DR)) + h * (DN + DR) + DN + e]);
			dc[t * (RKV + DR) + RKV + e] = st(s);
		}
	}
}


/* Where no tile fits 48 KB of shared memory (f32 at head dims of 256: the
 * check mode, not a training one), the core runs one thread per row, its
 * sums in local memory: F and B_q per (sequence, head, query i), B_kv per
 * (sequence, kv head, key j), with the same D_i = dO_i . o_i; any launch
 * shape (they stride over the rows).  dev_check covers it (head_dim 256). */
template <int SEQ, int NH, int NKV, int DQK, int DV, int WIN>
__device__ void attn_f_rows(const real *q, const real *k, const real *v, real *o, float *lse,
                            int mbs, float qs)
{
	EACH(id, (long)mbs * NH * SEQ) {
		int i = (int)(id % SEQ), h = (int)(id / SEQ % NH);
		long b = id / ((long)SEQ * NH);
		int g = h / (NH / NKV);
		const real *qi = q + (b * SEQ + i) * (NH * DQK) + h * DQK;
		float acc[DV], m = -INFINITY, l = 0.f;
		for (int e = 0; e < DV; e++) acc[e] = 0.f;
		for (int j = WIN > 0 ? att_max(0, i - WIN + 1) : 0; j <= i; j++) {
			const real *kj = k + (b * SEQ + j) * (NKV * DQK) + g * DQK;
			const real *vj = v + (b * SEQ + j) * (NKV * DV) + g * DV;
			float s = 0.f;
			for (int e = 0; e < DQK; e++) s += ld(qi[e]) * ld(kj[e]);
			s *= rsqrtf((float)DQK) * qs;
			float mn = fmaxf(m, s), c = expf(m - mn), p = expf(s - mn);
			l = l * c + p;
			for (int e = 0; e < DV; e++) acc[e] = acc[e] * c + p * ld(vj[e]);
			m = mn;
		}
		real *oi = o + (b * SEQ + i) * (NH * DV) + h * DV;
		for (int e = 0; e < DV; e++) oi[e] = st(acc[e] / l);
		lse[id] = m + logf(l);
	}
}

template <int SEQ, int NH, int NKV, int DQK, int DV, int WIN>
__device__ void attn_b_q_rows(const real *q, const real *k, const real *v, const real *o,
                              const real *dout, const float *lse, float *Dsum, real *dq, int mbs,
                              float qs)
{
	EACH(id, (long)mbs * NH * SEQ) {
		int i = (int)(id % SEQ), h = (int)(id / SEQ % NH);
		long b = id / ((long)SEQ * NH);
		int g = h / (NH / NKV);
		const real *qi = q + (b * SEQ + i) * (NH * DQK) + h * DQK;
		const real *oi = o + (b * SEQ + i) * (NH * DV) + h * DV;
		const real *doi = dout + (b * SEQ + i) * (NH * DV) + h * DV;
		const float sc = rsqrtf((float)DQK) * qs;
		float D = 0.f, acc[DQK];
		for (int e = 0; e < DV; e++) D += ld(doi[e]) * ld(oi[e]);
		for (int e = 0; e < DQK; e++) acc[e] = 0.f;
		for (int j = WIN > 0 ? att_max(0, i - WIN + 1) : 0; j <= i; j++) {
			const real *kj = k + (b * SEQ + j) * (NKV * DQK) + g * DQK;
			const real *vj = v + (b * SEQ + j) * (NKV * DV) + g * DV;
			float s = 0.f, dp = 0.f;
			for (int e = 0; e < DQK; e++) s += ld(qi[e]) * ld(kj[e]);
			for (int e = 0; e < DV; e++) dp += ld(doi[e]) * ld(vj[e]);
			float ds = expf(s * sc - lse[id]) * (dp - D) * sc;
			for (int e = 0; e < DQK; e++) acc[e] += ds * ld(kj[e]);
		}
		Dsum[id] = D;
		real *dqi = dq + (b * SEQ + i) * (NH * DQK) + h * DQK;
		for (int e = 0; e < DQK; e++) dqi[e] = st(acc[e]);
	}
}

template <int SEQ, int NH, int NKV, int DQK, int DV, int WIN>
__device__ void attn_b_kv_rows(const real *q, const real *k, const real *v, const real *dout,
                               const float *lse, const float *Dsum, real *dk, real *dv, int mbs,
                               float qs)
{
	EACH(id, (long)mbs * NKV * SEQ) {
		int j = (int)(id % SEQ), g = (int)(id / SEQ % NKV);
		long b = id / ((long)SEQ * NKV);
		const real *kj = k + (b * SEQ + j) * (NKV * DQK) + g * DQK;
		const real *vj = v + (b * SEQ + j) * (NKV * DV) + g * DV;
		const float sc = rsqrtf((float)DQK) * qs;
		float ak[DQK], av[DV];
		for (int e = 0; e < DQK; e++) ak[e] = 0.f;
		for (int e = 0; e < DV; e++) av[e] = 0.f;
		int i1 = WIN > 0 ? att_min(SEQ - 1, j + WIN - 1) : SEQ - 1;
		for (int h = g * (NH / NKV); h < (g + 1) * (NH / NKV); h++)
			for (int i = j; i <= i1; i++) {
				long qid = (b * NH + h) * SEQ + i;
				const real *qi = q + (b * SEQ + i) * (NH * DQK) + h * DQK;
				const real *doi = dout + (b * SEQ + i) * (NH * DV) + h * DV;
				float s = 0.f, dp = 0.f;
				for (int e = 0; e < DQK; e++) s += ld(qi[e]) * ld(kj[e]);
				for (int e = 0; e < DV; e++) dp += ld(doi[e]) * ld(vj[e]);
				float p = expf(s * sc - lse[qid]), ds = p * (dp - Dsum[qid]) * sc;
				for (int e = 0; e < DQK; e++) ak[e] += ds * ld(qi[e]);
				for (int e = 0; e < DV; e++) av[e] += p * ld(doi[e]);
			}
		real *dkj = dk + (b * SEQ + j) * (NKV * DQK) + g * DQK;
		real *dvj = dv + (b * SEQ + j) * (NKV * DV) + g * DV;
		for (int e = 0; e < DQK; e++) dkj[e] = st(ak[e]);
		for (int e = 0; e < DV; e++) dvj[e] = st(av[e]);
	}
}

/* The entry points' core: the tiles where one fits (the tiles' own test). */
template <int DQK, int DV> __device__ constexpr bool att_tiled_f()
{
	return att_tiles(att_r16(DQK), att_r16(DQK), att_r16(DV), true) != 0;
}
template <int DQK, int DV> __device__ constexpr bool att_tiled_b()
{
	return att_tiles(att_r16(DQK) + att_r16(DV), att_r16(DQK), att_r16(DV), false) != 0;
}

template <int SEQ, int NH, int NKV, int DQK, int DV, int WIN>
__device__ void attn_f(const real *q, const real *k, const real *v, real *o, float *lse, int mbs,
                       float qs)
{
	if constexpr (att_tiled_f<DQK, DV>())
		attn_f_tiles<SEQ, NH, NKV, DQK, DV, WIN>(q, k, v, o, lse, mbs, qs);
	else
		attn_f_rows<SEQ, NH, NKV, DQK, DV, WIN>(q, k, v, o, lse, mbs, qs);
}

template <int SEQ, int NH, int NKV, int DQK, int DV, int WIN>
__device__ void attn_b_q(const real *q, const real *k, const real *v, const real *o,
                         const real *dout, const float *lse, float *Dsum, real *dq, int mbs,
                         float qs)
{
	if constexpr (att_tiled_b<DQK, DV>())
		attn_b_q_tiles<SEQ, NH, NKV, DQK, DV, WIN>(q, k, v, o, dout, lse, Dsum, dq, mbs, qs);
	else
		attn_b_q_rows<SEQ, NH, NKV, DQK, DV, WIN>(q, k, v, o, dout, lse, Dsum, dq, mbs, qs);
}

template <int SEQ, int NH, int NKV, int DQK, int DV, int WIN>
__device__ void attn_b_kv(const real *q, const real *k, const real *v, const real *dout,
                          const float *lse, const float *Dsum, real *dk, real *dv, int mbs,
                          float qs)
{
	if constexpr (att_tiled_b<DQK, DV>())
		attn_b_kv_tiles<SEQ, NH, NKV, DQK, DV, WIN>(q, k, v, dout, lse, Dsum, dk, dv, mbs, qs);
	else
		attn_b_kv_rows<SEQ, NH, NKV, DQK, DV, WIN>(q, k, v, dout, lse, Dsum, dk, dv, mbs, qs);
}

/* ---- embedding and loss ---- */

/* F: y_t = table[tok_t]; a token outside [0, V) sets *err (no row written for it). */
template <int V, int H>
__device__ void embed_f(const int *tok, const real *table, real *y, long rows, int *err)
{
	EACH(i, rows * H) {
		int tk = tok[i / H];
		if (tk < 0 || tk >= V) { *err = 1; continue; }
		y[i] = table[(long)tk * H + i % H];
	}
}

/* W (col): dtable[tok_t] += dy_t, t ascending per column. */
template <int H>
__device__ void embed_w(const int *tok, const real *dy, float *dtable, long rows)
{
	EACH(j, H)
		for (long t = 0; t < rows; t++)
			dtable[(long)tok[t] * H + j] += ld(dy[t * H + j]);
}

/* Head F (row): lse_t over the logits z [T][V]; ce_t = lse - z_target (0, count 0 if ignored). */
template <int V>
__device__ void head_lse(const real *z, const int *tgt, float *lse, float *ce)
{
	long t = blockIdx.x;
	float m = -INFINITY;
	for (int v = threadIdx.x; v < V; v += OCTO_ROW) m = fmaxf(m, ld(z[t * V + v]));
	m = block_max(m);
	float s = 0.f;
	for (int v = threadIdx.x; v < V; v += OCTO_ROW) s += expf(ld(z[t * V + v]) - m);
	float l = m + logf(block_sum(s));
	if (threadIdx.x == 0) {
		lse[t] = l;
		int y = tgt[t];
		ce[t] = y >= 0 && y < V ? l - ld(z[t * V + y]) : 0.f;
	}
}

/* The loss {sum in double, t ascending; count}: one thread. */
__device__ void loss_sum(const float *ce, const int *tgt, double *out, long rows)
{
	if (blockIdx.x || threadIdx.x) return;
	double s = 0.0;
	long n = 0;
	for (long t = 0; t < rows; t++)
		if (tgt[t] >= 0) { s += ce[t]; n++; }
	out[0] = s;
	out[1] = (double)n;
}

/* Head B: dz = dscale (exp(z - lse) - [v = target]), 0 for ignored rows; in place. */
template <int V>
__device__ void head_dz(real *z, const float *lse, const int *tgt, float dscale, long rows)
{
	EACH(i, rows * V) {
		long t = i / V;
		int y = tgt[t];
		float d = y < 0 ? 0.f : dscale * (expf(ld(z[i]) - lse[t]) - (i % V == y ? 1.f : 0.f));
		z[i] = st(d);
	}
}

/* ---- mixture of experts: routing ---- */

/* p = softmax(logits), top-K with ties to the lower index, renormalised
 * weights w: one warp per token, MOE_RT / 32 tokens a block of MOE_RT
 * threads (grid: ceil(rows / (MOE_RT / 32))).  Lane l takes experts l,
 * l + 32, ...; the max and each top-k pick combine the lanes' candidates
 * through shared memory (one barrier each: a pick's buffer alternates), and
 * the softmax's sum and the weights' total run in ascending order on lane
 * 0, so the results are those of one thread per token, bit for bit. */
enum { MOE_RT = 256 };
template <int E, int K>
__device__ void moe_route(const real *logit, float *p, float *w, int *sel, long rows)
{
	constexpr int NE = (E + 31) / 32; /* a lane's experts */
	static_assert(NE <= 32, "a lane's experts are the bits of one word");
	__shared__ float cv[2][MOE_RT];
	__shared__ int ci[2][MOE_RT];
	int lane = (int)threadIdx.x % 32, w0 = (int)threadIdx.x - lane;
	long t = (long)blockIdx.x * (MOE_RT / 32) + (int)threadIdx.x / 32;
	bool on = t < rows; /* every warp meets the barriers */
	const real *lg = logit + (on ? t : 0) * E;
	float m = -INFINITY;
	for (int e = lane; on && e < E; e += 32) m = fmaxf(m, ld(lg[e]));
	cv[0][threadIdx.x] = m;
	__syncthreads();
	for (int l = 0; l < 32; l++) m = fmaxf(m, cv[0][w0 + l]);
	if (on && lane == 0) {
		float s = 0.f;
		for (int e = 0; e < E; e++) s += expf(ld(lg[e]) - m);
		cv[1][threadIdx.x] = s;
	}
	__syncthreads();
	float s = cv[1][w0], pe[NE];
	unsigned taken = 0;
	for (int j = 0; j < NE; j++) {
		int e = lane + 32 * j;
		pe[j] = on && e < E ? expf(ld(lg[e]) - m) / s : 0.f;
		if (on && e < E) p[t * E + e] = pe[j];
	}
	float tot = 0.f;
	for (int k = 0; k < K; k++) {
		int best = -1, b = k & 1;
		float pb = 0.f;
		for (int j = 0; j < NE; j++) {
			int e = lane + 32 * j;
			if (e < E && !(taken >> j & 1) && (best < 0 || pe[j] > pb)) best = e, pb = pe[j];
		}
		cv[b][threadIdx.x] = pb; /* last read before the previous barrier */
		ci[b][threadIdx.x] = best;
		__syncthreads();
		best = -1;
		for (int l = 0; l < 32; l++) {
			int e = ci[b][w0 + l];
			float v = cv[b][w0 + l];
			if (e >= 0 && (best < 0 || v > pb || (v == pb && e < best))) best = e, pb = v;
		}
		if (best % 32 == lane)
			taken |= 1u << (best / 32);
		if (on && lane == 0) {
			sel[t * K + k] = best;
			tot += pb;
		}
	}
	if (on && lane == 0)
		for (int k = 0; k < K; k++) w[t * K + k] = p[t * E + sel[t * K + k]] / tot;
}

/* The routing layout, a stable counting sort of the pairs i = t K + k by
 * expert (one block of MOE_LT threads): expert e owns rows off[e]..off[e+1],
 * its pairs in ascending i, as the CPU's kernel places them.  The pairs
 * fall into NC contiguous chunks, one a thread; the counts per (expert,
 * chunk), scanned in (expert, chunk) order, give each chunk its first row
 * for each expert, and a second walk of the chunks places the pairs.
 * O(T K / NC + E) a thread; NC = MOE_LT, fewer when the counts would not
 * fit 32 KB of shared memory (E > 32). */
enum { MOE_LT = 256 };
template <int E, int K>
__device__ void moe_layout(const int *sel, int *off, int *slot, int *rowtok, long rows)
{
	constexpr int NC = E * MOE_LT <= 8192 ? MOE_LT : 8192 / E > 0 ? 8192 / E : 1;
	constexpr int S = (E * NC + MOE_LT - 1) / MOE_LT; /* a thread's share of the scan */
	__shared__ int cnt[E * NC], part[MOE_LT];
	long n = rows * K, len = (n + NC - 1) / NC;
	int c = (int)threadIdx.x;
	long i0 = c * len, i1 = c < NC && (c + 1) * len < n ? (c + 1) * len : c < NC ? n : 0;
	for (int x = c; x < E * NC; x += MOE_LT) cnt[x] = 0;
	__syncthreads();
	for (long i = i0; i < i1; i++) cnt[sel[i] * NC + c]++;
	__syncthreads();
	int a = 0;
	for (int x = c * S; x < (c + 1) * S && x < E * NC; x++) a += cnt[x];
	part[c] = a;
	__syncthreads();
	if (c == 0)
		for (int j = 0, s = 0; j < MOE_LT; j++) {
			int v = part[j];
			part[j] = s;
			s += v;
		}
	__syncthreads();
	a = part[c];
	for (int x = c * S; x < (c + 1) * S && x < E * NC; x++) {
		int v = cnt[x];
		cnt[x] = a;
		a += v;
	}
	__syncthreads();
	for (int e = c; e <= E; e += MOE_LT) off[e] = e < E ? cnt[e * NC] : (int)n;
	__syncthreads();
	for (long i = i0; i < i1; i++) {
		int r = cnt[sel[i] * NC + c]++;
		slot[i] = r;
		rowtok[r] = (int)(i / K);
	}
}

/* X[row] = u[rowtok[row]]. */
template <int H>
__device__ void gather_rows(const real *u, const int *rowtok, real *X, long n)
{
	EACH(i, n * H) X[i] = u[(long)rowtok[i / H] * H + i % H];
}

/* F: y_t += sum_k w_tk Y[slot_tk] (k ascending). */
template <int H, int K>
__device__ void moe_combine(const float *w, const int *slot, const real *Y, real *y, long rows)
{
	EACH(i, rows * H) {
		long t = i / H;
		float s = ld(y[i]);
		for (int k = 0; k < K; k++) s += w[t * K + k] * ld(Y[(long)slot[t * K + k] * H + i % H]);
		y[i] = st(s);
	}
}

/* B (one thread per row): dw, dY, and the router gradient dr. */
template <int E, int K, int H>
__device__ void moe_route_b(const real *dy, const real *Y, const float *p, const float *w,
                            const int *sel, const int *slot, real *dY, real *dr, long rows)
{
	EACH(t, rows) {
		float dw[K], dps[K], sw = 0.f, s = 0.f, c = 0.f;
		for (int k = 0; k < K; k++) {
			const real *yr = Y + (long)slot[t * K + k] * H;
			float a = 0.f;
			for (int j = 0; j < H; j++) {
				a += ld(dy[t * H + j]) * ld(yr[j]);
				dY[(long)slot[t * K + k] * H + j] = st(w[t * K + k] * ld(dy[t * H + j]));
			}
			dw[k] = a;
			sw += w[t * K + k] * a;
			s += p[t * E + sel[t * K + k]];
		}
		for (int k = 0; k < K; k++) {
			dps[k] = K == 1 ? 0.f : (dw[k] - sw) / s;
			c += p[t * E + sel[t * K + k]] * dps[k];
		}
		for (int e = 0; e < E; e++) {
			float dp = 0.f;
			for (int k = 0; k < K; k++) if (sel[t * K + k] == e) dp = dps[k];
			dr[t * E + e] = st(p[t * E + e] * (dp - c));
		}
	}
}

/* The shared experts' gate (shared_gate).  F: g_t = sigmoid(z_t),
 * y += g_t so_t (so: the shared output before the gate). */
template <int H>
__device__ void moe_sgate_f(const real *z, const real *so, float *g, real *y, long rows)
{
	EACH(i, rows * H) {
		long t = i / H;
		float gt = sigm(ld(z[t]));
		if (i % H == 0)
			g[t] = gt;
		y[i] = st(ld(y[i]) + gt * ld(so[i]));
	}
}

/* B (one thread per row): sdy = g dy, the shared MLP's output gradient;
 * sdz = g (1 - g) dy . so (j ascending), the gate's. */
template <int H>
__device__ void moe_sgate_b(const real *dy, const real *so, const float *g, real *sdy, real *sdz,
                            long rows)
{
	EACH(t, rows) {
		float gt = g[t], c = 0.f;
		for (int j = 0; j < H; j++) {
			c += ld(dy[t * H + j]) * ld(so[t * H + j]);
			sdy[t * H + j] = st(gt * ld(dy[t * H + j]));
		}
		sdz[t] = st(gt * (1.f - gt) * c);
	}
}

/* B: du_t = acc_t + sum_k dX[slot_tk] (k ascending), rounded once: acc is
 * the f32 sum of du's other terms (router, shared experts), dX the
 * experts' f32 rows; acc may be du when the storage is f32. */
template <int H, int K>
__device__ void moe_scatter_b(const int *slot, const float *dX, const float *acc, real *du, long rows)
{
	EACH(i, rows * H) {
		long t = i / H;
		float s = acc[i];
		for (int k = 0; k < K; k++) s += dX[(long)slot[t * K + k] * H + i % H];
		du[i] = st(s);
	}
}

/* ---- mixture of experts: the experts as grouped GEMMs ----
 * Expert e owns rows off[e]..off[e+1] of the gathered buffers; off stays on
 * the device, so the host launches every expert's product at once, with a
 * grid sized by a bound it knows.  A block of GM_THREADS threads (4 warps)
 * computes a GM_BM x GM_BN tile, warp w its rows 16w..16w+15, with the warp
 * tile products above, over K in steps of GM_BK staged in shared memory:
 * zero beyond the edges (partial tiles, odd widths) and at the alignment
 * and leading dimensions the tensor cores ask for, whatever the layout in
 * global memory.  Each block writes its own tile once (no atomics), and a
 * weight gradient's block sums its expert's rows in ascending order, so the
 * results are deterministic. */
enum { GM_BM = 64, GM_BN = 64, GM_BK = 32, GM_THREADS = 128, GM_LDA = GM_BK + 16,
       GM_LDB = GM_BN + 16 };

/* The block's tile of sums over k < kn of a(i, k) b(k, j) into acc[0..3]:
 * a(i, k) = A[i*lda + k] (ACOL: A[k*lda + i]) for i < am, b(k, j) =
 * B[k*ldb + j] (BCOL: B[j*ldb + k]) for j < bn, 0 elsewhere.  The threads
 * stage along the contiguous dimension of each. */
template <bool ACOL, bool BCOL>
__device__ __forceinline__ void gmm_tile(mma_acc *acc, long kn, const real *A, long lda, int am,
                                         const real *B, long ldb, int bn)
{
	alignas(32) __shared__ real As[GM_BM * GM_LDA];
	alignas(32) __shared__ real Bs[GM_BK * GM_LDB];
	int w = (int)threadIdx.x / 32;
#pragma unroll
	for (int c = 0; c < 4; c++) mma_zero(acc[c]);
	for (long k0 = 0; k0 < kn; k0 += GM_BK) {
		int kb = kn - k0 < GM_BK ? (int)(kn - k0) : GM_BK;
		for (int x = (int)threadIdx.x; x < GM_BM * GM_BK; x += GM_THREADS) {
			int i = ACOL ? x % GM_BM : x / GM_BK, k = ACOL ? x / GM_BM : x % GM_BK;
			As[i * GM_LDA + k] = i < am && k < kb ? A[ACOL ? (k0 + k) * lda + i : i * lda + k0 + k]
			                                      : (real)0;
		}
		for (int x = (int)threadIdx.x; x < GM_BK * GM_BN; x += GM_THREADS) {
			int k = BCOL ? x % GM_BK : x / GM_BN, j = BCOL ? x / GM_BK : x % GM_BN;
			Bs[k * GM_LDB + j] = j < bn && k < kb ? B[BCOL ? j * ldb + k0 + k : (k0 + k) * ldb + j]
			                                      : (real)0;
		}
		__syncthreads();
		for (int kk = 0; kk < kb; kk += 16) {
			mma_a a;
			mma_load_a<false>(a, As + 16 * w * GM_LDA + kk, GM_LDA);
#pragma unroll
			for (int c = 0; c < 4; c++) {
				mma_b b;
				mma_load_b<false>(b, Bs + kk * GM_LDB + 16 * c, GM_LDB);
				mma_run<false, false>(acc[c], a, b);
			}
		}
		__syncthreads();
	}
}

/* The tile's sums to out(i, j, v) for i < m, j < n, through shared memory
 * (in bf16 the accumulators are the tensor cores' fragments). */
template <class OUT>
__device__ __forceinline__ void gmm_out(const mma_acc *acc, int m, int n, OUT out)
{
	alignas(32) __shared__ float Cs[GM_BM * GM_BN];
	int w = (int)threadIdx.x / 32;
#pragma unroll
	for (int c = 0; c < 4; c++) mma_store(Cs + 16 * w * GM_BN + 16 * c, acc[c], GM_BN);
	__syncthreads();
	for (int x = (int)threadIdx.x; x < GM_BM * GM_BN; x += GM_THREADS)
		if (x / GM_BN < m && x % GM_BN < n) out(x / GM_BN, x % GM_BN, Cs[x]);
}

/* Expert e's rows [*r0, *r0 + *n) of `rows`, clamped to them: a corrupt off
 * gives wrong rows, never an access outside the buffers. */
__device__ __forceinline__ void moe_group(const int *off, int e, long rows, long *r0, long *n)
{
	long lo = off[e], hi = off[e + 1];
	lo = lo < 0 ? 0 : lo > rows ? rows : lo;
	hi = hi < lo ? lo : hi > rows ? rows : hi;
	*r0 = lo;
	*n = hi - lo;
}

/* The experts on their rows: C[r] = beta C[r] + A[r] W_e for off[e] <= r <
 * off[e+1], W_e the e-th [KD][N] matrix of W (BCOL: the transpose of its
 * e-th [N][KD] one); C [rows][N] is `real` (rounded once), or f32 with F32.
 * Grid: ((rows + GM_BM - 1) / GM_BM + E) (N + GM_BN - 1) / GM_BN blocks,
 * which bounds the row tiles sum_e ceil(n_e / GM_BM) times the column
 * tiles; a block takes row tile blockIdx.x / NT in expert order, column
 * tile blockIdx.x % NT, and returns past the last.  Every block meets one
 * barrier first (the emulator decides from the first block it runs whether
 * a kernel has barriers). */
template <int E, int N, int KD, bool BCOL, bool F32>
__device__ void moe_gmm(const int *off, const real *A, const real *W, void *C, int beta, long rows)
{
	constexpr int NT = (N + GM_BN - 1) / GM_BN;
	long t = blockIdx.x / NT, i0 = 0, m = 0, r0, n;
	int e = 0, j0 = (int)(blockIdx.x % NT) * GM_BN;
	for (long tiles = 0; e < E; e++) {
		moe_group(off, e, rows, &r0, &n);
		long nt = (n + GM_BM - 1) / GM_BM;
		if (t < tiles + nt) {
			i0 = r0 + (t - tiles) * GM_BM;
			m = r0 + n - i0 < GM_BM ? r0 + n - i0 : GM_BM;
			break;
		}
		tiles += nt;
	}
	__syncthreads();
	if (m == 0)
		return;
	mma_acc acc[4];
	const real *we = W + (long)e * KD * N;
	gmm_tile<false, BCOL>(acc, KD, A + i0 * KD, KD, (int)m, we + (BCOL ? (long)j0 * KD : j0),
	                      BCOL ? KD : N, N - j0);
	gmm_out(acc, (int)m, N - j0, [&](int i, int j, float v) {
		long at = (i0 + i) * N + j0 + j;
		if (F32)
			((float *)C)[at] = beta ? ((float *)C)[at] + v : v;
		else
			((real *)C)[at] = st(beta ? ld(((real *)C)[at]) + v : v);
	});
}

/* The experts' weight gradients: G_e += A_e^T B_e, A_e [n_e][M] and B_e
 * [n_e][N] expert e's rows of A and B, G_e the e-th [M][N] matrix of G (f32).
 * Grid: E (M + GM_BM - 1) / GM_BM (N + GM_BN - 1) / GM_BN blocks, one an
 * output tile, which sums the expert's rows in ascending order. */
template <int E, int M, int N>
__device__ void moe_gmm_w(const int *off, const real *A, const real *B, float *G, long rows)
{
	constexpr int MT = (M + GM_BM - 1) / GM_BM, NT = (N + GM_BN - 1) / GM_BN;
	int e = (int)(blockIdx.x / (MT * NT)), i0 = (int)(blockIdx.x / NT % MT) * GM_BM;
	int j0 = (int)(blockIdx.x % NT) * GM_BN;
	long r0 = 0, n = 0;
	if (e < E)
		moe_group(off, e, rows, &r0, &n);
	__syncthreads(); /* as moe_gmm's */
	if (n == 0)
		return;
	mma_acc acc[4];
	gmm_tile<true, false>(acc, n, A + r0 * M + i0, M, M - i0, B + r0 * N + j0, N, N - j0);
	float *ge = G + (long)e * M * N;
	gmm_out(acc, M - i0, N - j0, [&](int i, int j, float v) { ge[(long)(i0 + i) * N + j0 + j] += v; });
}

/* ---- Mamba: causal depthwise convolution over C channels of rows at stride LD ---- */

/* F: cv = conv_b + sum_k conv_w[c][k] in[s-(KC-1)+k]; xc = silu(cv). */
template <int SEQ, int C, int KC, int LD>
__device__ void conv_f(const real *in, const real *w, const real *bias, real *cv, real *xc, long rows)
{
	EACH(i, rows * C) {
		long t = i / C;
		int c = (int)(i % C), s = (int)(t % SEQ);
		float a = ld(bias[c]);
		for (int k = 0; k < KC; k++) {
			int ss = s - (KC - 1) + k;
			if (ss >= 0) a += ld(w[c * KC + k]) * ld(in[(t - s + ss) * LD + c]);
		}
		cv[i] = st(a);
		xc[i] = st(silu(a));
	}
}

/* B: dcv = dxc silu'(cv); din = sum_k conv_w[c][k] dcv[s+(KC-1)-k]. */
template <int SEQ, int C, int KC>
__device__ void conv_dcv(const real *dxc, const real *cv, real *dcv, long rows)
{
	EACH(i, rows * C) dcv[i] = st(ld(dxc[i]) * dsilu(ld(cv[i])));
}

/* The C columns of rows at stride LD, packed (B keeps the convolution's
 * input for W this way: W may not read the activation stash). */
template <int C, int LD>
__device__ void copy_cols(const real *src, real *dst, long rows)
{
	EACH(i, rows * C) dst[i] = src[(i / C) * LD + i % C];
}

template <int SEQ, int C, int KC, int LD>
__device__ void conv_b(const real *dcv, const real *w, real *din, long rows)
{
	EACH(i, rows * C) {
		long t = i / C;
		int c = (int)(i % C), s = (int)(t % SEQ);
		float a = 0.f;
		for (int k = 0; k < KC; k++) {
			int ss = s + (KC - 1) - k;
			if (ss < SEQ) a += ld(w[c * KC + k]) * ld(dcv[(t - s + ss) * C + c]);
		}
		din[t * LD + c] = st(a);
	}
}

/* W, stage 1 of dconv_w, dconv_b (col_sums adds them): one thread per
 * (chunk of CH rows, channel), rows ascending, into pw [chunks][C][KC] and
 * pb [chunks][C]. */
template <int SEQ, int C, int KC, int LD, int CH>
__device__ void conv_w(const real *dcv, const real *in, float *pw, float *pb, long rows)
{
	EACH(i, col_chunks<CH>(rows) * C) {
		long ck = i / C, t1 = (ck + 1) * CH < rows ? (ck + 1) * CH : rows;
		int c = (int)(i % C);
		float sb = 0.f, sw[KC];
		for (int k = 0; k < KC; k++) sw[k] = 0.f;
		for (long t = ck * CH; t < t1; t++) {
			int s = (int)(t % SEQ);
			float d = ld(dcv[t * C + c]);
			sb += d;
			for (int k = 0; k < KC; k++) {
				int ss = s - (KC - 1) + k;
				if (ss >= 0) sw[k] += d * ld(in[(t - s + ss) * LD + c]);
			}
		}
		for (int k = 0; k < KC; k++) pw[i * KC + k] = sw[k];
		pb[i] = sb;
	}
}

/* dt = softplus(v), v = src + bias (n rows of NH; src at stride LD). */
template <int NH, int LD>
__device__ void dt_f(const real *src, const real *bias, real *v, float *dt, long rows)
{
	EACH(i, rows * NH) {
		float a = ld(src[(i / NH) * LD + i % NH]) + ld(bias[i % NH]);
		v[i] = st(a);
		dt[i] = softplus(a); /* f32: exp(dt A) is sensitive to it */
	}
}

/* dv = ddt sigma(v), into dst at stride LD. */
template <int NH, int LD>
__device__ void dt_b(const float *ddt, const real *v, real *dst, long rows)
{
	EACH(i, rows * NH) dst[(i / NH) * LD + i % NH] = st(ddt[i] * sigm(ld(v[i])));
}

/* ---- the selective scan, step by step (Mamba-1; Mamba-2 runs the chunked
 * SSD, ssd_* below) ----
 * Heads of P channels, G groups, state N.  x [T][.] at stride LX (head h at
 * column h*P), B and C [T][.] at stride LBC (group g at g*N), dt [T][NH],
 * A: per head (A1 = 0) or per channel and state (A1 = 1) as -exp(A_log).
 * F: one thread per (sequence, head, channel p); state in registers; the
 * state entering every chunk of 16 steps goes to the stash. */
#define OCTO_CHUNK 16
template <int SEQ, int NH, int P, int G, int N, int A1, int LX, int LBC>
__device__ void scan_f(const real *x, const real *Bm, const real *Cm, const float *dt,
                       const real *Alog, const real *D, real *ys, float *chunks, int mbs)
{
	const int NC = (SEQ + OCTO_CHUNK - 1) / OCTO_CHUNK;
	EACH(id, (long)mbs * NH * P) {
		int p = (int)(id % P), h = (int)(id / P % NH);
		long b = id / ((long)NH * P);
		int g = h / (NH / G), ch = h * P + p;
		float S[N], A[N];
		for (int n = 0; n < N; n++) {
			S[n] = 0.f;
			A[n] = -expf(ld(Alog[A1 ? ch * N + n : h]));
		}
		for (int s = 0; s < SEQ; s++) {
			if (s % OCTO_CHUNK == 0)
				for (int n = 0; n < N; n++)
					chunks[((((b * NH + h) * NC) + s / OCTO_CHUNK) * P + p) * N + n] = S[n];
			long t = b * SEQ + s;
			float d = dt[t * NH + h], xv = ld(x[t * LX + ch]), y = 0.f;
			for (int n = 0; n < N; n++) {
				S[n] = expf(d * A[n]) * S[n] + d * xv * ld(Bm[t * LBC + g * N + n]);
				y += S[n] * ld(Cm[t * LBC + g * N + n]);
			}
			ys[t * (NH * P) + ch] = st(y + ld(D[A1 ? ch : h]) * xv);
		}
	}
}

/* The sums of v[0..n) over the P threads of a scan block, each in the same
 * fixed tree order, all n at once (red: n x P floats of shared memory, n at
 * most OCTO_SUMS(P)); every thread gets them back in v.  One tree for n sums
 * instead of n trees: log2(P) + 2 barriers for the lot, not for each. */
#define OCTO_SUMS(P) (4096 / (P))
template <int P>
__device__ void head_sums(float *red, int p, float *v, int n)
{
	for (int k = 0; k < n; k++) red[k * P + p] = v[k];
	__syncthreads();
	for (int w = 1; w < P; w <<= 1) {
		if (p % (2 * w) == 0 && p + w < P)
			for (int k = 0; k < n; k++) red[k * P + p] += red[k * P + p + w];
		__syncthreads();
	}
	for (int k = 0; k < n; k++) v[k] = red[k * P];
	__syncthreads();
}

/* head_sums over v[0..n) in groups that fit red. */
template <int P>
__device__ void head_sums_all(float *red, int p, float *v, int n)
{
	for (int k = 0; k < n; k += OCTO_SUMS(P))
		head_sums<P>(red, p, v + k, n - k < OCTO_SUMS(P) ? n - k : OCTO_SUMS(P));
}

/* B: one block of P threads per (sequence, head); backwards in time, a
 * chunk's states recomputed from the stash.  Writes dx (at stride LX), this
 * head's dB, dC [T][N] and ddt [T] partials (dbp, dcp, ddtp indexed by
 * head; summed over heads in ascending order by scan_reduce), dA [NH*P?][N]
 * and dD partial sums for W.  Reductions over p run in a fixed tree. */
template <int SEQ, int NH, int P, int G, int N, int A1, int LX, int LBC>
__device__ void scan_b(const real *x, const real *Bm, const real *Cm, const float *dt,
                       const real *Alog, const real *D, const real *dys, const float *chunks,
                       float *dx, float *dbp, float *dcp, float *ddt, float *dA, float *dD, int mbs)
{
	const int NC = (SEQ + OCTO_CHUNK - 1) / OCTO_CHUNK;
	__shared__ float red[(2 * N + 1 < OCTO_SUMS(P) ? 2 * N + 1 : OCTO_SUMS(P)) * P];
	long b = blockIdx.x / NH;
	int h = (int)(blockIdx.x % NH), p = threadIdx.x, g = h / (NH / G), ch = h * P + p;
	if (b >= mbs) return;
	float dS[N], A[N], St[OCTO_CHUNK + 1][N], dAl[N], dDl = 0.f, sums[2 * N + 1];
	for (int n = 0; n < N; n++) {
		dS[n] = 0.f;
		dAl[n] = 0.f;
		A[n] = -expf(ld(Alog[A1 ? ch * N + n : h]));
	}
	for (int c = NC - 1; c >= 0; c--) {
		int s0 = c * OCTO_CHUNK, s1 = s0 + OCTO_CHUNK < SEQ ? s0 + OCTO_CHUNK : SEQ;
		for (int n = 0; n < N; n++) St[0][n] = chunks[((((b * NH + h) * NC) + c) * P + p) * N + n];
		for (int s = s0; s < s1; s++) {
			long t = b * SEQ + s;
			float d = dt[t * NH + h], xv = ld(x[t * LX + ch]);
			for (int n = 0; n < N; n++)
				St[s - s0 + 1][n] = expf(d * A[n]) * St[s - s0][n] + d * xv * ld(Bm[t * LBC + g * N + n]);
		}
		for (int s = s1 - 1; s >= s0; s--) {
			long t = b * SEQ + s;
			float d = dt[t * NH + h], xv = ld(x[t * LX + ch]), dy = ld(dys[t * (NH * P) + ch]);
			float dxv = 0.f, dd = 0.f;
			for (int n = 0; n < N; n++) dS[n] += dy * ld(Cm[t * LBC + g * N + n]);
			for (int n = 0; n < N; n++) {
				float Bv = ld(Bm[t * LBC + g * N + n]), a = expf(d * A[n]);
				float q = dS[n] * St[s - s0][n];
				dxv += dS[n] * Bv;
				dd += dS[n] * xv * Bv + q * a * A[n];
				dAl[n] += q * a * d;
			}
			dx[t * LX + ch] = d * dxv + ld(D[A1 ? ch : h]) * dy;
			dDl += dy * xv;
			/* per-n reductions over the P channels of the head: dC, dB, and ddt */
			for (int n = 0; n < N; n++) {
				sums[2 * n] = St[s - s0 + 1][n] * dy;
				sums[2 * n + 1] = d * dS[n] * xv;
			}
			sums[2 * N] = dd;
			head_sums_all<P>(red, p, sums, 2 * N + 1);
			if (p == 0) {
				for (int n = 0; n < N; n++)
					dcp[(t * NH + h) * N + n] = sums[2 * n], dbp[(t * NH + h) * N + n] = sums[2 * n + 1];
				ddt[t * NH + h] = sums[2 * N];
			}
			for (int n = 0; n < N; n++) dS[n] *= expf(d * A[n]);
		}
	}
	/* dA, dD: per channel (A1) or summed over the head's channels; W adds them. */
	if (A1) {
		for (int n = 0; n < N; n++) dA[(b * NH * P + ch) * N + n] = dAl[n];
		dD[b * NH * P + ch] = dDl;
		return;
	}
	for (int n = 0; n < N; n++) sums[n] = dAl[n];
	sums[N] = dDl;
	head_sums_all<P>(red, p, sums, N + 1);
	if (p == 0) {
		for (int n = 0; n < N; n++) dA[(b * NH + h) * N + n] = sums[n];
		dD[b * NH + h] = sums[N];
	}
}

/* dB, dC of group g = sum over its heads, ascending, into dst at stride LBC. */
template <int NH, int G, int N, int LBC>
__device__ void scan_reduce(const float *part, real *dst, long rows)
{
	EACH(i, rows * G * N) {
		long t = i / (G * N);
		int g = (int)(i / N % G), n = (int)(i % N);
		float s = 0.f;
		for (int h = g * (NH / G); h < (g + 1) * (NH / G); h++) s += part[(t * NH + h) * N + n];
		dst[t * LBC + g * N + n] = st(s);
	}
}

/* ---- Mamba-2 as the chunked SSD (state-space duality) ----
 * Mamba-2's scan (A a scalar per head) on the device, in chunks of Q steps
 * (Q = SSD_Q, RT_SSD_CHUNK; NQ chunks per sequence, the last one padded
 * with zeros: its padded steps have dt 0, so they decay nothing and add
 * nothing).  Per chunk (bc = b NQ + c) and head h of group g, with
 * l_s = sum_{k <= s} dt_k A the decay's cumulative log within the chunk:
 *   y_s    = sum_{r <= s} (C_s.B_r) e^{l_s - l_r} dt_r x_r      intra-chunk
 *          + e^{l_s} H_c C_s + D x_s                             the state entering
 *   H_{c+1} = e^{l_end} H_c + sum_r e^{l_end - l_r} dt_r x_r B_r^T
 * The matrix products (C B^T per group, the masked M per head times x, the
 * chunk states X_w^T B, C H^T and their backward) are f32 batched GEMMs of
 * the runtime (dev_mamba.c); the kernels here are the elementwise parts
 * between them, the short sequential loop over chunks, and the gradients of
 * the decay.  Padded f32 layouts: xq, yq [BC][Q][MH P]; bq, cq [BC][Q][G N];
 * dtq, lq [BC][MH][Q]; cb [BC][G][Q][Q]; m [BC][MH][Q][Q]; states
 * [BC][MH][P][N].  Every sum runs in a fixed order. */

/* The W columns of rows at stride LD into the padded chunks [BC][Q][W]. */
template <int SEQ, int Q, int NQ, int W, int LD>
__device__ void ssd_pack(const real *src, float *dst, int mbs)
{
	EACH(i, (long)mbs * NQ * Q * W) {
		long r = i / W, bc = r / Q;
		int s = (int)(bc % NQ) * Q + (int)(r % Q);
		dst[i] = s < SEQ ? ld(src[(bc / NQ * SEQ + s) * LD + i % W]) : 0.f;
	}
}

/* dt padded and l, one thread per (chunk, head). */
template <int SEQ, int Q, int NQ, int MH>
__device__ void ssd_cum(const float *dt, const real *Alog, float *dtq, float *lq, int mbs)
{
	EACH(i, (long)mbs * NQ * MH) {
		int h = (int)(i % MH);
		long bc = i / MH;
		int s0 = (int)(bc % NQ) * Q;
		float A = -expf(ld(Alog[h])), l = 0.f;
		for (int s = 0; s < Q; s++) {
			float d = s0 + s < SEQ ? dt[(bc / NQ * SEQ + s0 + s) * MH + h] : 0.f;
			l += d * A;
			dtq[i * Q + s] = d;
			lq[i * Q + s] = l;
		}
	}
}

/* The decay from step r to step s of a chunk, times dt_r (r <= s). */
__device__ __forceinline__ float ssd_decay(const float *l, const float *dt, int s, int r)
{
	return expf(l[s] - l[r]) * dt[r];
}

/* F: M_h = (C B^T)_g masked: M[s][r] = cb[s][r] e^{l_s - l_r} dt_r, r <= s. */
template <int Q, int MH, int G>
__device__ void ssd_mask(const float *cb, const float *dtq, const float *lq, float *m, long nbc)
{
	EACH(i, nbc * MH * Q * Q) {
		int r = (int)(i % Q), s = (int)(i / Q % Q);
		long bh = i / (Q * Q), bc = bh / MH;
		int g = (int)(bh % MH) / (MH / G);
		m[i] = r <= s ? cb[((bc * G + g) * Q + s) * Q + r] * ssd_decay(lq + bh * Q, dtq + bh * Q, s, r)
		              : 0.f;
	}
}

/* Rows of [BC][Q][MH P] scaled per (step, head): MODE 0 by e^{l_s} (dy's
 * weight for the state entering), 1 by e^{l_end - l_s} dt_s (x's weight in
 * the state leaving). */
template <int Q, int MH, int P, int MODE>
__device__ void ssd_scale(const float *in, const float *dtq, const float *lq, float *out, long nbc)
{
	EACH(i, nbc * Q * MH * P) {
		int h = (int)(i / P % MH), s = (int)(i / (MH * P) % Q);
		long bh = i / ((long)Q * MH * P) * MH + h;
		const float *l = lq + bh * Q;
		out[i] = (MODE == 0 ? expf(l[s]) : ssd_decay(l, dtq + bh * Q, Q - 1, s)) * in[i];
	}
}

/* F: the states entering each chunk, in place: slot c > 0 holds chunk
 * c-1's own contribution (X_w^T B) and becomes H_c = e^{l_end} H_{c-1} +
 * it; slot 0 becomes 0.  One thread per (sequence, head, p, n). */
template <int Q, int NQ, int MH, int P, int N>
__device__ void ssd_chunks(const float *lq, float *ck, int mbs)
{
	const long HPN = (long)MH * P * N;
	EACH(i, mbs * HPN) {
		long b = i / HPN, e = i % HPN;
		int h = (int)(e / (P * N));
		float H = 0.f;
		for (int c = 0; c < NQ; c++) {
			float *slot = ck + (b * NQ + c) * HPN + e;
			if (c > 0)
				H = expf(lq[((b * NQ + c - 1) * MH + h) * Q + Q - 1]) * H + *slot;
			*slot = H;
		}
	}
}

/* F: ys = yq (intra) + e^{l_s} yo (C H^T) + D x, back to [T][MH P]. */
template <int SEQ, int Q, int NQ, int MH, int P, int LX>
__device__ void ssd_out(const float *yq, const float *yo, const float *lq, const real *x,
                        const real *D, real *ys, int mbs)
{
	EACH(i, (long)mbs * SEQ * MH * P) {
		int ch = (int)(i % (MH * P)), h = ch / P;
		long t = i / (MH * P);
		int s = (int)(t % SEQ);
		long bc = t / SEQ * NQ + s / Q, k = (bc * Q + s % Q) * (MH * P) + ch;
		float y = yq[k] + expf(lq[(bc * MH + h) * Q + s % Q]) * yo[k];
		ys[i] = st(y + ld(D[h]) * ld(x[t * LX + ch]));
	}
}

/* B: the gradient of each chunk's leaving state, in place: e holds
 * dHin_c = sum_s e^{l_s} dy_s C_s^T and becomes E_c = dL/dH_{c+1};
 * dL/dH_c = dHin_c + e^{l_end} E_c carries to chunk c-1. */
template <int Q, int NQ, int MH, int P, int N>
__device__ void ssd_chunks_b(const float *lq, float *e, int mbs)
{
	const long HPN = (long)MH * P * N;
	EACH(i, mbs * HPN) {
		long b = i / HPN, j = i % HPN;
		int h = (int)(j / (P * N));
		float E = 0.f;
		for (int c = NQ - 1; c >= 0; c--) {
			float *slot = e + (b * NQ + c) * HPN + j, din = *slot;
			*slot = E;
			E = din + expf(lq[((b * NQ + c) * MH + h) * Q + Q - 1]) * E;
		}
	}
}

/* B, per (chunk, group, s, r): the gradient of C B^T, summed over the
 * group's heads (ascending): dcbg[s][r] = sum_h dcb_h[s][r] e^{l_s - l_r} dt_r,
 * r <= s. */
template <int Q, int MH, int G>
__device__ void ssd_mask_b(const float *dtq, const float *lq, const float *dcb, float *dcbg,
                           long nbc)
{
	EACH(i, nbc * G * Q * Q) {
		int r = (int)(i % Q), s = (int)(i / Q % Q);
		long bc = i / ((long)G * Q * Q);
		int g = (int)(i / (Q * Q) % G);
		float acc = 0.f;
		for (int h = g * (MH / G); h < (g + 1) * (MH / G) && r <= s; h++) {
			long bh = bc * MH + h;
			acc += dcb[(bh * Q + s) * Q + r] * ssd_decay(lq + bh * Q, dtq + bh * Q, s, r);
		}
		dcbg[i] = acc;
	}
}

/* B, per (chunk, head): ddt (direct, and through the decay), this chunk's
 * part of dA (dL/dA) and dD.  The decay's terms: T[s][r] = dcb[s][r]
 * M[s][r] (intra-chunk, through l_s - l_r = a_{r+1} + ... + a_s), U_s =
 * e^{l_s} dy_s . yo_s (the state entering, yo = C H^T, through l_s), V_r =
 * dt_r e^{l_end - l_r} x_r . z_r (the state leaving, z = B E^T, through
 * l_end - l_r) and e^{l_end} <E, H> (through l_end).  So, a_k = dt_k A:
 *   da_k = sum_{s >= k, r < k} T[s][r] + sum_{s >= k} U_s + sum_{r < k} V_r
 *        + e^{l_end} <E, H>,
 * each a sum of terms (not a difference of prefix sums, which would cancel
 * the diagonal's large T[s][s] and lose digits); ddt_k = (the direct
 * terms) + da_k A, dA += da_k dt_k.  dcb is overwritten with T. */
template <int SEQ, int Q, int NQ, int MH, int P, int G, int N>
__device__ void ssd_dt_b(const float *cb, float *dcb, const float *dtq, const float *lq,
                         const float *xq, const float *dyq, const float *yo, const float *zq,
                         const float *E, const float *ck, const real *Alog, float *ddt, float *dap,
                         float *ddp, int mbs)
{
	EACH(i, (long)mbs * NQ * MH) {
		int h = (int)(i % MH), g = h / (MH / G);
		long bc = i / MH;
		int s0 = (int)(bc % NQ) * Q;
		const float *l = lq + i * Q, *dt = dtq + i * Q, *cbg = cb + (bc * G + g) * Q * Q;
		float *T = dcb + i * Q * Q;
		float A = -expf(ld(Alog[h])), dq[Q], U[Q], V[Q], col[Q], ve = 0.f, dd = 0.f;
		for (int r = 0; r < Q; r++) {
			dq[r] = 0.f;
			for (int s = r; s < Q; s++) {
				float u = T[s * Q + r] * cbg[s * Q + r] * expf(l[s] - l[r]);
				dq[r] += u;
				T[s * Q + r] = u * dt[r];
			}
		}
		for (int s = 0; s < Q; s++) {
			const long k = (bc * Q + s) * (MH * P) + h * P;
			float uy = 0.f, xz = 0.f;
			for (int p = 0; p < P; p++) {
				uy += dyq[k + p] * yo[k + p];
				xz += xq[k + p] * zq[k + p];
				dd += dyq[k + p] * xq[k + p];
			}
			float q = expf(l[Q - 1] - l[s]) * xz;
			U[s] = expf(l[s]) * uy;
			V[s] = q * dt[s];
			dq[s] += q;
		}
		const float *Ei = E + i * (long)(P * N), *Hi = ck + i * (long)(P * N);
		for (int k = 0; k < P * N; k++)
			ve += Ei[k] * Hi[k];
		ve *= expf(l[Q - 1]);
		/* vp[k] = sum_{r < k} V_r; then k descending: col[r] = sum_{s >= k}
		 * T[s][r] (so the rectangle is sum_{r < k} col[r]), su = sum_{s >= k} U_s. */
		float vp[Q + 1];
		vp[0] = 0.f;
		for (int r = 0; r < Q; r++)
			vp[r + 1] = vp[r] + V[r];
		for (int r = 0; r < Q; r++)
			col[r] = 0.f;
		float su = 0.f, dA = 0.f;
		for (int k = Q - 1; k >= 0; k--) {
			float rect = 0.f;
			for (int r = 0; r < k; r++) {
				col[r] += T[k * Q + r];
				rect += col[r];
			}
			su += U[k];
			float da = rect + su + vp[k] + ve;
			dA += da * dt[k];
			if (s0 + k < SEQ)
				ddt[(bc / NQ * SEQ + s0 + k) * MH + h] = dq[k] + da * A;
		}
		dap[i] = dA;
		ddp[i] = dd;
	}
}

/* B: dx = yq (M^T dy) + e^{l_end - l_r} dt_r z + D dy, dB, dC, into dxbc
 * [T][LX] (x | B | C). */
template <int SEQ, int Q, int NQ, int MH, int P, int G, int N, int LX>
__device__ void ssd_dx(const float *yq, const float *zq, const float *dtq, const float *lq,
                       const real *dys, const real *D, const float *dbq, const float *dcq,
                       real *dxbc, int mbs)
{
	const int W = MH * P + 2 * G * N;
	EACH(i, (long)mbs * SEQ * W) {
		int j = (int)(i % W);
		long t = i / W;
		int s = (int)(t % SEQ), q = s % Q;
		long bc = t / SEQ * NQ + s / Q;
		float v;
		if (j < MH * P) {
			long bh = bc * MH + j / P, k = (bc * Q + q) * (MH * P) + j;
			v = yq[k] + ssd_decay(lq + bh * Q, dtq + bh * Q, Q - 1, q) * zq[k] +
			    ld(D[j / P]) * ld(dys[t * (MH * P) + j]);
		} else if (j < MH * P + G * N) {
			v = dbq[(bc * Q + q) * (G * N) + j - MH * P];
		} else {
			v = dcq[(bc * Q + q) * (G * N) + j - MH * P - G * N];
		}
		dxbc[t * LX + j] = st(v);
	}
}

/* B: dA (dL/dA, in n = 0 of the [MH][N] layout W reads) and dD per
 * (sequence, head), chunks ascending. */
template <int NQ, int MH, int N>
__device__ void ssd_ad(const float *dap, const float *ddp, float *dA, float *dD, int mbs)
{
	EACH(i, (long)mbs * MH) {
		long b = i / MH;
		int h = (int)(i % MH);
		float sa = 0.f, sd = 0.f;
		for (int c = 0; c < NQ; c++) {
			sa += dap[(b * NQ + c) * MH + h];
			sd += ddp[(b * NQ + c) * MH + h];
		}
		for (int n = 0; n < N; n++)
			dA[i * N + n] = n ? 0.f : sa;
		dD[i] = sd;
	}
}

/* Mamba-2 gate and gated RMSNorm (group size W/G): yg = ys silu(z),
 * yhat = yg r_g, yn = yhat norm_gated.  Row kernel over one (row, group). */
template <int W, int G, int LZ>
__device__ void gated_norm_f(const real *ys, const real *z, const real *ng, real *yhat, float *rg, real *yn)
{
	const int GW = W / G;
	long t = blockIdx.x / G;
	int g = (int)(blockIdx.x % G);
	float s = 0.f;
	for (int j = threadIdx.x; j < GW; j += OCTO_ROW) {
		int c = g * GW + j;
		float v = ld(ys[t * W + c]) * silu(ld(z[t * LZ + c]));
		s += v * v;
	}
	float r = rsqrtf(block_sum(s) / GW + 1e-5f);
	if (threadIdx.x == 0) rg[t * G + g] = r;
	for (int j = threadIdx.x; j < GW; j += OCTO_ROW) {
		int c = g * GW + j;
		float v = ld(ys[t * W + c]) * silu(ld(z[t * LZ + c])) * r;
		yhat[t * W + c] = st(v);
		yn[t * W + c] = st(v * ld(ng[c]));
	}
}

/* B: dyg = RMSNorm_B(dyn ng) per group; dys = dyg silu(z); dz = dyg ys silu'(z). */
template <int W, int G, int LZ>
__device__ void gated_norm_b(const real *dyn, const real *ng, const real *yhat, const float *rg,
                             const real *ys, const real *z, real *dys, real *dz)
{
	const int GW = W / G;
	long t = blockIdx.x / G;
	int g = (int)(blockIdx.x % G);
	float s = 0.f;
	for (int j = threadIdx.x; j < GW; j += OCTO_ROW) {
		int c = g * GW + j;
		s += ld(dyn[t * W + c]) * ld(ng[c]) * ld(yhat[t * W + c]);
	}
	float mean = block_sum(s) / GW, r = rg[t * G + g];
	for (int j = threadIdx.x; j < GW; j += OCTO_ROW) {
		int c = g * GW + j;
		float dyg = r * (ld(dyn[t * W + c]) * ld(ng[c]) - ld(yhat[t * W + c]) * mean);
		float zv = ld(z[t * LZ + c]);
		dys[t * W + c] = st(dyg * silu(zv));
		dz[t * LZ + c] = st(dyg * ld(ys[t * W + c]) * dsilu(zv));
	}
}

/* Mamba-1 gate: yg = ys silu(z) (F); dys, dz (B). */
template <int W, int LZ>
__device__ void gate_f(const real *ys, const real *z, real *yg, long rows)
{
	EACH(i, rows * W) yg[i] = st(ld(ys[i]) * silu(ld(z[(i / W) * LZ + i % W])));
}

template <int W, int LZ>
__device__ void gate_b(const real *dyg, const real *ys, const real *z, real *dys, real *dz, long rows)
{
	EACH(i, rows * W) {
		float zv = ld(z[(i / W) * LZ + i % W]), d = ld(dyg[i]);
		dys[i] = st(d * silu(zv));
		dz[(i / W) * LZ + i % W] = st(d * ld(ys[i]) * dsilu(zv));
	}
}

/* W: dA_log += (dA summed over micro-batch sequences and, Mamba-2, n) A;
 * dD += dD.  Per sequence: NA*PERN partials of dA, NS of dD (one per head). */
template <int NA, int NS, int PERN>
__device__ void alog_w(const float *dA, const float *dDp, const real *Alog, float *dAlog, float *dDg, int mbs)
{
	EACH(i, NA) {
		float A = -expf(ld(Alog[i])), s = 0.f, sd = 0.f;
		for (int b = 0; b < mbs; b++) {
			for (int n = 0; n < PERN; n++) s += dA[((long)b * NA + i) * PERN + n];
			if (i < NS) sd += dDp[(long)b * NS + i];
		}
		dAlog[i] += s * A;
		if (i < NS) dDg[i] += sd;
	}
}

/* ---- the optimizer ---- */

/* AdamW (sgd 0) or SGD on n elements of a tensor, as the runtime's
 * adamw() (runtime/rt_model.c) in the same f32 operations, so the result is
 * the host's bit for bit (no contraction: --fmad=false): the f32 master p32
 * updated, p (the storage type) rounded from it. */
__device__ void adamw(float *p32, real *p, const float *g, float *m, float *v, long n, float lr,
                      float step_size, float b1, float b2, float c1, float c2, float eps,
                      float bc2_sqrt, float keep, int sgd)
{
	EACH(i, n) {
		float x;
		if (sgd) {
			x = p32[i] * keep - lr * g[i];
		} else {
			m[i] = b1 * m[i] + c1 * g[i];
			v[i] = b2 * v[i] + c2 * (g[i] * g[i]);
			float denom = sqrtf(v[i]) / bc2_sqrt + eps;
			x = p32[i] * keep - step_size * (m[i] / denom);
		}
		p32[i] = x;
		p[i] = st(x);
	}
}

/* p (the storage type) rounded from the master p32, as adamw() rounds it. */
__device__ void store_params(const float *p32, real *p, long n)
{
	EACH(i, n) p[i] = st(p32[i]);
}

/* Clipping's scale of n gradients: the host's g *= s (runtime/rt_sched.c). */
__device__ void scale_grads(float *g, long n, float s)
{
	EACH(i, n) g[i] *= s;
}

/* A sum of GEMMs accumulated in f32, rounded once into the storage type:
 * dst = acc, or dst + acc with add (runtime/dev's dev_acc_end). */
__device__ void store_acc(const float *acc, real *dst, long n, int add)
{
	EACH(i, n) dst[i] = st(add ? ld(dst[i]) + acc[i] : acc[i]);
}
