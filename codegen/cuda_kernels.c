/* cuda_kernels.c: the CUDA target's kernels: per layer kind and shape, CUDA
 * C++ source with the shapes baked in, compiled by NVRTC (docs/cuda.md).
 *
 * A module's source is three parts: the layer's constants (#define), the
 * kernel templates of cuda_lib.cu (embedded at build time as cg_cuda_lib),
 * and the extern "C" entry points of its kind, below, which instantiate
 * the templates with those constants.  So each kernel is written once and
 * a shape is a set of constants.  The matrix products between the entry
 * points (projections, logits, experts) are cuBLAS calls of the runtime. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef OCTO_HAVE_CUDA
#include <nvrtc.h>
#endif

#include "cg_impl.h"
#include "cuda_emu_text.h" /* generated: static const char cg_cuda_emu[] (cuda_emu.h) */
#include "cuda_kernels.h"
#include "cuda_lib.h" /* generated: static const char cg_cuda_lib[] */
#include "cg_lazy.h"  /* after nvrtc.h: NVRTC's functions, loaded on first use */
#include "layers.h"   /* rt__shape: the runtime's shape rules, one copy */

/* The entry points of each kind; constants come from the prelude. */
static const char ENTRY_NORM[] =
    "OCTO_KERNEL void KIND_F_norm(const real *x, const real *g, real *u, real *xhat, float *r)\n"
    "{ rmsnorm_f<H, H>(x, g, u, xhat, r); }\n"
    "OCTO_KERNEL void KIND_B_norm(const real *du, const real *g, const real *xhat, const float *r, const real *dy, real *dx)\n"
    "{ rmsnorm_b<H, H>(du, g, xhat, r, dy, dx); }\n"
    "OCTO_KERNEL void KIND_W_scale(const real *xhat, const real *g, real *u)\n"
    "{ scale_cols<H, T>(xhat, g, u); }\n"
    "OCTO_KERNEL void KIND_W_norm(const real *du, const real *xhat, float *part)\n"
    "{ colpart_prod<H, H, COLCH>(du, xhat, part, T); }\n";

static const char ENTRY_EMBEDDING[] =
    "OCTO_KERNEL void embedding_F(const int *tok, const real *table, real *y, int *err)\n"
    "{ embed_f<V, H>(tok, table, y, T, err); }\n"
    "OCTO_KERNEL void embedding_W(const int *tok, const real *dy, float *dtable)\n"
    "{ embed_w<H>(tok, dy, dtable, T); }\n";

static const char ENTRY_HEAD[] =
    "OCTO_KERNEL void head_F_lse(const real *z, const int *tgt, float *lse, float *ce)\n"
    "{ head_lse<V>(z, tgt, lse, ce); }\n"
    "OCTO_KERNEL_THREADS(1) void head_F_loss(const float *ce, const int *tgt, double *out)\n"
    "{ loss_sum(ce, tgt, out, T); }\n"
    "OCTO_KERNEL void head_B_dz(real *z, const float *lse, const int *tgt, float dscale)\n"
    "{ head_dz<V>(z, lse, tgt, dscale, T); }\n";

static const char ENTRY_ATTENTION[] =
    "OCTO_KERNEL void attention_F_ropetab(float *cs, float *sn)\n"
    "{ rope_table<SEQ, ROPE_LEN>(cs, sn, ROPE_INV_FREQ, ROPE_MSCALE); }\n"
    "OCTO_KERNEL void attention_F_rope(real *q, real *k, const float *cs, const float *sn)\n"
    "{ rope<SEQ, NH, DQK, ROPE_OFF, ROPE_LEN>(q, T, 1.f, cs, sn); rope<SEQ, NKV, DQK, ROPE_OFF, ROPE_LEN>(k, T, 1.f, cs, sn); }\n"
    "OCTO_KERNEL_THREADS(ATT_THREADS) void attention_F_core(const real *q, const real *k, const real *v, real *o, float *lse)\n"
    "{ attn_f<SEQ, NH, NKV, DQK, DV, WIN>(q, k, v, o, lse, MBS, QK_SCALE); }\n"
    "OCTO_KERNEL_THREADS(ATT_THREADS) void attention_B_core_q(const real *q, const real *k, const real *v, const real *o, const real *dout, const float *lse, float *Dsum, real *dq)\n"
    "{ attn_b_q<SEQ, NH, NKV, DQK, DV, WIN>(q, k, v, o, dout, lse, Dsum, dq, MBS, QK_SCALE); }\n"
    "OCTO_KERNEL_THREADS(ATT_THREADS) void attention_B_core_kv(const real *q, const real *k, const real *v, const real *dout, const float *lse, const float *Dsum, real *dk, real *dv)\n"
    "{ attn_b_kv<SEQ, NH, NKV, DQK, DV, WIN>(q, k, v, dout, lse, Dsum, dk, dv, MBS, QK_SCALE); }\n"
    "OCTO_KERNEL void attention_B_rope(real *dq, real *dk, const float *cs, const float *sn)\n"
    "{ rope<SEQ, NH, DQK, ROPE_OFF, ROPE_LEN>(dq, T, -1.f, cs, sn); rope<SEQ, NKV, DQK, ROPE_OFF, ROPE_LEN>(dk, T, -1.f, cs, sn); }\n";

