/* host.c: the host program of one rank, built with the LLVM C API.
 *
 * Reads a cg_rank (program.c); writes one object file (and, on request,
 * the module as text).  The module holds the rank's plan as constants --
 * the layer table ({global index, rt_layer_desc}), the op table in the
 * verified order with buffer offsets, the stash slices, the rt_prog_info
 * that --help and the report print -- and one function, main, which
 * parses the command line (rt_cli_parse), starts the runtime, sets up the
 * model and the buffer block, and then, every step, walks the op table
 * with a switch on the op kind, calling libocto_rt for each op:
 *
 *   F   rt_run_f for each layer of the stage, first to last
 *   R   rt_run_r the same way (F again, before a recomputing stage's B)
 *   B   rt_run_b for each layer, last to first
 *   W   rt_run_w for each layer
 *   send, recv  rt_post_send / rt_post_recv (the tag's fields as scalars)
 *   wait        rt_wait; group{ }group  rt_group_begin / rt_group_end
 *   coll        rt_post_coll (a bucket's collective); update  rt_update
 *   tie         rt_tie_post (the tied embeddings' sum)
 *
 * then waits for the step's unwaited sends (rt_waitall), ends the step
 * (rt_step_end: loss, AdamW) and reports it (rt_cli_step_end: the step
 * line, metrics, the periodic save; 1 stops the loop: a signal), and runs
 * the evaluation passes rt_cli_eval_passes asks for: the same walk of the
 * op table over request slots of their own, with only F and the
 * activations' sends and receives (walk_ops).  After the loop, rt_cli_save
 * (the --checkpoint save) and the summary.  Any failing call branches to
 * one block that calls rt_abort (the message names the rank) and returns 1.
 *
 * The C structs main passes by pointer (rt_train, rt_options, rt_cli,
 * rt_prog_info, rt_layer_spec) are mirrored as LLVM struct types from a
 * field table; every field's offset and the size are checked against the C
 * compiler's offsetof/sizeof on the target's data layout, so the mirror
 * cannot drift from octo_rt.h silently.
 *
 * The LLVM C API is used the way llvm-c-test/calc.c does: one context per
 * module, build, verify (LLVMVerifyModule, status returned), optimise
 * (LLVMRunPasses "default<O2>"), emit (LLVMTargetMachineEmitToFile), every
 * error message checked and disposed, everything disposed in reverse
 * order of creation. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "cg_impl.h"
#include "cg_lazy.h" /* after the LLVM headers: the functions, loaded on first use */

/* ---- struct mirrors ----------------------------------------------------- */

typedef enum ftype { T_I32, T_I64, T_F32, T_F64, T_PTR, T_DESC, T_PATH } ftype;

typedef struct field {
	const char *name;
	size_t off;
	ftype type;
} field;

#define FLD(S, f, t) {#f, offsetof(S, f), t}

static const field desc_fields[] = {
    FLD(rt_layer_desc, kind, T_I32),         FLD(rt_layer_desc, hidden, T_I64),
    FLD(rt_layer_desc, seq, T_I64),          FLD(rt_layer_desc, mbs, T_I64),
    FLD(rt_layer_desc, vocab, T_I64),        FLD(rt_layer_desc, tied, T_I64),
    FLD(rt_layer_desc, heads, T_I64),
    FLD(rt_layer_desc, kv_heads, T_I64),     FLD(rt_layer_desc, head_dim, T_I64),
    FLD(rt_layer_desc, window, T_I64),       FLD(rt_layer_desc, q_lora_rank, T_I64),
    FLD(rt_layer_desc, kv_lora_rank, T_I64), FLD(rt_layer_desc, qk_rope_dim, T_I64),
    FLD(rt_layer_desc, v_head_dim, T_I64),   FLD(rt_layer_desc, rope_theta, T_F64),
    FLD(rt_layer_desc, qkv_bias, T_I64),     FLD(rt_layer_desc, qk_norm, T_I64),
    FLD(rt_layer_desc, rope_scaling, T_I64), FLD(rt_layer_desc, rope_factor, T_F64),
    FLD(rt_layer_desc, rope_low_freq_factor, T_F64),
    FLD(rt_layer_desc, rope_high_freq_factor, T_F64),
    FLD(rt_layer_desc, rope_original_max, T_I64), FLD(rt_layer_desc, rope_beta_fast, T_F64),
    FLD(rt_layer_desc, rope_beta_slow, T_F64),
    FLD(rt_layer_desc, rope_attention_factor, T_F64), FLD(rt_layer_desc, rope_mscale, T_F64),
    FLD(rt_layer_desc, rope_mscale_all_dim, T_F64),
    FLD(rt_layer_desc, ffn, T_I64),
    FLD(rt_layer_desc, act, T_I32),          FLD(rt_layer_desc, experts, T_I64),
    FLD(rt_layer_desc, top_k, T_I64),        FLD(rt_layer_desc, expert_ffn, T_I64),
    FLD(rt_layer_desc, shared_experts, T_I64), FLD(rt_layer_desc, shared_gate, T_I64),
    FLD(rt_layer_desc, version, T_I64),
    FLD(rt_layer_desc, state, T_I64),        FLD(rt_layer_desc, expand, T_I64),
    FLD(rt_layer_desc, conv, T_I64),         FLD(rt_layer_desc, groups, T_I64),
    FLD(rt_layer_desc, dt_rank, T_I64),       FLD(rt_layer_desc, ssm_heads, T_I64),
    FLD(rt_layer_desc, ssm_head_dim, T_I64),  FLD(rt_layer_desc, selective, T_I64),
};
static const field spec_fields[] = {FLD(rt_layer_spec, index, T_I64), FLD(rt_layer_spec, desc, T_DESC),
                                    FLD(rt_layer_spec, bucket_start, T_I32)};
static const field train_fields[] = {
    FLD(rt_train, seed, T_I64),        FLD(rt_train, nlayers, T_I64),
    FLD(rt_train, seq, T_I64),         FLD(rt_train, mbs, T_I64),
    FLD(rt_train, vocab, T_I64),       FLD(rt_train, microbatches, T_I64),
    FLD(rt_train, optimizer, T_I32),   FLD(rt_train, lr, T_F32),
    FLD(rt_train, weight_decay, T_F32), FLD(rt_train, beta1, T_F32),
    FLD(rt_train, beta2, T_F32),       FLD(rt_train, eps, T_F32),
    FLD(rt_train, text_file, T_PTR),   FLD(rt_train, dp, T_I64),
    FLD(rt_train, replica, T_I64),     FLD(rt_train, pipe_rank, T_I64),
    FLD(rt_train, dp_flags, T_I32),    FLD(rt_train, warmup, T_I64),
    FLD(rt_train, decay, T_I32),       FLD(rt_train, decay_steps, T_I64),
    FLD(rt_train, min_lr, T_F32),      FLD(rt_train, clip, T_F32),
};
static const field options_fields[] = {FLD(rt_options, flags, T_I32),
                                       FLD(rt_options, comm_timeout_s, T_F64),
                                       FLD(rt_options, trace_dir, T_PTR)};
