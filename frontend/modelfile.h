/* modelfile.h: what the readers of the model file (docs/yaml.md) share,
 * lowest first: the YAML document layer (ydoc.c: the node tree, typed
 * getters, map walking), clusters (cluster.c) and layers (layers.c), which
 * frontend.c calls for the model, its training, plan and overrides.  A
 * file calls only those above it in this list.  Every reader returns 0, or
 * -1 after one diagnostic at the offending node.  Private to frontend/. */
#ifndef OCTO_MODELFILE_H
#define OCTO_MODELFILE_H

#include "yamlsrc.h"

enum { MAX_LAYERS = 100000 }; /* docs/yaml.md: a model has at most this many */

/* ---- documents (ydoc.c) ----------------------------------------------------- */

/* One parsed YAML file: its text, for locations, and its node tree. */
typedef struct ydoc {
	arena *a;             /* strings that outlive the tree */
	ysrc ys;
	yaml_document_t doc;
	bool loaded;
} ydoc;

/* Parse src into d (`what` names the file in messages: "model file");
 * an empty document is a mistake too.  ydoc_free is needed after 0 only. */
int ydoc_load(ydoc *d, arena *a, const src_file *src, const char *what);
void ydoc_free(ydoc *d);

/* A node's location, and the node of an id. */
ir_loc ydoc_at(ydoc *d, const yaml_node_t *n);
yaml_node_t *ydoc_node(ydoc *d, int id);

/* 'key', for `what` arguments. */
const char *ydoc_quoted(arena *a, const char *key);
/* What a node is, for "expected X for 'k', got Y". */
const char *ydoc_describe(ydoc *d, const yaml_node_t *n);
/* "WHAT must be at least LO, got V" (or at most HI). */
void ydoc_range_error(ir_loc loc, const char *what, int64_t v, int64_t lo, int64_t hi);

/* ---- typed values ----------------------------------------------------------
 * Each reads one node; `what` names it in messages ("'hidden'"). */

/* No tag (!!int, !foo): tags would change what a value means. */
int ydoc_check_tag(ydoc *d, const yaml_node_t *n, const char *what);
/* A node of this type, untagged. */
int ydoc_want(ydoc *d, const yaml_node_t *n, yaml_node_type_t type, const char *what);
/* A scalar's text (valid while the document lives); `expect` names the
 * wanted thing: "an integer", "a string". */
int ydoc_scalar(ydoc *d, const yaml_node_t *n, const char *what, const char *expect,
                const char **out);
/* A string, copied to d->a. */
int ydoc_str(ydoc *d, const yaml_node_t *n, const char *what, const char **out);
/* integer := plain scalar [+-]digits, within lo..hi. */
int ydoc_int(ydoc *d, const yaml_node_t *n, const char *what, int64_t lo, int64_t hi,
             int64_t *out);
/* number := plain decimal or scientific scalar, finite, as `sign`
 * (YSRC_ANY, YSRC_POSITIVE, YSRC_NONNEG) asks. */
int ydoc_num(ydoc *d, const yaml_node_t *n, const char *what, int sign, double *out);
/* rate := number > 0 | inf: a bandwidth in bytes/s, in the IR's range. */
int ydoc_rate(ydoc *d, const yaml_node_t *n, const char *what, double *out);
/* flops := number in IR_MIN_FLOPS .. IR_MAX_FLOPS. */
int ydoc_flops(ydoc *d, const yaml_node_t *n, const char *what, double *out);
/* memory := bytes (with a size suffix) | unlimited (UINT64_MAX). */
int ydoc_memory(ydoc *d, const yaml_node_t *n, const char *what, uint64_t *out);
int ydoc_bytes(ydoc *d, const yaml_node_t *n, const char *what, uint64_t *out);
/* duration := number (seconds) | number unit (s, ms, us, ns); in microseconds. */
int ydoc_duration(ydoc *d, const yaml_node_t *n, const char *what, double *out);
/* One of ir.h's names; `noun` says which table in messages. */
int ydoc_enum(ydoc *d, const yaml_node_t *n, const char *what, const char *noun,
              const char *const *names, int count, int *out);

/* ---- mappings ----------------------------------------------------------------- */

/* The keys a mapping may hold. */
typedef struct keyspec {
	const char *where;          /* "in 'model'", "at the top level" */
	const char *const *keys;
	int nkeys;
	const char *const *other;   /* known keys that do not fit this variant */
	int nother;
	const char *other_why;      /* "is for version 1, this layer is version 2" */
} keyspec;

/* Check a mapping's keys against ks (each one known, none twice) and hand
 * back each key's key and value node (NULL where absent). */
int ydoc_walk_map(ydoc *d, yaml_node_t *map, const char *what, const keyspec *ks,
                  yaml_node_t **key, yaml_node_t **val);
/* The error for key k, which ks does not hold, with a suggestion. */
void ydoc_unknown_key(ydoc *d, const yaml_node_t *k, const char *name, const keyspec *ks);
/* The first `name:` in a mapping, before ydoc_walk_map has checked it
 * (the kind and version decide which keys are valid): its value node, or
 * with ydoc_peek_key its key node; NULL when there is none. */
yaml_node_t *ydoc_peek(ydoc *d, const yaml_node_t *map, const char *name);
yaml_node_t *ydoc_peek_key(ydoc *d, const yaml_node_t *map, const char *name);
/* "missing required key 'KEY' WHERE" at map.  Returns -1. */
int ydoc_missing(ydoc *d, const yaml_node_t *map, const char *key, const char *where);

/* ---- clusters (cluster.c) ------------------------------------------------------ */

/* cluster := preset-name | file-path | cluster-map, into m->cluster and
 * the locations of its fields; relative file names are relative to dir. */
int fe_read_cluster(ir_module *m, ydoc *d, yaml_node_t *n, const char *dir);

/* The module's cluster from a preset or file named at `loc` (a flag, or
 * nowhere), with the locations of its fields. */
int fe_module_cluster(ir_module *m, const char *ref, ir_loc loc);

/* ---- layers (layers.c) -------------------------------------------------------- */

/* The state of one model load. */
typedef struct fe {
	ir_module *m;
	ydoc *d;
	int nopen;              /* layer lists being read (nested repeats) */
	yaml_node_t *placement; /* kept for the checks after the overrides */
	bool dp_written;        /* the plan section gives dp */
	bool recompute_given;   /* recompute written (YAML or flag) */
	ir_loc recompute_at;    /* where, the last time */
	bool dist_opt_given;    /* distributed_optimizer written on or off (YAML or flag) */
	bool overlap_given;     /* overlap_param_gather written (YAML or flag) */
	int overlap;            /* its value */
	ir_loc overlap_at;      /* where */
} fe;

/* layers := [ (layer | repeat-block | pattern-block)... ], appended to
 * f->m; `what` names the list in messages. */
int fe_read_layers(fe *f, yaml_node_t *seq, const char *what);

/* One embedding, first; one head, last; something between them. */
int fe_check_ends(fe *f, yaml_node_t *layers);

#endif