/* qkv_bias only: the biases after the q, k, v projections, and their
 * gradients (column sums, rows ascending). */
static const char ENTRY_QKV_BIAS[] =
    "OCTO_KERNEL void attention_F_bias(real *q, real *k, real *v, const real *bq, const real *bk, const real *bv)\n"
    "{ add_bias<NH * DQK>(q, bq, T); add_bias<NKV * DQK>(k, bk, T); add_bias<NKV * DV>(v, bv, T); }\n"
    "OCTO_KERNEL void attention_W_bias(const real *dq, const real *dk, const real *dv, float *part)\n"
    "{ long n = col_chunks<COLCH>(T);\n"
    "  colpart_prod<NH * DQK, NH * DQK, COLCH>(dq, 0, part, T);\n"
    "  colpart_prod<NKV * DQK, NKV * DQK, COLCH>(dk, 0, part + n * NH * DQK, T);\n"
    "  colpart_prod<NKV * DV, NKV * DV, COLCH>(dv, 0, part + n * (NH + NKV) * DQK, T); }\n";

/* qk_norm only: RMSNorm of every q head (rows T NH) and k head (rows
 * T NKV) over DQK features, in place, one scale for each of q and k. */
static const char ENTRY_QK_NORM[] =
    "OCTO_KERNEL void attention_F_qhnorm(real *q, const real *g, real *qhat, float *r)\n"
    "{ rmsnorm_f<DQK, DQK>(q, g, q, qhat, r); }\n"
    "OCTO_KERNEL void attention_F_khnorm(real *k, const real *g, real *khat, float *r)\n"
    "{ rmsnorm_f<DQK, DQK>(k, g, k, khat, r); }\n"
    "OCTO_KERNEL void attention_B_hnorm(const real *d, const real *g, const real *xhat, const float *r, real *dx)\n"
    "{ rmsnorm_b<DQK, DQK>(d, g, xhat, r, 0, dx); }\n"
    "OCTO_KERNEL void attention_W_hnorm(const real *dqn, const real *qhat, const real *dkn, const real *khat, float *part)\n"
    "{ colpart_prod<DQK, DQK, COLCH>(dqn, qhat, part, (long)T * NH);\n"
    "  colpart_prod<DQK, DQK, COLCH>(dkn, khat, part + col_chunks<COLCH>((long)T * NH) * DQK, (long)T * NKV); }\n";

/* MLA only: the latent norms and the key/value assembly. */
static const char ENTRY_MLA[] =
    "#if OCTO_RQ > 0\n"
    "OCTO_KERNEL void attention_F_qnorm(const real *cq, const real *g, real *u, real *xhat, float *r)\n"
    "{ rmsnorm_f<RQ, RQ>(cq, g, u, xhat, r); }\n"
    "OCTO_KERNEL void attention_B_qnorm(const real *d, const real *g, const real *xhat, const float *r, real *dx)\n"
    "{ rmsnorm_b<RQ, RQ>(d, g, xhat, r, 0, dx); }\n"
    "OCTO_KERNEL void attention_W_qscale(const real *xhat, const real *g, real *u)\n"
    "{ scale_cols<RQ, T>(xhat, g, u); }\n"
    "OCTO_KERNEL void attention_W_qnorm(const real *d, const real *xhat, float *part)\n"
    "{ colpart_prod<RQ, RQ, COLCH>(d, xhat, part, T); }\n"
    "#endif\n"
    "OCTO_KERNEL void attention_F_kvnorm(const real *c, const real *g, real *u, real *xhat, float *r)\n"
    "{ rmsnorm_f<RKV, RKV + DR>(c, g, u, xhat, r); }\n"
    "OCTO_KERNEL void attention_F_split(const real *kv, const real *c, real *k, real *v)\n"
    "{ mla_split<NH, DN, DR, DV, RKV>(kv, c, k, v, T); }\n"
    "OCTO_KERNEL void attention_B_join(const real *dk, const real *dv, real *dkv, real *dc)\n"
    "{ mla_join<NH, DN, DR, DV, RKV>(dk, dv, dkv, dc, T); }\n"
    "OCTO_KERNEL void attention_B_kvnorm(const real *d, const real *g, const real *xhat, const float *r, real *dc)\n"
    "{ rmsnorm_b<RKV, RKV + DR, RKV>(d, g, xhat, r, 0, dc); }\n"
    "OCTO_KERNEL void attention_W_kvscale(const real *xhat, const real *g, real *u)\n"
    "{ scale_cols<RKV, T>(xhat, g, u); }\n"
    "OCTO_KERNEL void attention_W_kvnorm(const real *d, const real *xhat, float *part)\n"
    "{ colpart_prod<RKV, RKV, COLCH>(d, xhat, part, T); }\n";