static const field prog_fields[] = {
    FLD(rt_prog_info, about, T_PTR),  FLD(rt_prog_info, data, T_PTR),
    FLD(rt_prog_info, data_format, T_I32),
    FLD(rt_prog_info, steps, T_I64),  FLD(rt_prog_info, tokens, T_I64),
    FLD(rt_prog_info, predicted_us, T_F64), FLD(rt_prog_info, rank, T_I32),
    FLD(rt_prog_info, nranks, T_I32), FLD(rt_prog_info, compile, T_I64),
    FLD(rt_prog_info, peak_flops, T_F64),
};
static const field cli_fields[] = {
    FLD(rt_cli, prog, T_PTR),     FLD(rt_cli, steps, T_I64),     FLD(rt_cli, data, T_PTR),
    FLD(rt_cli, checkpoint, T_PTR), FLD(rt_cli, resume, T_PTR),  FLD(rt_cli, trace, T_PTR),
    FLD(rt_cli, profile, T_PTR),  FLD(rt_cli, data_format, T_I32), FLD(rt_cli, data_position, T_I32),
    FLD(rt_cli, done, T_I64),      FLD(rt_cli, t0, T_F64),
    FLD(rt_cli, first_s, T_F64),  FLD(rt_cli, rest_s, T_F64),    FLD(rt_cli, last_loss, T_F64),
    FLD(rt_cli, loop, T_PTR),     FLD(rt_cli, path, T_PATH),
};
static const field op_fields[] = {
    FLD(cg_op, kind, T_I32),  FLD(cg_op, h0, T_I32),    FLD(cg_op, h1, T_I32),
    FLD(cg_op, mb, T_I32),    FLD(cg_op, peer, T_I32),  FLD(cg_op, tstage, T_I32),
    FLD(cg_op, tkind, T_I32), FLD(cg_op, req, T_I32),   FLD(cg_op, bytes, T_I64),
    FLD(cg_op, in, T_I64),    FLD(cg_op, out, T_I64),   FLD(cg_op, last, T_I64),
    FLD(cg_op, act, T_I64),   FLD(cg_op, ws, T_I64),
};
#define NF(a) (int)(sizeof a / sizeof *a)

/* Field indices main reads. */
enum { CLI_STEPS = 1, CLI_DATA = 2, CLI_CHECKPOINT = 3, CLI_RESUME = 4, CLI_TRACE = 5, CLI_PROFILE = 6 };
enum { TRAIN_TEXT = 12, OPTIONS_TRACE = 2 };
enum { OP_KIND, OP_H0, OP_H1, OP_MB, OP_PEER, OP_TSTAGE, OP_TKIND, OP_REQ, OP_BYTES, OP_IN, OP_OUT,
       OP_LAST, OP_ACT, OP_WS, OP_NFIELDS };

/* ---- the builder -------------------------------------------------------- */

typedef struct hb {
	LLVMContextRef cx;
	LLVMModuleRef mod;
	LLVMBuilderRef b;
	LLVMTargetDataRef td;
	LLVMTypeRef i1, i8, i32, i64, f32, f64, p8, pp8, pf, ctx, pctx;
	LLVMTypeRef desc, spec, train, options, prog, cli, op;
	LLVMValueRef main, fail_rc, ctx_slot;
	LLVMBasicBlockRef fail;
} hb;

static LLVMTypeRef ftype_llvm(hb *h, ftype t)
{
	switch (t) {
	case T_I32: return h->i32;
	case T_I64: return h->i64;
	case T_F32: return h->f32;
	case T_F64: return h->f64;
	case T_PTR: return h->p8;
	case T_DESC: return h->desc;
	case T_PATH: return LLVMArrayType(h->i8, (unsigned)sizeof ((rt_cli *)0)->path);
	}
	ir_bug("codegen: bad field type");
}

enum { MAX_FIELDS = 64 }; /* of a mirrored struct */

static LLVMTypeRef mirror(hb *h, const char *name, const field *f, int n, size_t size)
{
	LLVMTypeRef t = LLVMStructCreateNamed(h->cx, name), el[MAX_FIELDS];
	ir_assert(n <= MAX_FIELDS);
	for (int i = 0; i < n; i++)
		el[i] = ftype_llvm(h, f[i].type);
	LLVMStructSetBody(t, el, (unsigned)n, 0);
	for (int i = 0; i < n; i++)
		if (LLVMOffsetOfElement(h->td, t, (unsigned)i) != f[i].off)
			ir_bug("codegen: %s.%s is at offset %llu in LLVM, %zu in C", name, f[i].name,
			       LLVMOffsetOfElement(h->td, t, (unsigned)i), f[i].off);
	if (LLVMABISizeOfType(h->td, t) != size)
		ir_bug("codegen: %s is %llu bytes in LLVM, %zu in C", name, LLVMABISizeOfType(h->td, t), size);
	return t;
}

/* A constant of a mirrored type from the C struct at c; pointer fields
 * take ptrs[i] (NULL: a null pointer). */
static LLVMValueRef mirror_const(hb *h, LLVMTypeRef t, const field *f, int n, const void *c,
                                 const LLVMValueRef *ptrs)
{
	LLVMValueRef v[MAX_FIELDS];
	const char *p = c;
	for (int i = 0; i < n; i++) {
		const char *q = p + f[i].off;
		int32_t i32;
		int64_t i64;
		float f32;
		double f64;
		switch (f[i].type) {
		case T_I32: memcpy(&i32, q, 4); v[i] = LLVMConstInt(h->i32, (unsigned long long)(int64_t)i32, 1); break;
		case T_I64: memcpy(&i64, q, 8); v[i] = LLVMConstInt(h->i64, (unsigned long long)i64, 1); break;
		case T_F32: memcpy(&f32, q, 4); v[i] = LLVMConstReal(h->f32, f32); break;
		case T_F64: memcpy(&f64, q, 8); v[i] = LLVMConstReal(h->f64, f64); break;
		case T_PTR: v[i] = ptrs && ptrs[i] ? ptrs[i] : LLVMConstNull(h->p8); break;
		case T_DESC: v[i] = mirror_const(h, h->desc, desc_fields, NF(desc_fields), q, NULL); break;
		case T_PATH: v[i] = LLVMConstNull(ftype_llvm(h, T_PATH)); break;
		}
	}
	return LLVMConstNamedStruct(t, v, (unsigned)n);
}

static LLVMValueRef global_const(hb *h, const char *name, LLVMTypeRef t, LLVMValueRef init)
{
	LLVMValueRef g = LLVMAddGlobal(h->mod, t, name);
	LLVMSetInitializer(g, init);
	LLVMSetGlobalConstant(g, 1);
	LLVMSetLinkage(g, LLVMPrivateLinkage);
	LLVMSetUnnamedAddress(g, LLVMGlobalUnnamedAddr);
	return g;
}

