/* frontend.h: YAML model specification (docs/yaml.md) -> IR module.
 *
 * The frontend reads the file with libyaml's document loader, walks the node
 * tree and builds the module through ir_add_layer and friends.  Every user
 * mistake is one diag_error at the offending node's file:line:col; the first
 * one stops the load. */
#ifndef OCTO_FRONTEND_H
#define OCTO_FRONTEND_H

#include "ir.h"

/* The bucket of a data-parallel plan when none is given: bytes of f32
 * gradient per collective (docs/dataparallel.md). */
#define FE_DEFAULT_BUCKET (32ull << 20)

/* fe_overrides.dist_opt: on (true, as a flag), off, or searched. */
enum { FE_ON = 1, FE_OFF, FE_AUTO };

/* Command-line overrides of the YAML; 0 / NULL = not given. */
typedef struct fe_overrides {
	int64_t devices;      /* --devices N */
	int64_t microbatches; /* --microbatches M */
	const char *cluster;  /* --cluster NAME|FILE */
	const char *schedule; /* --schedule NAME */
	int64_t chunks;       /* --chunks V */
	const char *partition; /* --partition NAME (not "given") */
	const char *backend;   /* --backend nccl|mpi */
	const char *dtype;     /* --dtype f32|bf16|f16 */
	int64_t dp;            /* --dp D */
	bool dp_auto;          /* --dp auto: the driver's search chooses D */
	bool dp_default_auto;  /* a model file without dp (and without a given
	                        * partition or placement): dp auto too */
	const char *rank_order; /* --rank-order auto|pp-inner|dp-inner */
	int dist_opt;          /* --distributed-optimizer: 0 not given, else FE_ON, FE_OFF or FE_AUTO */
	bool no_overlap_gather; /* --no-overlap-param-gather */
	bool deterministic;    /* --deterministic */
	uint64_t bucket;       /* --bucket BYTES */
	const char *recompute; /* --recompute none|full|selective|auto */
	/* Where the numeric flags and --cluster were written (a source made of
	 * the command line, so that errors about them show the flag); unset:
	 * unknown. */
	ir_loc devices_at, microbatches_at, chunks_at, cluster_at, dtype_at, dp_at, recompute_at,
	    no_overlap_at, dist_opt_at;
} fe_overrides;

/* Load a model file.  Returns NULL after a diagnostic. */
ir_module *fe_load(const char *path, const fe_overrides *ov);

/* Same, from text already in memory (tests). */
ir_module *fe_load_src(const src_file *src, const fe_overrides *ov);

/* Apply a profile of measured layer costs (docs/profile.md) to m, which
 * fe_load made: each layer that an entry matches (its index, else its
 * kind) gets the measured F, B, W times (and stash sizes, when given),
 * marked in cost.measured; its cost stays unknown, for the cost pass to
 * complete.  Returns 0, or -1 after a diagnostic; nothing is applied then. */
int fe_load_profile(ir_module *m, const char *path);

/* Same, from text already in memory (tests). */
int fe_load_profile_src(ir_module *m, const src_file *src);

/* Resolve a cluster preset name ("h100-sxm") or a cluster file path into
 * *out, allocating strings from a.  Returns 0, or -1 after a diagnostic. */
int fe_load_cluster(arena *a, const char *name_or_path, ir_cluster *out);

/* Directory of the bundled models and presets (compiled in; the
 * OCTOPIPE_MODELS environment variable overrides it). */
const char *fe_models_dir(void);

/* Apply command-line overrides to a module built some other way, as
 * fe_load applies them (--cluster first, then the numbers and names).
 * Returns 0, or -1 after a diagnostic. */
int fe_apply_overrides(ir_module *m, const fe_overrides *ov);

/* Load one of the published per-layer-kind timing profiles (JSON:
 * `pattern`, `forward_ms`, `backward_ms`, `weight_ms`; docs/profile.md,
 * "Published profiles") as a module of its own.  The layers carry the
 * measured times and placeholder shapes, so the module models time only:
 * no memory, transfers of a token-sized activation.  The cluster is the
 * `ideal` preset unless ov names one.  Returns NULL after a diagnostic. */
ir_module *fe_load_profile_model(const char *path, const fe_overrides *ov);

/* Same, from text already in memory (tests); the model is named after
 * src->name. */
ir_module *fe_load_profile_model_src(const src_file *src, const fe_overrides *ov);

#endif