static const char ENTRY_FFN[] =
    "OCTO_KERNEL void KIND_F_act(const real *a, const real *b, real *h, long n)\n"
    "{ ffn_act_f<ACT, GATED>(a, b, h, n); }\n"
    "OCTO_KERNEL void KIND_B_act(const real *dh, const real *a, const real *b, real *da, real *db, long n)\n"
    "{ ffn_act_b<ACT, GATED>(dh, a, b, da, db, n); }\n";

static const char ENTRY_MOE[] =
    "OCTO_KERNEL_THREADS(MOE_RT) void moe_F_route(const real *logit, float *p, float *w, int *sel)\n"
    "{ moe_route<E, K>(logit, p, w, sel, T); }\n"
    "OCTO_KERNEL_THREADS(MOE_LT) void moe_F_layout(const int *sel, int *off, int *slot, int *rowtok)\n"
    "{ moe_layout<E, K>(sel, off, slot, rowtok, T); }\n"
    "OCTO_KERNEL void moe_F_gather(const real *u, const int *rowtok, real *X)\n"
    "{ gather_rows<H>(u, rowtok, X, (long)T * K); }\n"
    "OCTO_KERNEL void moe_F_combine(const float *w, const int *slot, const real *Y, real *y)\n"
    "{ moe_combine<H, K>(w, slot, Y, y, T); }\n"
    "OCTO_KERNEL void moe_B_route(const real *dy, const real *Y, const float *p, const float *w, const int *sel, const int *slot, real *dY, real *dr)\n"
    "{ moe_route_b<E, K, H>(dy, Y, p, w, sel, slot, dY, dr, T); }\n"
    "OCTO_KERNEL void moe_B_scatter(const int *slot, const float *dX, const float *acc, real *du)\n"
    "{ moe_scatter_b<H, K>(slot, dX, acc, du, T); }\n"
    "OCTO_KERNEL void moe_W_gather(const real *u, const int *rowtok, real *X)\n"
    "{ gather_rows<H>(u, rowtok, X, (long)T * K); }\n"
    /* The experts' grouped GEMMs (moe_gmm): F's a, b = X w1_e, X wu_e and
     * Y = h wd_e; B's dh = dY wd_e^T and dX (f32) = da w1_e^T (+ db wu_e^T);
     * W's dw1_e, dwu_e += X^T da, X^T db and dwd_e += h^T dY. */
    "OCTO_KERNEL_THREADS(GM_THREADS) void moe_F_up(const int *off, const real *X, const real *w, void *a, int beta)\n"
    "{ moe_gmm<E, FFN, H, false, false>(off, X, w, a, beta, (long)T * K); }\n"
    "OCTO_KERNEL_THREADS(GM_THREADS) void moe_F_down(const int *off, const real *h, const real *w, void *Y, int beta)\n"
    "{ moe_gmm<E, H, FFN, false, false>(off, h, w, Y, beta, (long)T * K); }\n"
    "OCTO_KERNEL_THREADS(GM_THREADS) void moe_B_dh(const int *off, const real *dY, const real *w, void *dh, int beta)\n"
    "{ moe_gmm<E, FFN, H, true, false>(off, dY, w, dh, beta, (long)T * K); }\n"
    "OCTO_KERNEL_THREADS(GM_THREADS) void moe_B_dx(const int *off, const real *d, const real *w, void *dX, int beta)\n"
    "{ moe_gmm<E, H, FFN, true, true>(off, d, w, dX, beta, (long)T * K); }\n"
    "OCTO_KERNEL_THREADS(GM_THREADS) void moe_W_dw(const int *off, const real *X, const real *d, float *g)\n"
    "{ moe_gmm_w<E, H, FFN>(off, X, d, g, (long)T * K); }\n"
    "OCTO_KERNEL_THREADS(GM_THREADS) void moe_W_dwd(const int *off, const real *h, const real *dY, float *g)\n"
    "{ moe_gmm_w<E, FFN, H>(off, h, dY, g, (long)T * K); }\n";