/* A NUL-terminated string constant, as an i8*. */
static LLVMValueRef cstring(hb *h, const char *name, const char *s)
{
	size_t n = strlen(s);
	LLVMValueRef init = LLVMConstStringInContext(h->cx, s, (unsigned)n, 0);
	LLVMValueRef g = global_const(h, name, LLVMArrayType(h->i8, (unsigned)n + 1), init);
	return LLVMConstPointerCast(g, h->p8);
}

static LLVMValueRef i32c(hb *h, long long v) { return LLVMConstInt(h->i32, (unsigned long long)v, 1); }
static LLVMValueRef i64c(hb *h, long long v) { return LLVMConstInt(h->i64, (unsigned long long)v, 1); }

static LLVMValueRef declare(hb *h, const char *name, LLVMTypeRef ret, int n, LLVMTypeRef *params)
{
	LLVMValueRef f = LLVMGetNamedFunction(h->mod, name);
	if (!f)
		f = LLVMAddFunction(h->mod, name, LLVMFunctionType(ret, params, (unsigned)n, 0));
	return f;
}

#define DECL(name, ret, ...)                                                                  \
	declare(h, name, ret, (int)(sizeof((LLVMTypeRef[]){__VA_ARGS__}) / sizeof(LLVMTypeRef)), \
	        (LLVMTypeRef[]){__VA_ARGS__})

static LLVMValueRef call(hb *h, LLVMValueRef fn, int n, LLVMValueRef *args, const char *name)
{
	return LLVMBuildCall2(h->b, LLVMGlobalGetValueType(fn), fn, args, (unsigned)n, name);
}

#define CALL(fn, ...)                                                                         \
	call(h, fn, (int)(sizeof((LLVMValueRef[]){__VA_ARGS__}) / sizeof(LLVMValueRef)),         \
	     (LLVMValueRef[]){__VA_ARGS__}, "")

static LLVMBasicBlockRef block(hb *h, const char *name)
{
	return LLVMAppendBasicBlockInContext(h->cx, h->main, name);
}

static void at(hb *h, LLVMBasicBlockRef bb)
{
	LLVMPositionBuilderAtEnd(h->b, bb);
}

/* rc != 0: to the abort block; else on in a new block. */
static void check(hb *h, LLVMValueRef rc)
{
	LLVMBasicBlockRef cur = LLVMGetInsertBlock(h->b), ok = block(h, "ok");
	LLVMValueRef bad = LLVMBuildICmp(h->b, LLVMIntNE, rc, i32c(h, 0), "bad");
	LLVMBuildCondBr(h->b, bad, h->fail, ok);
	LLVMAddIncoming(h->fail_rc, &rc, &cur, 1);
	at(h, ok);
}

static LLVMValueRef field_ptr(hb *h, LLVMTypeRef t, LLVMValueRef p, int i, const char *name)
{
	return LLVMBuildStructGEP2(h->b, t, p, (unsigned)i, name);
}

static LLVMValueRef load_field(hb *h, LLVMTypeRef t, LLVMValueRef p, int i, LLVMTypeRef ft,
                               const char *name)
{
	return LLVMBuildLoad2(h->b, ft, field_ptr(h, t, p, i, ""), name);
}

/* base + off, or NULL for a negative offset, as a T*. */
static LLVMValueRef buf_ptr(hb *h, LLVMValueRef base, LLVMValueRef off, LLVMTypeRef t, const char *name)
{
	LLVMValueRef none = LLVMBuildICmp(h->b, LLVMIntSLT, off, i64c(h, 0), "");
	LLVMValueRef p = LLVMBuildGEP2(h->b, h->i8, base, &off, 1, "");
	p = LLVMBuildBitCast(h->b, p, t, "");
	return LLVMBuildSelect(h->b, none, LLVMConstNull(t), p, name);
}

typedef struct externs {
	LLVMValueRef cli_parse, cli_start, cli_train, cli_step_begin, cli_step_end, cli_save, cli_finish;
	LLVMValueRef cli_eval_passes, cli_eval_end, eval_begin, eval_end; /* evaluation */
	LLVMValueRef init, abort, finalize, model_bytes, arena_init, model_init, arena_alloc;
	LLVMValueRef ckpt_load, profile, step_begin, step_end;
	LLVMValueRef run_f, run_r, run_b, run_w, send, recv, wait, waitall, group_begin, group_end;
	LLVMValueRef post_coll, update; /* data parallelism */
	LLVMValueRef tie;               /* tied embeddings */
	LLVMValueRef dev_attach, dev_buffers; /* device ranks */
	const char *dev_attach_name;
} externs;

static void declare_runtime(hb *h, externs *x)
{
	LLVMTypeRef i32 = h->i32, i64 = h->i64, p8 = h->p8, pf = h->pf, c = h->pctx,
	            pi32 = LLVMPointerType(h->i32, 0), pcli = LLVMPointerType(h->cli, 0),
	            ptrain = LLVMPointerType(h->train, 0), pspec = LLVMPointerType(h->spec, 0),
	            v = LLVMVoidTypeInContext(h->cx);
	x->cli_parse = DECL("rt_cli_parse", i32, i32, h->pp8, LLVMPointerType(h->prog, 0), pcli);
	x->cli_start = DECL("rt_cli_start", i32, pcli, c);
	x->cli_step_begin = DECL("rt_cli_step_begin", v, pcli);
	x->cli_train = DECL("rt_cli_train", v, pcli, ptrain);
	x->cli_step_end = DECL("rt_cli_step_end", i32, pcli, c, h->f64, i32);
	x->cli_save = DECL("rt_cli_save", i32, pcli, c);
	x->cli_eval_passes = DECL("rt_cli_eval_passes", i32, pcli, c);
	x->cli_eval_end = DECL("rt_cli_eval_end", i32, pcli, c, h->f64, i32, i32);
	x->eval_begin = DECL("rt_eval_begin", i32, c, i64);
	x->eval_end = DECL("rt_eval_end", i32, c, LLVMPointerType(h->f64, 0), pi32);
	x->cli_finish = DECL("rt_cli_finish", i32, pcli, c);
	x->init = DECL("rt_init", i32, pi32, LLVMPointerType(h->pp8, 0), LLVMPointerType(h->options, 0),
	               LLVMPointerType(c, 0));
	x->abort = DECL("rt_abort", i32, c, i32);
	x->finalize = DECL("rt_finalize", i32, c);
	x->model_bytes = DECL("rt_model_bytes", i32, c, ptrain, i32, pspec, LLVMPointerType(i64, 0));
	x->arena_init = DECL("rt_arena_init", i32, c, i64);
	x->model_init = DECL("rt_model_init", i32, c, ptrain, i32, pspec);
	x->arena_alloc = DECL("rt_arena_alloc", i32, c, i64, h->pp8);
	x->ckpt_load = DECL("rt_ckpt_load", i32, c, p8);
	x->profile = DECL("rt_profile", i32, c, i32, i32, p8);
	x->step_begin = DECL("rt_step_begin", i32, c);
	x->step_end = DECL("rt_step_end", i32, c, LLVMPointerType(h->f64, 0), pi32);
	x->run_f = DECL("rt_run_f", i32, c, i32, i64, pf, pf, p8);
	x->run_r = DECL("rt_run_r", i32, c, i32, i64, pf, pf, p8);
	x->run_b = DECL("rt_run_b", i32, c, i32, i64, pf, pf, p8, p8);
	x->run_w = DECL("rt_run_w", i32, c, i32, i64, p8);
	x->send = DECL("rt_post_send", i32, c, i32, p8, i64, i32, i32, i32, pi32);
	x->recv = DECL("rt_post_recv", i32, c, i32, p8, i64, i32, i32, i32, pi32);
	x->wait = DECL("rt_wait", i32, c, i32);
	x->post_coll = DECL("rt_post_coll", i32, c, i32, i32, i32, p8, i64, pi32);
	x->update = DECL("rt_update", i32, c, i32, i32);
	x->tie = DECL("rt_tie_post", i32, c, i32, pi32);
	x->waitall = DECL("rt_waitall", i32, c, i32, pi32);
	x->group_begin = DECL("rt_group_begin", i32, c);
	x->group_end = DECL("rt_group_end", i32, c, pi32);
	x->dev_buffers = DECL("rt_device_buffers", i32, c, i64, h->pp8);
	x->dev_attach = DECL(x->dev_attach_name, i32, c, i32, i32, h->pp8, h->pp8, pi32);
}

