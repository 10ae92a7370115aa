/* dev_mix.h: the mixers of the device's attention and Mamba layers, for the
 * layers that put them on a pre-norm of their own: the attention and
 * mamba layers (dev_attn.c, dev_mamba.c) one each, the parallel layer
 * (dev_par.c) both on one, as kernels_par.inc does on the CPU.  Private.
 *
 * A mixer reads u, the normalised input (the layer's scratch), and adds
 * its output projection to y (which holds x); its B reads dy from the W
 * stash and adds its terms of du, the gradient of u, to du's f32
 * accumulator, which the layer owns (dev_acc_begin, dev_acc_end: a sum of
 * GEMMs rounded once into a bf16 du, the parallel layer's two mixers'
 * too; the Mamba layer's one GEMM writes du itself); its W
 * reads u made again.  The pre-norm's buffers (xhat, r, the W stash's
 * xhat, du, dy, the scratch's u) belong to the layer: the map functions
 * carve them only when `norm`, else the caller sets the pointers.  Entry
 * points are named by the mixer ("attention_F_core", "mamba_F_ssd_pack"), the
 * layer's module holds them. */
#ifndef OCTO_RT_DEV_MIX_H
#define OCTO_RT_DEV_MIX_H

#include "dev.h"

/* ---- attention (dev_attn.c) -------------------------------------------- */

typedef struct dev_attn_act {
	void *xhat, *q, *k, *v, *o, *cqhat, *ckvhat, *qhat, *khat;
	float *r, *lse, *cqr, *ckvr, *qr, *kr;
} dev_attn_act;

typedef struct dev_attn_ws {
	void *xhat, *du, *dy, *o, *dq, *dk, *dv;
	void *cqhat, *dcqn, *dcq, *ckvhat, *dkv, *dckvn, *dc; /* MLA */
	void *dqn, *dkn, *qhat, *khat;                        /* qk_norm */
} dev_attn_ws;

typedef struct dev_attn_scr {
	void *u, *cq, *cqn, *c, *ckvn, *kv, *d_o;
	float *dsum;
	float *rcs, *rsn; /* the rotation's cos, sin [seq][rope_len/2] (attention_F_ropetab) */
	float *du32; /* bf16, with the norm: du's f32 accumulator (dev_acc_begin) */
} dev_attn_scr;

void dev_attn_map(const rt_shape *s, size_t esz, bool norm, dev_carve *ca, dev_attn_act *a,
                  dev_carve *cw, dev_attn_ws *w, dev_carve *cs, dev_attn_scr *x);
int dev_attn_mix_f(rt_dev *d, const dev_layer *L, dev_attn_act *a, dev_attn_scr *x, void *y);
int dev_attn_mix_b(rt_dev *d, const dev_layer *L, float b0, float *acc, dev_attn_act *a,
                   dev_attn_ws *w, dev_attn_scr *x);
int dev_attn_mix_w(rt_dev *d, const dev_layer *L, dev_attn_ws *w, dev_attn_scr *x);

/* ---- Mamba (dev_mamba.c); L's tensors in the MB_* slots ------------------ */

/* F -> B.  zx: in_proj's output, [z | x B C | dt] (v2) or [x | z] (v1);
 * cv the convolution before SiLU, xc after; v = dt's pre-activation. */
typedef struct dev_mb_act {
	void *xhat;
	float *r;
	void *zx, *cv, *xc, *v;
	float *dt; /* softplus(v) in f32 even in bf16: it scales A in exp(dt A) */
	float *ck; /* the state entering each chunk (none under selective): v2
	            * [nb][nq][mh][P][N] (RT_SSD_CHUNK steps), v1 [nb][mh][nck][P][N] */
	void *ys;
	void *yhat; /* v2: the gated norm's output before its scale */
	float *gr;  /* v2: its 1/rms per (row, group) */
	void *xdbl; /* v1: x_proj's output [dt_low | B | C] */
} dev_mb_act;

/* B -> W. */
typedef struct dev_mb_ws {
	void *xhat, *du, *dy;
	void *yo;   /* out_proj's input before the gated norm's scale (v2: yhat; v1: the gated y) */
	void *dyn;  /* v2: the gradient of the gated norm's output */
	void *dzx;  /* the gradient of in_proj's output */
	void *xpre; /* the convolution's input, packed [T][cd] */
	void *dcv;
	float *dA; /* [nb][mh][N] (v1: mh = di channels) */
	float *dD; /* [nb][mh] */
	void *xc, *xdbl, *dxdbl, *dv; /* v1: x_proj's and dt_proj's inputs and output gradients */
} dev_mb_ws;

/* Mamba-2's chunked SSD (dev_mamba.c, cuda_lib.cu's ssd_*), f32, in
 * chunks of Q = RT_SSD_CHUNK steps, nbc = nb nq of them, each padded to Q
 * rows.  F uses the first nine; B all but m. */
typedef struct dev_ssd {
	float *xq, *bq, *cq; /* x [nbc][Q][di], B and C [nbc][Q][G N] */
	float *dtq, *lq;     /* dt and l = the cumulative dt A [nbc][mh][Q] */
	float *cb;           /* C B^T [nbc][G][Q][Q] */
	float *m;            /* F: cb masked by the decay, per head [nbc][mh][Q][Q] (B: in dcb) */
	float *yq, *wq;      /* [nbc][Q][di]: F y (intra-chunk), x's weighted and C H^T;
	                      * B C H^T then M^T dy, dy's and x's weighted */
	float *dyq, *e, *zq; /* B: dy; the chunk states' gradients [nbc][mh][P][N]; B E^T */
	float *dcb, *dcbg;   /* B: dy x^T per head (then the decay's terms, then M), and
	                      * the gradient of cb */
	float *dbq, *dcq;    /* B: dB, dC [nbc][Q][G N] */
	float *dap, *ddp;    /* B: each chunk's dA, dD [nbc][mh] */
} dev_ssd;

/* Scratch: u, yn in F and W; the rest in B, over the same bytes. */
typedef struct dev_mb_scr {
	void *u, *yn;
	void *dyg, *dys, *dxbc;
	float *dx32;      /* v1, bf16: the scan's dx and x_proj's summed [T][di], rounded
	                   * once into dxbc (dev_acc_begin) */
	float *dbp, *dcp; /* v1: the scan's dB, dC per channel [T][mh][N], before scan_reduce */
	float *ddt;       /* [T][mh] */
	float *ck;        /* selective: the chunk states, F's and B's again */
	dev_ssd qf, qb;   /* v2: F's (beside u, yn) and B's */
} dev_mb_scr;

void dev_mb_map(const rt_shape *s, size_t esz, bool norm, dev_carve *ca, dev_mb_act *a,
                dev_carve *cw, dev_mb_ws *w, dev_carve *cs, dev_mb_scr *x);
int dev_mb_mix_f(rt_dev *d, const dev_layer *L, dev_mb_act *a, dev_mb_scr *x, void *y);
int dev_mb_mix_b(rt_dev *d, const dev_layer *L, float *acc, dev_mb_act *a, dev_mb_ws *w,
                 dev_mb_scr *x);
int dev_mb_mix_w(rt_dev *d, const dev_layer *L, dev_mb_ws *w, dev_mb_scr *x);

#endif