/* shared_gate only: the shared experts' output times sigmoid(u . gate). */
static const char ENTRY_MOE_SGATE[] =
    "OCTO_KERNEL void moe_F_sgate(const real *z, const real *so, float *g, real *y)\n"
    "{ moe_sgate_f<H>(z, so, g, y, T); }\n"
    "OCTO_KERNEL void moe_B_sgate(const real *dy, const real *so, const float *g, real *sdy, real *sdz)\n"
    "{ moe_sgate_b<H>(dy, so, g, sdy, sdz, T); }\n";

/* Every module: the optimizer step of a tensor of its layer (the
 * runtime's AdamW, runtime/rt_model.c, element for element), the
 * storage-type copy of master parameters another replica updated (data
 * parallelism's all-gather, runtime/rt_device.c), clipping's scale of a
 * layer's gradients (runtime/rt_sched.c), and the rounding of a
 * sum of GEMMs accumulated in f32 (a B's du: runtime/dev's dev_acc_end), and
 * the second stage of W's column sums (runtime/dev's dev_col_add). */
static const char ENTRY_OPTIM[] =
    "OCTO_KERNEL void optim_adamw(float *p32, real *p, const float *g, float *m, float *v, long n, "
    "float lr, float step_size, float b1, float b2, float c1, float c2, float eps, float bc2_sqrt, "
    "float keep, int sgd)\n"
    "{ adamw(p32, p, g, m, v, n, lr, step_size, b1, b2, c1, c2, eps, bc2_sqrt, keep, sgd); }\n"
    "OCTO_KERNEL void optim_store(const float *p32, real *p, long n)\n"
    "{ store_params(p32, p, n); }\n"
    "OCTO_KERNEL void optim_scale(float *g, long n, float s)\n"
    "{ scale_grads(g, n, s); }\n"
    "OCTO_KERNEL void acc_store(const float *acc, real *dst, long n, int add)\n"
    "{ store_acc(acc, dst, n, add); }\n"
    "OCTO_KERNEL void col_sum(const float *part, float *dst, long chunks, long w)\n"
    "{ col_sums(part, dst, chunks, w); }\n";

/* The convolution of both versions and the scan: Mamba-2's as the chunked
 * SSD (ssd_*, around the runtime's batched GEMMs), Mamba-1's step by step
 * (scan_*); LX, LBC place x, B, C in the convolution output (Mamba-2) or
 * x_proj's output (Mamba-1). */