/* A device rank's modules: names, images (the CUDA target's PTX text, or
 * the emulator's entry tables, octo_emu_<name>, linked in from the modules'
 * host objects) and each layer's module.  Returns rt_device_attach_*'s
 * arguments after ctx. */
static void device_tables(hb *h, const cg_rank *r, LLVMValueRef *args)
{
	int n = r->nmods;
	LLVMValueRef *nv = calloc((size_t)n + 1, sizeof *nv), *iv = calloc((size_t)n + 1, sizeof *iv);
	LLVMValueRef *lv = calloc((size_t)r->nlayers + 1, sizeof *lv);
	if (!nv || !iv || !lv)
		ir_bug("out of memory");
	for (int i = 0; i < n; i++) {
		char g[64];
		snprintf(g, sizeof g, "octo_mod_name%d", i);
		nv[i] = cstring(h, g, r->mod_names[i]);
		if (r->dev == CG_TARGET_CUDA) {
			snprintf(g, sizeof g, "octo_ptx%d", i);
			iv[i] = cstring(h, g, r->mod_ptx[i]);
		} else {
			char *sym = malloc(strlen(r->mod_names[i]) + 16);
			if (!sym)
				ir_bug("out of memory");
			sprintf(sym, "octo_emu_%s", r->mod_names[i]);
			iv[i] = LLVMAddGlobal(h->mod, h->i8, sym); /* external: the module's table */
			free(sym);
		}
	}
	for (int i = 0; i < r->nlayers; i++)
		lv[i] = i32c(h, r->layer_mod[i]);
	LLVMTypeRef arr = LLVMArrayType(h->p8, (unsigned)n);
	LLVMValueRef names = global_const(h, "octo_mod_names", arr, LLVMConstArray(h->p8, nv, (unsigned)n));
	LLVMValueRef images = global_const(h, "octo_mod_images", arr, LLVMConstArray(h->p8, iv, (unsigned)n));
	LLVMValueRef lm = global_const(h, "octo_layer_mod", LLVMArrayType(h->i32, (unsigned)r->nlayers),
	                               LLVMConstArray(h->i32, lv, (unsigned)r->nlayers));
	args[0] = i32c(h, r->bf16);
	args[1] = i32c(h, n);
	args[2] = LLVMConstBitCast(names, h->pp8);
	args[3] = LLVMConstBitCast(images, h->pp8);
	args[4] = LLVMConstBitCast(lm, LLVMPointerType(h->i32, 0));
	free(nv);
	free(iv);
	free(lv);
}

/* The constants: layer table, stash slices, op table, program info. */
typedef struct tables {
	LLVMValueRef layers, act_at, ws_at, ops, prog;
	LLVMTypeRef layers_t, act_at_t, ops_t;
} tables;

static void build_tables(hb *h, const cg_rank *r, tables *t)
{
	int nl = r->nlayers;
	LLVMValueRef *v = calloc((size_t)(nl > r->nops ? nl : r->nops) + 1, sizeof *v);
	if (!v)
		ir_bug("out of memory");
	for (int i = 0; i < nl; i++)
		v[i] = mirror_const(h, h->spec, spec_fields, NF(spec_fields), &r->layers[i], NULL);
	t->layers_t = LLVMArrayType(h->spec, (unsigned)nl);
	t->layers = global_const(h, "octo_layers", t->layers_t, LLVMConstArray(h->spec, v, (unsigned)nl));
	t->act_at_t = LLVMArrayType(h->i64, (unsigned)nl);
	for (int i = 0; i < nl; i++)
		v[i] = i64c(h, r->act_at[i]);
	t->act_at = global_const(h, "octo_act_at", t->act_at_t, LLVMConstArray(h->i64, v, (unsigned)nl));
	for (int i = 0; i < nl; i++)
		v[i] = i64c(h, r->ws_at[i]);
	t->ws_at = global_const(h, "octo_ws_at", t->act_at_t, LLVMConstArray(h->i64, v, (unsigned)nl));
	for (int i = 0; i < r->nops; i++)
		v[i] = mirror_const(h, h->op, op_fields, NF(op_fields), &r->ops[i], NULL);
	t->ops_t = LLVMArrayType(h->op, (unsigned)r->nops);
	t->ops = global_const(h, "octo_ops", t->ops_t, LLVMConstArray(h->op, v, (unsigned)r->nops));
	free(v);
	LLVMValueRef ptrs[NF(prog_fields)] = {cstring(h, "octo_about", r->prog.about),
	                                      r->prog.data ? cstring(h, "octo_data", r->prog.data) : NULL};
	t->prog = global_const(h, "octo_prog", h->prog,
	                       mirror_const(h, h->prog, prog_fields, NF(prog_fields), &r->prog, ptrs));
}

/* One layer loop of an F, B or W op: h runs from `from` towards `to`
 * (step +1 or -1); body(h) emits the runtime call and returns its rc. */
typedef struct op_vals {
	LLVMValueRef ctx, base, h0, h1, mb, in, out, last, act, ws;
	tables *t;
	externs *x;
} op_vals;

static LLVMValueRef stash(hb *h, const op_vals *o, LLVMValueRef slices, LLVMValueRef off, LLVMValueRef hh)
{
	LLVMValueRef idx[2] = {i64c(h, 0), LLVMBuildSExt(h->b, hh, h->i64, "")};
	LLVMValueRef slot = LLVMBuildInBoundsGEP2(h->b, o->t->act_at_t, slices, idx, 2, "");
	LLVMValueRef at_ = LLVMBuildAdd(h->b, off, LLVMBuildLoad2(h->b, h->i64, slot, ""), "");
	return LLVMBuildGEP2(h->b, h->i8, o->base, &at_, 1, "stash");
}

