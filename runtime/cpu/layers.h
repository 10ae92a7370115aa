/* layers.h: what the f32 and f64 kernel builds share and that does not
 * depend on the element type: a descriptor's derived shape (defaults
 * filled, validated), the parameter layout of every kind, the init rule of
 * every tensor.  Internal to the runtime. */
#ifndef OCTO_RT_LAYERS_H
#define OCTO_RT_LAYERS_H

#include <stdbool.h>
#include <stdint.h>

#include "octo_kernels.h"

#define RT_NORM_EPS 1e-5
#define RT_ROPE_THETA 10000.0
#define RT_SCAN_CHUNK 16 /* scan steps between stashed states (Mamba, the CPU kernels) */
/* The device's Mamba-2 as the chunked SSD (runtime/dev/dev_mamba.c, docs/cuda.md):
 * steps per chunk, the intra-chunk products Q x Q.  The device modules bake it
 * in as SSD_Q. */
#define RT_SSD_CHUNK 64
/* The device's column sums over rows (W's norm scales, biases, convolution
 * weights: runtime/dev, docs/cuda.md): rows per chunk of the first stage,
 * whose partials the second sums in order.  The modules bake it in as COLCH. */
#define RT_COL_CHUNK 64

/* A descriptor with its defaults filled in and its derived sizes. */
typedef struct rt_shape {
	rt_kind kind;
	int64_t H, S, nb, T, V; /* hidden, seq, sequences, tokens (nb*S), vocab */
	bool tied;              /* head: its weight is the embedding's table [V][H] */

	/* attention (and a parallel layer's); GQA is MLA-less: dqk = dv = head_dim, rope over the whole head */
	bool mla;
	int64_t nh, nkv, dqk, dv, win;
	int64_t dn, dr, rq, rkv; /* MLA: nope dim, rope dim, q and kv ranks */
	int64_t rope_off, rope_len; /* the rotated part of each q/k head */
	double theta;               /* the RoPE base (rope_theta, default filled) */
	/* RoPE scaling (rt_layer_desc's rope_*, defaults filled): rt__rope_freq
	 * reads them */
	int rope_type;                   /* rt_rope_type */
	double rope_factor, rope_lo, rope_hi, rope_fast, rope_slow;
	int64_t rope_orig;
	double rope_mscale; /* cos and sin of RoPE are multiplied by it (YaRN's attention
	                     * factor; 1 otherwise) */
	double qk_scale;    /* the scores' 1/sqrt(dqk) is multiplied by it (DeepSeek's
	                     * mscale(factor, mscale_all_dim)^2; 1 otherwise) */
	bool qkb, qkn;              /* GQA: q, k, v biases; per-head q, k RMSNorm */

	/* mlp (F = ffn) and moe (F = expert_ffn) */
	rt_act act;
	bool gated;
	int64_t F, E, K, SF; /* SF: shared experts x expert_ffn */
	bool sgate;          /* moe: the shared experts' sigmoid gate (shared_gate) */

	/* mamba (and a parallel layer's mixer) */
	int ver;
	int64_t di, mh, P, G, N, Kc, R; /* inner, heads, head dim, groups, state, conv, dt rank */
	int64_t cd, dip, nck;           /* conv channels, in_proj width, chunks per sequence */
	int64_t nq;                     /* RT_SSD_CHUNK chunks per sequence (the device's Mamba-2) */
	bool sel; /* rt_layer_desc.selective: the chunk states in the scratch, made again in B */
} rt_shape;

int rt__shape(const rt_layer_desc *d, rt_shape *s);

/* The inverse frequency of pair i (0 <= i < rope_len / 2) of an attention
 * layer's RoPE, scaling applied, in double (docs/layers.md): angle
 * pos x it.  The one definition: the CPU kernels' tables and the device
 * modules' constants are both made from it. */
double rt__rope_freq(const rt_shape *s, int64_t i);

/* The kind's name as the YAML spells it (RT_KINDS): messages, and the
 * device's entry points' prefix. */
const char *rt__kind_name(rt_kind k);

/* Parameter tensors: fixed slots per kind; an absent tensor has size 0. */
enum { EMB_TABLE, EMB_N };
enum { HD_NORM, HD_W, HD_N };
enum {
	AT_NORM, AT_WQ, AT_BQ, AT_WDQ, AT_QNORM, AT_WUQ, AT_WK, AT_BK, AT_WV, AT_BV, AT_QHNORM,
	AT_KHNORM, AT_WDKV, AT_KVNORM, AT_WUKV, AT_WO, AT_N
};
enum { FF_NORM, FF_W1, FF_WU, FF_WD, FF_N }; /* W1: gate (gated) or up (plain) */
enum {
	MOE_NORM, MOE_ROUTER, MOE_W1, MOE_WU, MOE_WD, MOE_SW1, MOE_SWU, MOE_SWD, MOE_SGATE, MOE_N
};
enum {
	MB_NORM, MB_WIN, MB_CONVW, MB_CONVB, MB_XPROJ, MB_DTPROJ, MB_DTBIAS, MB_ALOG, MB_D,
	MB_GNORM, MB_WOUT, MB_N
};
/* A parallel layer: the attention's slots (AT_NORM the shared norm), then
 * the mixer's from PAR_MB on (its MB_NORM empty). */
enum { PAR_MB = AT_N, PAR_N = AT_N + MB_N };
#define RT_MAX_TENSORS 32

typedef enum rt_init_rule {
	INIT_ONES,
	INIT_ZEROS,
	INIT_NORMAL,  /* N(0, 1/fan_in), fan_in = dim[ndim-2] */
	INIT_CONV,    /* N(0, 1/width): a depthwise filter [channels][width] */
	INIT_EMBED,   /* N(0, 1) */
	INIT_TIED,    /* a tied head's table: layer 0's (the embedding's) INIT_EMBED values */
	INIT_DT_BIAS, /* softplus^-1 of a log-uniform dt in [1e-3, 1e-1] */
	INIT_ALOG_U,  /* log of U[1, 16] (Mamba-2) */
	INIT_ALOG_N,  /* log(n + 1) along the last dim (Mamba-1) */
} rt_init_rule;

typedef struct rt_tensor {
	const char *name;
	int ndim;
	int64_t dim[3];
	int64_t size, offset; /* floats */
	rt_init_rule init;
	bool decay; /* the optimizer's weight decay applies (docs/layers.md) */
} rt_tensor;

/* Fills t[0..n) for the kind's slots (n returned through *n) and returns
 * the total parameter count. */
int64_t rt__tensors(const rt_shape *s, rt_tensor *t, int *n);

/* The initial value of element i of tensor t, whose first element sits at
 * t->offset in the layer's array. */
double rt__init_value(const rt_tensor *t, uint64_t seed, int64_t layer, int64_t i);

#endif