static const char ENTRY_MAMBA[] =
    "OCTO_KERNEL void mamba_F_conv(const real *in, const real *w, const real *b, real *cv, real *xc)\n"
    "{ conv_f<SEQ, CD, KC, CONV_LD>(in, w, b, cv, xc, T); }\n"
    "OCTO_KERNEL void mamba_F_dt(const real *src, const real *bias, real *v, float *dt)\n"
    "{ dt_f<MH, DT_LD>(src, bias, v, dt, T); }\n"
    "OCTO_KERNEL void mamba_B_dt(const float *ddt, const real *v, real *dst)\n"
    "{ dt_b<MH, DT_LD>(ddt, v, dst, T); }\n"
    "OCTO_KERNEL void mamba_B_dcv(const real *dxc, const real *cv, real *dcv)\n"
    "{ conv_dcv<SEQ, CD, KC>(dxc, cv, dcv, T); }\n"
    "OCTO_KERNEL void mamba_B_xpre(const real *in, real *xpre)\n"
    "{ copy_cols<CD, CONV_LD>(in, xpre, T); }\n"
    "OCTO_KERNEL void mamba_B_conv(const real *dcv, const real *w, real *din)\n"
    "{ conv_b<SEQ, CD, KC, CONV_LD>(dcv, w, din, T); }\n"
    "OCTO_KERNEL void mamba_W_conv(const real *dcv, const real *in, float *part)\n"
    "{ conv_w<SEQ, CD, KC, CD, COLCH>(dcv, in, part, part + col_chunks<COLCH>(T) * CD * KC, T); }\n"
    "OCTO_KERNEL void mamba_W_alog(const float *dA, const float *dD, const real *Alog, float *dAlog, float *dDg)\n"
    "{ alog_w<NA, MH, PERN>(dA, dD, Alog, dAlog, dDg, MBS); }\n"
    "OCTO_KERNEL void mamba_W_dtbias(const real *dsrc, float *part)\n"
    "{ colpart_prod<MH, DT_LD, COLCH>(dsrc, 0, part, T); }\n"
    "#if OCTO_VERSION == 2\n"
    "OCTO_KERNEL void mamba_F_ssd_pack(const real *xbc, float *xq, float *bq, float *cq)\n"
    "{ ssd_pack<SEQ, SSD_Q, NQ, DI, LX>(xbc, xq, MBS); ssd_pack<SEQ, SSD_Q, NQ, G * N, LBC>(xbc + DI, bq, MBS); ssd_pack<SEQ, SSD_Q, NQ, G * N, LBC>(xbc + DI + G * N, cq, MBS); }\n"
    "OCTO_KERNEL void mamba_F_ssd_cum(const float *dt, const real *Alog, float *dtq, float *lq)\n"
    "{ ssd_cum<SEQ, SSD_Q, NQ, MH>(dt, Alog, dtq, lq, MBS); }\n"
    "OCTO_KERNEL void mamba_F_ssd_mask(const float *cb, const float *dtq, const float *lq, float *m)\n"
    "{ ssd_mask<SSD_Q, MH, G>(cb, dtq, lq, m, (long)MBS * NQ); }\n"
    "OCTO_KERNEL void mamba_F_ssd_xw(const float *xq, const float *dtq, const float *lq, float *xw)\n"
    "{ ssd_scale<SSD_Q, MH, P, 1>(xq, dtq, lq, xw, (long)MBS * NQ); }\n"
    "OCTO_KERNEL void mamba_F_ssd_chunks(const float *lq, float *ck)\n"
    "{ ssd_chunks<SSD_Q, NQ, MH, P, N>(lq, ck, MBS); }\n"
    "OCTO_KERNEL void mamba_F_ssd_out(const float *yq, const float *yo, const float *lq, const real *x, const real *D, real *ys)\n"
    "{ ssd_out<SEQ, SSD_Q, NQ, MH, P, LX>(yq, yo, lq, x, D, ys, MBS); }\n"
    "OCTO_KERNEL void mamba_B_ssd_dy(const real *dys, float *dyq)\n"
    "{ ssd_pack<SEQ, SSD_Q, NQ, DI, DI>(dys, dyq, MBS); }\n"
    "OCTO_KERNEL void mamba_B_ssd_dyw(const float *dyq, const float *dtq, const float *lq, float *dyw)\n"
    "{ ssd_scale<SSD_Q, MH, P, 0>(dyq, dtq, lq, dyw, (long)MBS * NQ); }\n"
    "OCTO_KERNEL void mamba_B_ssd_chunks(const float *lq, float *e)\n"
    "{ ssd_chunks_b<SSD_Q, NQ, MH, P, N>(lq, e, MBS); }\n"
    "OCTO_KERNEL void mamba_B_ssd_mask(const float *dtq, const float *lq, const float *dcb, float *dcbg)\n"
    "{ ssd_mask_b<SSD_Q, MH, G>(dtq, lq, dcb, dcbg, (long)MBS * NQ); }\n"
    "OCTO_KERNEL void mamba_B_ssd_dt(const float *cb, float *dcb, const float *dtq, const float *lq, const float *xq, const float *dyq, const float *yo, const float *zq, const float *e, const float *ck, const real *Alog, float *ddt, float *dap, float *ddp)\n"
    "{ ssd_dt_b<SEQ, SSD_Q, NQ, MH, P, G, N>(cb, dcb, dtq, lq, xq, dyq, yo, zq, e, ck, Alog, ddt, dap, ddp, MBS); }\n"
    "OCTO_KERNEL void mamba_B_ssd_dx(const float *yq, const float *zq, const float *dtq, const float *lq, const real *dys, const real *D, const float *dbq, const float *dcq, real *dxbc)\n"
    "{ ssd_dx<SEQ, SSD_Q, NQ, MH, P, G, N, LX>(yq, zq, dtq, lq, dys, D, dbq, dcq, dxbc, MBS); }\n"
    "OCTO_KERNEL void mamba_B_ssd_ad(const float *dap, const float *ddp, float *dA, float *dD)\n"
    "{ ssd_ad<NQ, MH, N>(dap, ddp, dA, dD, MBS); }\n"
    "OCTO_KERNEL void mamba_F_gnorm(const real *ys, const real *z, const real *ng, real *yhat, float *rg, real *yn)\n"
    "{ gated_norm_f<DI, G, DIP>(ys, z, ng, yhat, rg, yn); }\n"
    "OCTO_KERNEL void mamba_B_gnorm(const real *dyn, const real *ng, const real *yhat, const float *rg, const real *ys, const real *z, real *dys, real *dz)\n"
    "{ gated_norm_b<DI, G, DIP>(dyn, ng, yhat, rg, ys, z, dys, dz); }\n"
    "OCTO_KERNEL void mamba_W_gnorm(const real *dyn, const real *yhat, float *part)\n"
    "{ colpart_prod<DI, DI, COLCH>(dyn, yhat, part, T); }\n"
    "OCTO_KERNEL void mamba_W_gscale(const real *yhat, const real *ng, real *yn)\n"
    "{ scale_cols<DI, T>(yhat, ng, yn); }\n"
    "#else\n"
    "OCTO_KERNEL void mamba_F_scan(const real *x, const real *Bm, const real *Cm, const float *dt, const real *Alog, const real *D, real *ys, float *chunks)\n"
    "{ scan_f<SEQ, MH, P, G, N, A1, LX, LBC>(x, Bm, Cm, dt, Alog, D, ys, chunks, MBS); }\n"
    "OCTO_KERNEL_THREADS(P) void mamba_B_scan(const real *x, const real *Bm, const real *Cm, const float *dt, const real *Alog, const real *D, const real *dys, const float *chunks, float *dx, float *dbp, float *dcp, float *ddt, float *dA, float *dD)\n"
    "{ scan_b<SEQ, MH, P, G, N, A1, LX, LBC>(x, Bm, Cm, dt, Alog, D, dys, chunks, dx, dbp, dcp, ddt, dA, dD, MBS); }\n"
    "OCTO_KERNEL void mamba_B_reduce(const float *dbp, const float *dcp, real *dB, real *dC)\n"
    "{ scan_reduce<MH, G, N, LBC>(dbp, dB, T); scan_reduce<MH, G, N, LBC>(dcp, dC, T); }\n"
    "OCTO_KERNEL void mamba_F_gate(const real *ys, const real *z, real *yg)\n"
    "{ gate_f<DI, 2 * DI>(ys, z, yg, T); }\n"
    "OCTO_KERNEL void mamba_B_gate(const real *dyg, const real *ys, const real *z, real *dys, real *dz)\n"
    "{ gate_b<DI, 2 * DI>(dyg, ys, z, dys, dz, T); }\n"
    "#endif\n";