static void layer_loop(hb *h, const op_vals *o, cg_op_kind kind, LLVMBasicBlockRef next)
{
	bool down = kind == CG_B;
	LLVMValueRef from = down ? o->h1 : o->h0, to = down ? o->h0 : o->h1;
	LLVMBasicBlockRef entry = LLVMGetInsertBlock(h->b), head = block(h, "layer"),
	                  body = block(h, "layer.body");
	LLVMBuildBr(h->b, head);
	at(h, head);
	LLVMValueRef hh = LLVMBuildPhi(h->b, h->i32, "h");
	LLVMAddIncoming(hh, &from, &entry, 1);
	LLVMValueRef more = LLVMBuildICmp(h->b, down ? LLVMIntSGE : LLVMIntSLE, hh, to, "");
	LLVMBuildCondBr(h->b, more, body, next);
	at(h, body);
	LLVMValueRef first = LLVMBuildICmp(h->b, LLVMIntEQ, hh, from, "");
	LLVMValueRef final = LLVMBuildICmp(h->b, LLVMIntEQ, hh, to, "");
	LLVMValueRef rc;
	if (kind == CG_F || kind == CG_R) {
		LLVMValueRef x = LLVMBuildSelect(h->b, first, o->in, o->out, "x");
		LLVMValueRef y = LLVMBuildSelect(h->b, final, o->last, o->out, "y");
		rc = CALL(kind == CG_F ? o->x->run_f : o->x->run_r, o->ctx, hh, o->mb, x, y,
		          stash(h, o, o->t->act_at, o->act, hh));
	} else if (kind == CG_B) {
		LLVMValueRef dy = LLVMBuildSelect(h->b, first, o->in, o->out, "dy");
		LLVMValueRef dx = LLVMBuildSelect(h->b, final, o->last, o->out, "dx");
		rc = CALL(o->x->run_b, o->ctx, hh, o->mb, dy, dx, stash(h, o, o->t->act_at, o->act, hh),
		          stash(h, o, o->t->ws_at, o->ws, hh));
	} else {
		rc = CALL(o->x->run_w, o->ctx, hh, o->mb, stash(h, o, o->t->ws_at, o->ws, hh));
	}
	check(h, rc);
	LLVMValueRef nh = LLVMBuildAdd(h->b, hh, i32c(h, down ? -1 : 1), "");
	LLVMBasicBlockRef latch = LLVMGetInsertBlock(h->b);
	LLVMBuildBr(h->b, head);
	LLVMAddIncoming(hh, &nh, &latch, 1);
}

/* if (p != NULL) { rc = fn(ctx, p); check } */
static void if_path(hb *h, LLVMValueRef p, LLVMValueRef fn, LLVMValueRef ctx, const char *name)
{
	LLVMBasicBlockRef yes = block(h, name), done = block(h, "");
	LLVMBuildCondBr(h->b, LLVMBuildIsNull(h->b, p, ""), done, yes);
	at(h, yes);
	check(h, CALL(fn, ctx, p));
	LLVMBuildBr(h->b, done);
	at(h, done);
}

/* if (p != NULL) *p = RT_NO_REQ: the slot of an op an evaluation drops,
 * so that the op's wait finds nothing to wait for. */
static void clear_slot(hb *h, LLVMValueRef p)
{
	LLVMBasicBlockRef yes = block(h, "clear"), done = block(h, "");
	LLVMBuildCondBr(h->b, LLVMBuildIsNull(h->b, p, ""), done, yes);
	at(h, yes);
	LLVMBuildStore(h->b, i32c(h, RT_NO_REQ), p);
	LLVMBuildBr(h->b, done);
	at(h, done);
}

/* for (i = 0; i < nops; i++) switch (ops[i].kind) ...: one walk of the op
 * table, with the request slots `reqs`.  A training step runs every op; an
 * evaluation pass (eval) the F ops and the activations' sends and
 * receives, in the same order, and drops the rest (R, B, W, gradients,
 * collectives, updates: their slots are cleared, so their waits are
 * no-ops and a group of gradients alone is empty).  Every rank drops the
 * same ops, so the pass keeps the step's proof (runtime/rt_eval.c). */
