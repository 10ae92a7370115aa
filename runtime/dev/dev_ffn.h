/* dev_ffn.h: the feed-forward block on the device, which the mlp and the
 * moe (its experts and its shared MLP) share (dev_mlp.c; kernels_ffn.inc's
 * ffn_fwd, ffn_bwd, ffn_w).  Private to the device executor.
 *
 * A block on n rows of X [n][H] with weights w1 [H][F] (gate, or up when
 * the activation is plain), wu [H][F] (gated kinds, else NULL), wd [F][H]:
 *   F: a = X w1, b = X wu, h = f(a) (* b), Y = beta Y + h wd;
 *   B: dh = dY wd^T (into da), da = dh (b) f'(a), db = dh f(a), h again,
 *      dX = beta dX + da w1^T + db wu^T, dX in f32 (an accumulator:
 *      dev_acc_begin, or the moe's experts' rows, which its scatter
 *      rounds once);
 *   W: dwd += h^T dY, dw1 += X^T da, dwu += X^T db.
 * The activations run on L's module ("%s_F_act", "%s_B_act") over m
 * elements at once, so that the moe runs them once over all its experts'
 * rows, between its grouped GEMMs. */
#ifndef OCTO_RT_DEV_FFN_H
#define OCTO_RT_DEV_FFN_H

#include "dev.h"

typedef struct dev_ffn {
	int64_t F;                /* width */
	const void *w1, *wu, *wd; /* wu NULL for a plain activation */
} dev_ffn;

/* Where a block's f32 weight gradients are (wu NULL for a plain activation). */
typedef struct dev_ffn_grad {
	float *w1, *wu, *wd;
} dev_ffn_grad;

/* The whole block (mlp, the shared experts). */
int dev_ffn_f(rt_dev *d, const dev_layer *L, int64_t n, const dev_ffn *w, const void *X, void *a,
              void *b, void *h, float beta, void *Y);
int dev_ffn_b(rt_dev *d, const dev_layer *L, int64_t n, const dev_ffn *w, const void *dY,
              const void *a, const void *b, void *h, void *da, void *db, float beta, float *dX);
int dev_ffn_w(rt_dev *d, const dev_layer *L, int64_t n, const dev_ffn *w, const void *X,
              const void *dY, const void *h, const void *da, const void *db, const dev_ffn_grad *g);

/* The activations alone, for the experts (whose products are dev_moe.c's
 * grouped GEMMs): once over all their rows. */
int dev_ffn_act_f(rt_dev *d, const dev_layer *L, int64_t m, const void *a, const void *b, void *h);
int dev_ffn_act_b(rt_dev *d, const dev_layer *L, int64_t m, const void *a, const void *b, void *h,
                  void *da, void *db);

#endif