typedef struct sbuf {
	char *p;
	size_t n, cap;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (b->n + (size_t)k + 1 > b->cap) {
		b->cap = (b->n + (size_t)k + 1) * 2;
		b->p = realloc(b->p, b->cap);
		if (!b->p)
			ir_bug("out of memory");
	}
	va_start(ap, fmt);
	vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
	va_end(ap);
	b->n += (size_t)k;
}

/* The entry text with KIND replaced by the kind's name. */
static void put_entries(sbuf *b, const char *text, const char *kind)
{
	for (const char *s = text; *s;) {
		const char *k = strstr(s, "KIND");
		if (!k) {
			put(b, "%s", s);
			break;
		}
		put(b, "%.*s%s", (int)(k - s), s, kind);
		s = k + 4;
	}
}

/* Constants are C++ constants, not macros, so that the templates' parameters
 * of the same names shadow them; OCTO_* macros serve the preprocessor.  The
 * attention's names and the Mamba's differ, so a parallel layer's module
 * holds both. */
#define DEF(name, v) put(bp, "static constexpr int %s = %lld;\n", name, (long long)(v))

static void def_attention(sbuf *bp, const rt_shape *s)
{
	DEF("NH", s->nh);
	DEF("NKV", s->nkv);
	DEF("DQK", s->dqk);
	DEF("DV", s->dv);
	DEF("WIN", s->win);
	DEF("ROPE_OFF", s->rope_off);
	DEF("ROPE_LEN", s->rope_len);
	/* %.17g: the double the CPU kernels use, read back exactly.  The base
	 * is for the reader; the kernels take the pairs' inverse frequencies,
	 * rt__rope_freq's (rope_theta and rope_scaling), the factor of cos and
	 * sin and that of the scores, as the CPU has them. */
	put(bp, "static constexpr double ROPE_THETA = %.17g;\n", s->theta);
	put(bp, "static constexpr double ROPE_MSCALE = %.17g;\n", s->rope_mscale);
	put(bp, "static constexpr float QK_SCALE = (float)%.17g;\n", s->qk_scale);
	put(bp, "__device__ const double ROPE_INV_FREQ[%lld] = {",
	    (long long)(s->rope_len / 2 > 0 ? s->rope_len / 2 : 1));
	for (int64_t i = 0; i < s->rope_len / 2; i++)
		put(bp, "%s%.17g", i ? ", " : "", rt__rope_freq(s, i));
	put(bp, "%s};\n", s->rope_len / 2 > 0 ? "" : "0");
	DEF("DN", s->dn);
	DEF("DR", s->dr);
	DEF("RQ", s->rq);
	DEF("RKV", s->rkv);
}