static void walk_ops(hb *h, const cg_rank *r, tables *tp, externs *xp, LLVMValueRef ctx,
                     LLVMValueRef base, LLVMValueRef reqs, LLVMTypeRef reqs_t, bool eval)
{
	tables t = *tp;
	externs x = *xp;
	LLVMValueRef rc;
	LLVMBasicBlockRef pre = LLVMGetInsertBlock(h->b), op_head = block(h, "op"),
	                  op_body = block(h, "op.body"), op_next = block(h, "op.next"),
	                  ops_done = block(h, "ops.done");
	LLVMBuildBr(h->b, op_head);
	at(h, op_head);
	LLVMValueRef i = LLVMBuildPhi(h->b, h->i32, "i");
	LLVMAddIncoming(i, (LLVMValueRef[]){i32c(h, 0)}, &pre, 1);
	LLVMBuildCondBr(h->b, LLVMBuildICmp(h->b, LLVMIntSLT, i, i32c(h, r->nops), ""), op_body, ops_done);
	at(h, op_body);
	LLVMValueRef idx[2] = {i64c(h, 0), LLVMBuildSExt(h->b, i, h->i64, "")};
	LLVMValueRef op = LLVMBuildInBoundsGEP2(h->b, t.ops_t, t.ops, idx, 2, "op");
	LLVMValueRef f[OP_NFIELDS];
	static const char *const fname[OP_NFIELDS] = {"kind", "h0", "h1", "mb", "peer", "tstage", "tkind",
	                                              "req", "bytes", "in", "out", "last", "act", "ws"};
	for (int k = 0; k < OP_NFIELDS; k++)
		f[k] = load_field(h, h->op, op, k, ftype_llvm(h, op_fields[k].type), fname[k]);
	op_vals ov = {.ctx = ctx, .base = base, .h0 = f[OP_H0], .h1 = f[OP_H1],
	              .mb = LLVMBuildSExt(h->b, f[OP_MB], h->i64, "mb64"),
	              .in = buf_ptr(h, base, f[OP_IN], h->pf, "in"),
	              .out = buf_ptr(h, base, f[OP_OUT], h->pf, "out"),
	              .last = buf_ptr(h, base, f[OP_LAST], h->pf, "last"), .act = f[OP_ACT],
	              .ws = f[OP_WS], .t = &t, .x = &x};
	LLVMValueRef in8 = buf_ptr(h, base, f[OP_IN], h->p8, "in8");
	LLVMValueRef none = LLVMBuildICmp(h->b, LLVMIntSLT, f[OP_REQ], i32c(h, 0), "");
	LLVMValueRef ridx[2] = {i64c(h, 0), LLVMBuildSExt(h->b, f[OP_REQ], h->i64, "")};
	LLVMValueRef reqp = LLVMBuildSelect(h->b, none, LLVMConstNull(LLVMPointerType(h->i32, 0)),
	                                    LLVMBuildGEP2(h->b, reqs_t, reqs, ridx, 2, ""), "req");
	LLVMValueRef sw = LLVMBuildSwitch(h->b, f[OP_KIND], op_next, CG_NOPS);
	for (int k = 0; k < CG_NOPS; k++) {
		LLVMBasicBlockRef bb = block(h, cg_op_names[k]);
		LLVMAddCase(sw, i32c(h, k), bb);
		at(h, bb);
		switch ((cg_op_kind)k) {
		case CG_F:
		case CG_R:
		case CG_B:
		case CG_W:
			if (eval && k != CG_F) {
				clear_slot(h, reqp);
				LLVMBuildBr(h->b, op_next);
				continue;
			}
			layer_loop(h, &ov, (cg_op_kind)k, op_next);
			continue;
		case CG_SEND:
		case CG_RECV:
			if (eval) { /* activations only */
				LLVMBasicBlockRef post = block(h, "post"), drop = block(h, "drop");
				LLVMBuildCondBr(h->b, LLVMBuildICmp(h->b, LLVMIntEQ, f[OP_TKIND],
				                                    i32c(h, RT_MSG_ACT), "act"), post, drop);
				at(h, drop);
				clear_slot(h, reqp);
				LLVMBuildBr(h->b, op_next);
				at(h, post);
			}
			rc = CALL(k == CG_SEND ? x.send : x.recv, ctx, f[OP_PEER], in8, f[OP_BYTES],
			          f[OP_TSTAGE], f[OP_MB], f[OP_TKIND], reqp);
			break;
		case CG_WAIT: rc = CALL(x.wait, ctx, LLVMBuildLoad2(h->b, h->i32, reqp, "")); break;
		case CG_GROUP_BEGIN: rc = CALL(x.group_begin, ctx); break;
		case CG_GROUP_END: rc = CALL(x.group_end, ctx, reqp); break;
		case CG_COLL:
		case CG_UPDATE:
		case CG_TIE:
			if (eval) {
				clear_slot(h, reqp);
				LLVMBuildBr(h->b, op_next);
				continue;
			}
			rc = k == CG_COLL ? CALL(x.post_coll, ctx, f[OP_TKIND], f[OP_H0], f[OP_H1], in8,
			                         f[OP_BYTES], reqp)
			   : k == CG_TIE  ? CALL(x.tie, ctx, f[OP_H0], reqp)
			                  : CALL(x.update, ctx, f[OP_H0], f[OP_H1]);
			break;
		case CG_NOPS: ir_bug("codegen: bad op kind");
		}
		check(h, rc);
		LLVMBuildBr(h->b, op_next);
	}
	at(h, op_next);
	LLVMValueRef ni = LLVMBuildAdd(h->b, i, i32c(h, 1), "");
	LLVMBuildBr(h->b, op_head);
	LLVMAddIncoming(i, &ni, &op_next, 1);

	at(h, ops_done);
}