static void def_mamba(sbuf *bp, const rt_shape *s)
{
	DEF("VERSION", s->ver);
	DEF("DI", s->di);
	DEF("MH", s->mh);
	DEF("P", s->P);
	DEF("G", s->G);
	DEF("N", s->N);
	DEF("KC", s->Kc);
	DEF("R", s->R);
	DEF("CD", s->cd);
	DEF("DIP", s->dip);
	DEF("A1", s->ver == 1);
	/* Mamba-2: the convolution reads x|B|C in zx (stride DIP) from column DI,
	 * dt is zx's last MH columns.  Mamba-1: the convolution reads x in xz
	 * (stride 2 DI); B, C are columns R.. of xd (stride R + 2N); dt = softplus(v) per channel. */
	DEF("CONV_LD", s->ver == 2 ? s->dip : 2 * s->di);
	DEF("DT_LD", s->ver == 2 ? s->dip : s->mh);
	DEF("LX", s->ver == 2 ? s->cd : s->di);
	DEF("LBC", s->ver == 2 ? s->cd : s->R + 2 * s->N);
	DEF("NA", s->ver == 2 ? s->mh : s->di * s->N);
	DEF("PERN", s->ver == 2 ? s->N : 1);
	DEF("SSD_Q", RT_SSD_CHUNK); /* Mamba-2's chunk; its chunks per sequence: */
	DEF("NQ", s->nq);
}

/* The attention's entry points, with the options' that the shape has. */
static void put_attention(sbuf *bp, const rt_shape *s)
{
	put(bp, "%s", ENTRY_ATTENTION);
	if (s->mla)
		put(bp, "%s", ENTRY_MLA);
	if (s->qkb)
		put(bp, "%s", ENTRY_QKV_BIAS);
	if (s->qkn)
		put(bp, "%s", ENTRY_QK_NORM);
}

char *cg_cuda_source(const rt_layer_desc *d, bool bf16, arena *a)
{
	rt_shape s;
	if (rt__shape(d, &s) != RT_OK) {
		diag_error((ir_loc){0}, "cuda: a %s layer the kernels do not run "
		                        "(docs/layers.md)", ir_layer_kind_names[d->kind]);
		return NULL;
	}
	const char *kind = ir_layer_kind_names[d->kind];
	sbuf b = {0}, *bp = &b;
	put(&b, "/* octopipe: %s layer kernels (docs/cuda.md); matrix products run in cuBLAS */\n", kind);
	put(&b, "#define OCTO_BF16 %d\n#define OCTO_RQ %lld\n#define OCTO_VERSION %d\n", bf16,
	    (long long)s.rq, s.ver);
	DEF("SEQ", s.S);
	DEF("MBS", s.nb);
	DEF("T", s.T);
	DEF("H", s.H);
	DEF("V", s.V);
	DEF("COLCH", RT_COL_CHUNK); /* W's column sums: rows per chunk of stage 1 */
	switch (d->kind) {
	case RT_ATTENTION: def_attention(&b, &s); break;
	case RT_MLP:
	case RT_MOE:
		DEF("ACT", s.act);
		DEF("GATED", s.gated);
		DEF("FFN", s.F);
		DEF("E", s.E);
		DEF("K", s.K);
		DEF("SF", s.SF);
		break;
	case RT_MAMBA: def_mamba(&b, &s); break;
	case RT_PARALLEL:
		def_attention(&b, &s);
		def_mamba(&b, &s);
		break;
	default:
		break;
	}
	put(&b, "%s\n", cg_cuda_lib);
	switch (d->kind) {
	case RT_EMBEDDING: put(&b, "%s", ENTRY_EMBEDDING); break;
	case RT_HEAD:
		put_entries(&b, ENTRY_NORM, kind);
		put(&b, "%s", ENTRY_HEAD);
		break;
	case RT_ATTENTION:
		put_entries(&b, ENTRY_NORM, kind);
		put_attention(&b, &s);
		break;
	case RT_MLP:
	case RT_MOE:
		put_entries(&b, ENTRY_NORM, kind);
		put_entries(&b, ENTRY_FFN, kind);
		if (d->kind == RT_MOE)
			put(&b, "%s", ENTRY_MOE);
		if (d->kind == RT_MOE && s.sgate)
			put(&b, "%s", ENTRY_MOE_SGATE);
		break;
	case RT_MAMBA:
		put_entries(&b, ENTRY_NORM, kind);
		put(&b, "%s", ENTRY_MAMBA);
		break;
	case RT_PARALLEL: /* one norm, both mixers' entry points under their names */
		put_entries(&b, ENTRY_NORM, kind);
		put_attention(&b, &s);
		put(&b, "%s", ENTRY_MAMBA);
		break;
	default: break;
	}
	put(&b, "%s", ENTRY_OPTIM);
	char *out = arena_alloc(a, b.n + 1);
	memcpy(out, b.p, b.n + 1);
	free(b.p);
	return out;
}
#undef DEF