static void build_main(hb *h, const cg_rank *r)
{
	externs x = {.dev_attach_name = r->dev == CG_TARGET_CUDA ? "rt_device_attach_cuda"
	                                                        : "rt_device_attach_emu"};
	tables t;
	declare_runtime(h, &x);
	build_tables(h, r, &t);
	LLVMTypeRef mt = LLVMFunctionType(h->i32, (LLVMTypeRef[]){h->i32, h->pp8}, 2, 0);
	h->main = LLVMAddFunction(h->mod, "main", mt);
	LLVMValueRef argc = LLVMGetParam(h->main, 0), argv = LLVMGetParam(h->main, 1);
	LLVMSetValueName2(argc, "argc", 4);
	LLVMSetValueName2(argv, "argv", 4);
	LLVMBasicBlockRef entry = block(h, "entry");

	/* The abort block first, so every check can branch to it. */
	h->fail = block(h, "fail");
	at(h, h->fail);
	h->fail_rc = LLVMBuildPhi(h->b, h->i32, "rc");

	at(h, entry);
	LLVMValueRef argc_slot = LLVMBuildAlloca(h->b, h->i32, "argc.slot");
	LLVMValueRef argv_slot = LLVMBuildAlloca(h->b, h->pp8, "argv.slot");
	LLVMValueRef cli = LLVMBuildAlloca(h->b, h->cli, "cli");
	h->ctx_slot = LLVMBuildAlloca(h->b, h->pctx, "ctx.slot");
	LLVMValueRef opts = LLVMBuildAlloca(h->b, h->options, "options");
	LLVMValueRef train = LLVMBuildAlloca(h->b, h->train, "train");
	LLVMValueRef model_bytes = LLVMBuildAlloca(h->b, h->i64, "model.bytes");
	LLVMValueRef base_slot = LLVMBuildAlloca(h->b, h->p8, "base.slot");
	LLVMTypeRef reqs_t = LLVMArrayType(h->i32, (unsigned)(r->nreqs ? r->nreqs : 1));
	LLVMValueRef reqs = LLVMBuildAlloca(h->b, reqs_t, "reqs");
	/* Every slot starts with nothing pending: a carried wait's slot is
	 * first filled by its post at the end of the first step. */
	unsigned nr = (unsigned)(r->nreqs ? r->nreqs : 1);
	LLVMValueRef *none_v = malloc(nr * sizeof *none_v);
	if (!none_v)
		ir_bug("out of memory");
	for (unsigned k = 0; k < nr; k++)
		none_v[k] = i32c(h, RT_NO_REQ);
	LLVMValueRef none_reqs = LLVMConstArray(h->i32, none_v, nr);
	free(none_v);
	LLVMBuildStore(h->b, none_reqs, reqs);
	LLVMValueRef eval_reqs = LLVMBuildAlloca(h->b, reqs_t, "eval.reqs");
	LLVMValueRef loss = LLVMBuildAlloca(h->b, h->f64, "loss");
	LLVMValueRef have = LLVMBuildAlloca(h->b, h->i32, "have.loss");
	LLVMBuildStore(h->b, argc, argc_slot);
	LLVMBuildStore(h->b, argv, argv_slot);
	LLVMBuildStore(h->b, LLVMConstNull(h->pctx), h->ctx_slot);
	rt_options o0 = {0};
	LLVMBuildStore(h->b, mirror_const(h, h->options, options_fields, NF(options_fields), &o0, NULL), opts);
	LLVMBuildStore(h->b, mirror_const(h, h->train, train_fields, NF(train_fields), &r->train, NULL), train);

	/* The command line; --help and usage errors end here, before MPI. */
	LLVMValueRef rc = CALL(x.cli_parse, argc, argv, t.prog, cli);
	LLVMBasicBlockRef start = block(h, "start"), leave = block(h, "leave");
	LLVMBuildCondBr(h->b, LLVMBuildICmp(h->b, LLVMIntEQ, rc, i32c(h, 0), ""), start, leave);
	at(h, leave);
	LLVMValueRef help = LLVMBuildICmp(h->b, LLVMIntEQ, rc, i32c(h, 1), "");
	LLVMBuildRet(h->b, LLVMBuildSelect(h->b, help, i32c(h, 0), i32c(h, 2), ""));

	at(h, start);
	LLVMValueRef trace = load_field(h, h->cli, cli, CLI_TRACE, h->p8, "trace");
	LLVMBuildStore(h->b, trace, field_ptr(h, h->options, opts, OPTIONS_TRACE, ""));
	rc = CALL(x.init, argc_slot, argv_slot, opts, h->ctx_slot);
	LLVMBasicBlockRef init_failed = block(h, "init.failed"), up = block(h, "up");
	LLVMBuildCondBr(h->b, LLVMBuildICmp(h->b, LLVMIntNE, rc, i32c(h, 0), ""), init_failed, up);
	at(h, init_failed);
	CALL(x.abort, LLVMConstNull(h->pctx), rc);
	LLVMBuildRet(h->b, i32c(h, 1));

	/* The model and the buffer block. */
	at(h, up);
	LLVMValueRef ctx = LLVMBuildLoad2(h->b, h->pctx, h->ctx_slot, "ctx");
	check(h, CALL(x.cli_start, cli, ctx));
	LLVMValueRef data = load_field(h, h->cli, cli, CLI_DATA, h->p8, "data");
	LLVMBuildStore(h->b, data, field_ptr(h, h->train, train, TRAIN_TEXT, ""));
	CALL(x.cli_train, cli, train); /* the schedule's and clipping's options */
	LLVMValueRef layers = LLVMConstPointerCast(t.layers, LLVMPointerType(h->spec, 0));
	LLVMValueRef nl = i32c(h, r->nlayers);
	check(h, CALL(x.model_bytes, ctx, train, nl, layers, model_bytes));
	/* Room for the model, the buffer block (aligned) and profiling; on a
	 * device rank the buffer block is device memory. */
	if (r->dev) {
		LLVMValueRef a[6] = {ctx};
		device_tables(h, r, a + 1);
		check(h, call(h, x.dev_attach, 6, a, ""));
	}
	uint64_t host_bytes = (r->dev ? 0 : r->buf_bytes) + r->prof_bytes + 16 * RT_ALIGN;
	LLVMValueRef total = LLVMBuildAdd(h->b, LLVMBuildLoad2(h->b, h->i64, model_bytes, ""),
	                                  i64c(h, (long long)host_bytes), "arena.bytes");
	check(h, CALL(x.arena_init, ctx, total));
	check(h, CALL(x.model_init, ctx, train, nl, layers));
	check(h, CALL(r->dev ? x.dev_buffers : x.arena_alloc, ctx,
	              i64c(h, (long long)(r->buf_bytes ? r->buf_bytes : RT_ALIGN)), base_slot));
	LLVMValueRef base = LLVMBuildLoad2(h->b, h->p8, base_slot, "base");
	if_path(h, load_field(h, h->cli, cli, CLI_RESUME, h->p8, "resume"), x.ckpt_load, ctx, "resume");

	/* Profiling mode instead of training. */
	LLVMValueRef prof = load_field(h, h->cli, cli, CLI_PROFILE, h->p8, "profile");
	LLVMBasicBlockRef profile = block(h, "profile"), training = block(h, "training"),
	                  final = block(h, "finalize");
	LLVMBuildCondBr(h->b, LLVMBuildIsNull(h->b, prof, ""), training, profile);
	at(h, profile);
	check(h, CALL(x.profile, ctx, i32c(h, 3), i32c(h, 15), prof));
	LLVMBuildBr(h->b, final);

	/* for (step = 0; step < cli.steps; step++) */
	at(h, training);
	LLVMValueRef steps = load_field(h, h->cli, cli, CLI_STEPS, h->i64, "steps");
	LLVMBasicBlockRef step_head = block(h, "step"), step_body = block(h, "step.body"),
	                  done = block(h, "trained");
	LLVMBuildBr(h->b, step_head);
	at(h, step_head);
	LLVMValueRef step = LLVMBuildPhi(h->b, h->i64, "step");
	LLVMAddIncoming(step, (LLVMValueRef[]){i64c(h, 0)}, &training, 1);
	LLVMBuildCondBr(h->b, LLVMBuildICmp(h->b, LLVMIntSLT, step, steps, ""), step_body, done);
	at(h, step_body);
	CALL(x.cli_step_begin, cli);
	check(h, CALL(x.step_begin, ctx));

	walk_ops(h, r, &t, &x, ctx, base, reqs, reqs_t, false);

	/* The end of the step: the sends nobody waited for, loss and AdamW. */
	if (r->nend) {
		LLVMValueRef z[2] = {i64c(h, 0), i64c(h, 0)};
		check(h, CALL(x.waitall, ctx, i32c(h, r->nend), LLVMBuildInBoundsGEP2(h->b, reqs_t, reqs, z, 2, "")));
	}
	check(h, CALL(x.step_end, ctx, loss, have));
	/* The step's report, metrics and periodic save; 1: every rank agreed
	 * to stop here (a signal), and goes on to the save. */
	rc = CALL(x.cli_step_end, cli, ctx, LLVMBuildLoad2(h->b, h->f64, loss, ""),
	          LLVMBuildLoad2(h->b, h->i32, have, ""));
	LLVMBasicBlockRef go_on = block(h, "step.next");
	LLVMBuildCondBr(h->b, LLVMBuildICmp(h->b, LLVMIntEQ, rc, i32c(h, 1), "stop"), done, go_on);
	at(h, go_on);
	check(h, rc);

	/* for (pass = 0; pass < rt_cli_eval_passes(); pass++): the evaluation
	 * (--eval-every), its own request slots, nothing pending at the start. */
	LLVMValueRef npass = CALL(x.cli_eval_passes, cli, ctx);
	check(h, LLVMBuildSelect(h->b, LLVMBuildICmp(h->b, LLVMIntSLT, npass, i32c(h, 0), ""), npass,
	                         i32c(h, 0), ""));
	LLVMBasicBlockRef ev_pre = LLVMGetInsertBlock(h->b), ev_head = block(h, "eval"),
	                  ev_body = block(h, "eval.body"), ev_done = block(h, "eval.done");
	LLVMBuildBr(h->b, ev_head);
	at(h, ev_head);
	LLVMValueRef pass = LLVMBuildPhi(h->b, h->i32, "pass");
	LLVMAddIncoming(pass, (LLVMValueRef[]){i32c(h, 0)}, &ev_pre, 1);
	LLVMBuildCondBr(h->b, LLVMBuildICmp(h->b, LLVMIntSLT, pass, npass, ""), ev_body, ev_done);
	at(h, ev_body);
	check(h, CALL(x.eval_begin, ctx, LLVMBuildSExt(h->b, pass, h->i64, "")));
	LLVMBuildStore(h->b, none_reqs, eval_reqs);
	walk_ops(h, r, &t, &x, ctx, base, eval_reqs, reqs_t, true);
	if (r->nend) {
		LLVMValueRef z[2] = {i64c(h, 0), i64c(h, 0)};
		check(h, CALL(x.waitall, ctx, i32c(h, r->nend),
		              LLVMBuildInBoundsGEP2(h->b, reqs_t, eval_reqs, z, 2, "")));
	}
	check(h, CALL(x.eval_end, ctx, loss, have));
	check(h, CALL(x.cli_eval_end, cli, ctx, LLVMBuildLoad2(h->b, h->f64, loss, ""),
	              LLVMBuildLoad2(h->b, h->i32, have, ""), pass));
	LLVMValueRef npass1 = LLVMBuildAdd(h->b, pass, i32c(h, 1), "");
	LLVMBasicBlockRef ev_latch = LLVMGetInsertBlock(h->b);
	LLVMBuildBr(h->b, ev_head);
	LLVMAddIncoming(pass, &npass1, &ev_latch, 1);
	at(h, ev_done);
	LLVMValueRef nstep = LLVMBuildAdd(h->b, step, i64c(h, 1), "");
	LLVMBasicBlockRef latch = LLVMGetInsertBlock(h->b);
	LLVMBuildBr(h->b, step_head);
	LLVMAddIncoming(step, &nstep, &latch, 1);

	/* After training: checkpoint, summary and model hash, finalize. */
	at(h, done);
	check(h, CALL(x.cli_save, cli, ctx));
	check(h, CALL(x.cli_finish, cli, ctx));
	LLVMBuildBr(h->b, final);
	at(h, final);
	rc = CALL(x.finalize, ctx);
	LLVMBuildRet(h->b, LLVMBuildZExt(h->b, LLVMBuildICmp(h->b, LLVMIntNE, rc, i32c(h, 0), ""), h->i32, ""));

	at(h, h->fail);
	LLVMValueRef c = LLVMBuildLoad2(h->b, h->pctx, h->ctx_slot, "");
	CALL(x.abort, c, h->fail_rc);
	LLVMBuildRet(h->b, i32c(h, 1));
}