char *cg_cuda_module_name(const rt_layer_desc *d, const char *src, arena *a)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
	for (const char *p = src; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
	return arena_printf(a, "%s_%08llx", ir_layer_kind_names[d->kind], (unsigned long long)(h & 0xffffffffu));
}

/* Is line l (not NUL-terminated, n chars) the preprocessor directive d? */
static bool is_directive(const char *l, size_t n, const char *d)
{
	size_t k = strlen(d);
	return n >= k && strncmp(l, d, k) == 0 && (n == k || l[k] == ' ' || l[k] == '\t');
}

char *cg_cuda_emu_source(const rt_layer_desc *d, bool bf16, const char *table, arena *a)
{
	char *src = cg_cuda_source(d, bf16, a);
	if (!src)
		return NULL;
	sbuf b = {0};
	put(&b, "%s\n%s\n", cg_cuda_emu, src);
	/* The entry points follow the library; the conditionals around some of
	 * them (#if OCTO_RQ > 0, OCTO_VERSION == 2 ... #else) go around their rows. */
	const char *e = strstr(src, cg_cuda_lib);
	e = e ? e + strlen(cg_cuda_lib) : src;
	put(&b, "extern \"C\" const octo_emu_entry %s[] = {\n    {\"octo_emu_bind\", octo_emu_bind},\n",
	    table);
	static const char *const cond[] = {"#if", "#ifdef", "#ifndef", "#elif", "#else", "#endif"};
	/* an entry point: OCTO_KERNEL void NAME( or OCTO_KERNEL_THREADS(n) void NAME( */
	static const char kernel[] = "OCTO_KERNEL", ret[] = " void ";
	for (const char *l = e; *l;) {
		size_t n = strcspn(l, "\n");
		for (size_t i = 0; i < sizeof cond / sizeof *cond; i++)
			if (is_directive(l, n, cond[i]))
				put(&b, "%.*s\n", (int)n, l);
		const char *v = strncmp(l, kernel, sizeof kernel - 1) == 0 ? strstr(l, ret) : NULL;
		if (v && v < l + n) {
			const char *name = v + sizeof ret - 1;
			int k = (int)strcspn(name, "( \n");
			put(&b, "    {\"%.*s\", octo_emu_thunk<%.*s>::call},\n", k, name, k, name);
		}
		l += n + (l[n] == '\n');
	}
	put(&b, "    {nullptr, nullptr}};\n");
	char *out = arena_alloc(a, b.n + 1);
	memcpy(out, b.p, b.n + 1);
	free(b.p);
	return out;
}

#ifdef OCTO_HAVE_CUDA
int cg_cuda_ptx(const char *name, const char *src, const char *arch, char **ptx, arena *a)
{
	if (cg_nvrtc_load())
		return -1;
	nvrtcProgram prog;
	nvrtcResult r = nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL);
	if (r != NVRTC_SUCCESS) {
		diag_error((ir_loc){0}, "cuda: nvrtcCreateProgram(%s): %s", name,
		           nvrtcGetErrorString(r));
		return -1;
	}
	/* compute_XX: PTX for the architecture (the driver JITs it for the card).
	 * No FMA contraction: as on CPU, so the GPU check can hold f32 to tight
	 * thresholds. */
	const char *num = strncmp(arch, "sm_", 3) == 0 ? arch + 3 : arch;
	char *opt_arch = arena_printf(a, "--gpu-architecture=compute_%s", num);
	const char *opts[] = {opt_arch, "--std=c++17", "--fmad=false",
	                      "-diag-suppress=177" /* the constants a kind does not use */};
	r = nvrtcCompileProgram(prog, (int)(sizeof opts / sizeof *opts), opts);
	int rc = 0;
	if (r != NVRTC_SUCCESS) {
		size_t n = 0;
		nvrtcGetProgramLogSize(prog, &n);
		char *log = arena_alloc(a, n + 1);
		nvrtcGetProgramLog(prog, log);
		diag_error((ir_loc){0}, "cuda: NVRTC failed to compile %s for %s (%s):\n%s",
		           name, arch, nvrtcGetErrorString(r), log);
		rc = -1;
	} else {
		size_t n = 0;
		if (nvrtcGetPTXSize(prog, &n) != NVRTC_SUCCESS) {
			diag_error((ir_loc){0}, "cuda: nvrtcGetPTXSize(%s) failed", name);
			rc = -1;
		} else {
			*ptx = arena_alloc(a, n + 1);
			if (nvrtcGetPTX(prog, *ptx) != NVRTC_SUCCESS) {
				diag_error((ir_loc){0}, "cuda: nvrtcGetPTX(%s) failed", name);
				rc = -1;
			}
		}
	}
	nvrtcDestroyProgram(&prog);
	return rc;
}

#endif