/* ---- verify, optimise, emit ---------------------------------------------- */

static int llvm_error(const char *what, const char *name, char *msg)
{
	diag_error((ir_loc){0}, "%s (%s): %s", what, name, msg ? msg : "unknown error");
	if (msg)
		LLVMDisposeMessage(msg);
	return -1;
}

typedef void build_fn(hb *h, const void *arg);

static void build_rank_main(hb *h, const void *arg) { build_main(h, arg); }

static int emit(build_fn *build, const void *arg, const char *name, const char *obj_path,
                const char *ll_path);

int cg_emit_object(const cg_rank *r, const char *name, const char *obj_path, const char *ll_path)
{
	return emit(build_rank_main, r, name, obj_path, ll_path);
}


static int emit(build_fn *build, const void *arg, const char *name, const char *obj_path,
                const char *ll_path)
{
	if (cg_llvm_load()) /* and the native target's initialisation */
		return -1;
	int rc = -1;
	char *msg = NULL, *triple = LLVMGetDefaultTargetTriple();
	LLVMTargetRef target;
	if (LLVMGetTargetFromTriple(triple, &target, &msg)) {
		rc = llvm_error("no LLVM target for this machine", triple, msg);
		LLVMDisposeMessage(triple);
		return rc;
	}
	/* Generic CPU: the executables run on any machine of this kind (their
	 * time is in the runtime's kernels, compiled by the C compiler). */
	LLVMTargetMachineRef tm = LLVMCreateTargetMachine(target, triple, "generic", "",
	                                                  LLVMCodeGenLevelDefault, LLVMRelocPIC,
	                                                  LLVMCodeModelDefault);
	LLVMContextRef cx = LLVMContextCreate();
	LLVMModuleRef mod = LLVMModuleCreateWithNameInContext(name, cx);
	LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
	LLVMBuilderRef b = LLVMCreateBuilderInContext(cx);
	LLVMPassBuilderOptionsRef pbo = NULL;
	LLVMErrorRef err;
	LLVMSetTarget(mod, triple);
	LLVMSetModuleDataLayout(mod, td);

	hb h = {.cx = cx, .mod = mod, .b = b, .td = td};
	h.i1 = LLVMInt1TypeInContext(cx);
	h.i8 = LLVMInt8TypeInContext(cx);
	h.i32 = LLVMInt32TypeInContext(cx);
	h.i64 = LLVMInt64TypeInContext(cx);
	h.f32 = LLVMFloatTypeInContext(cx);
	h.f64 = LLVMDoubleTypeInContext(cx);
	h.p8 = LLVMPointerType(h.i8, 0);
	h.pp8 = LLVMPointerType(h.p8, 0);
	h.pf = LLVMPointerType(h.f32, 0);
	h.ctx = LLVMStructCreateNamed(cx, "rt_ctx"); /* opaque */
	h.pctx = LLVMPointerType(h.ctx, 0);
	h.desc = mirror(&h, "rt_layer_desc", desc_fields, NF(desc_fields), sizeof(rt_layer_desc));
	h.spec = mirror(&h, "rt_layer_spec", spec_fields, NF(spec_fields), sizeof(rt_layer_spec));
	h.train = mirror(&h, "rt_train", train_fields, NF(train_fields), sizeof(rt_train));
	h.options = mirror(&h, "rt_options", options_fields, NF(options_fields), sizeof(rt_options));
	h.prog = mirror(&h, "rt_prog_info", prog_fields, NF(prog_fields), sizeof(rt_prog_info));
	h.cli = mirror(&h, "rt_cli", cli_fields, NF(cli_fields), sizeof(rt_cli));
	h.op = mirror(&h, "octo_op", op_fields, NF(op_fields), sizeof(cg_op));
	build(&h, arg);

	if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
		llvm_error("internal error: the generated module does not verify", name, msg);
		goto out;
	}
	LLVMDisposeMessage(msg);
	msg = NULL;
	pbo = LLVMCreatePassBuilderOptions();
	if ((err = LLVMRunPasses(mod, "default<O2>", tm, pbo))) {
		char *e = LLVMGetErrorMessage(err);
		diag_error((ir_loc){0}, "optimising (%s): %s", name, e);
		LLVMDisposeErrorMessage(e);
		goto out;
	}
	if (ll_path && LLVMPrintModuleToFile(mod, ll_path, &msg)) {
		llvm_error("writing the module", ll_path, msg);
		goto out;
	}
	if (LLVMTargetMachineEmitToFile(tm, mod, (char *)obj_path, LLVMObjectFile, &msg)) {
		llvm_error("emitting the object file", obj_path, msg);
		goto out;
	}
	rc = 0;
out:
	if (pbo)
		LLVMDisposePassBuilderOptions(pbo);
	LLVMDisposeBuilder(b);
	LLVMDisposeTargetData(td);
	LLVMDisposeModule(mod);
	LLVMContextDispose(cx);
	LLVMDisposeTargetMachine(tm);
	LLVMDisposeMessage(triple);
	return rc;
}
