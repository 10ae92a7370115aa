/* cluster.c: clusters (docs/yaml.md, "Cluster"): a preset name, a cluster
 * file or an inline mapping, which may start from a preset and change some
 * of its fields.  Presets are files under fe_models_dir()/clusters; a
 * cluster file may name another preset, to a bounded depth. */
#include "modelfile.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef OCTO_MODELS_DIR
#define OCTO_MODELS_DIR "models"
#endif

enum { MAX_PRESET_DEPTH = 8 }; /* cluster files naming presets naming ... */

static const ir_loc no_loc; /* "octopipe: error: ..." (command line) */

static bool ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), m = strlen(tail);
	return n >= m && strcmp(s + n - m, tail) == 0;
}

const char *fe_models_dir(void)
{
	const char *env = getenv("OCTOPIPE_MODELS");
	return env && *env ? env : OCTO_MODELS_DIR;
}

/* Where the fields the passes may blame were written (a preset's, then
 * the mapping's that changes them). */
typedef struct cluster_locs {
	ir_loc devices, mem;
} cluster_locs;

static int load_cluster_ref(arena *a, const char *ref, ir_loc loc, const char *dir, int depth,
                            ir_cluster *c, cluster_locs *cl);

static int cmp_str(const void *x, const void *y)
{
	return strcmp(*(const char *const *)x, *(const char *const *)y);
}

static void unknown_preset(arena *a, ir_loc loc, const char *name)
{
	const char *dirname = arena_printf(a, "%s/clusters", fe_models_dir());
	DIR *dir = opendir(dirname);
	const char **names = NULL;
	int n = 0, cap = 0;
	for (struct dirent *e; dir && (e = readdir(dir));)
		if (e->d_name[0] != '.' && ends_with(e->d_name, ".yaml"))
			*VEC_PUSH(a, names, n, cap) = arena_strndup(a, e->d_name, strlen(e->d_name) - 5);
	if (dir)
		closedir(dir);
	if (!n) {
		diag_error(loc, "unknown cluster preset '%s'; no presets in %s", ysrc_shown(a, name),
		           dirname);
		return;
	}
	qsort(names, (size_t)n, sizeof *names, cmp_str);
	diag_error(loc, "unknown cluster preset '%s'; known presets: %s", ysrc_shown(a, name),
	           ysrc_joined(a, names, n));
}

/* link := {bandwidth: number, latency: duration} */
static int read_link(ydoc *d, yaml_node_t *map, const char *key, bool have_base, ir_link *l)
{
	static const char *const keys[] = {"bandwidth", "latency"};
	keyspec ks = {arena_printf(d->a, "in '%s'", key), keys, NELEMS(keys), 0, 0, 0};
	yaml_node_t *k[NELEMS(keys)], *v[NELEMS(keys)];
	if (ydoc_walk_map(d, map, ydoc_quoted(d->a, key), &ks, k, v) < 0)
		return -1;
	for (int i = 0; i < NELEMS(keys) && !have_base; i++)
		if (!v[i])
			return ydoc_missing(d, map, keys[i], ks.where);
	if (v[0] && ydoc_rate(d, v[0], "'bandwidth'", &l->bw) < 0)
		return -1;
	if (v[1] && ydoc_duration(d, v[1], "'latency'", &l->lat) < 0)
		return -1;
	return 0;
}

enum { CL_PRESET, CL_DEVICES, CL_PER_NODE, CL_MEMORY, CL_FLOPS, CL_MEMBW, CL_INTRA, CL_INTER };

/* cluster-map := {preset?: name, devices, devices_per_node, memory,
 *                 peak_flops, memory_bandwidth, intra: link, inter: link} */
static int read_cluster_map(ydoc *d, yaml_node_t *map, const char *dir, int depth, ir_cluster *c,
                            cluster_locs *cl)
{
	static const char *const keys[] = {"preset", "devices", "devices_per_node", "memory",
	                                   "peak_flops", "memory_bandwidth", "intra", "inter"};
	keyspec ks = {"in 'cluster'", keys, NELEMS(keys), 0, 0, 0};
	yaml_node_t *k[NELEMS(keys)], *v[NELEMS(keys)];
	if (ydoc_walk_map(d, map, "'cluster'", &ks, k, v) < 0)
		return -1;
	bool base = v[CL_PRESET] != NULL;
	if (base) {
		const char *name;
		if (ydoc_str(d, v[CL_PRESET], "'preset'", &name) < 0 ||
		    load_cluster_ref(d->a, name, ydoc_at(d, v[CL_PRESET]), dir, depth + 1, c, cl) < 0)
			return -1;
	} else {
		memset(c, 0, sizeof *c);
		c->name = "inline";
		for (int i = CL_DEVICES; i < NELEMS(keys); i++)
			if (!v[i])
				return ydoc_missing(d, map, keys[i],
				                    "in 'cluster' (there is no 'preset' to take it from)");
	}
	if ((v[CL_DEVICES] && ydoc_int(d, v[CL_DEVICES], "'devices'", 1, 65536, &c->devices) < 0) ||
	    (v[CL_PER_NODE] &&
	     ydoc_int(d, v[CL_PER_NODE], "'devices_per_node'", 1, 65536, &c->per_node) < 0) ||
	    (v[CL_MEMORY] && ydoc_memory(d, v[CL_MEMORY], "'memory'", &c->mem) < 0) ||
	    (v[CL_FLOPS] && ydoc_flops(d, v[CL_FLOPS], "'peak_flops'", &c->flops) < 0) ||
	    (v[CL_MEMBW] &&
	     ydoc_rate(d, v[CL_MEMBW], "'memory_bandwidth'", &c->membw) < 0) ||
	    (v[CL_INTRA] && read_link(d, v[CL_INTRA], "intra", base, &c->intra) < 0) ||
	    (v[CL_INTER] && read_link(d, v[CL_INTER], "inter", base, &c->inter) < 0))
		return -1;
	/* Where the values the passes may blame were written (a preset's
	 * fields first, then this mapping's). */
	if (v[CL_DEVICES])
		cl->devices = ydoc_at(d, v[CL_DEVICES]);
	if (v[CL_MEMORY])
		cl->mem = ydoc_at(d, v[CL_MEMORY]);
	return 0;
}

/* cluster := preset-name | file-path | cluster-map */
static int read_cluster(ydoc *d, yaml_node_t *n, const char *dir, int depth, ir_cluster *c,
                           cluster_locs *cl)
{
	if (n->type == YAML_MAPPING_NODE)
		return read_cluster_map(d, n, dir, depth, c, cl);
	if (n->type != YAML_SCALAR_NODE) {
		diag_error(ydoc_at(d, n), "expected a preset name, a file or a mapping for 'cluster', got %s",
		           ydoc_describe(d, n));
		return -1;
	}
	const char *ref;
	if (ydoc_str(d, n, "'cluster'", &ref) < 0)
		return -1;
	return load_cluster_ref(d->a, ref, ydoc_at(d, n), dir, depth, c, cl);
}

/* cluster-file := {cluster: cluster} */
static int load_cluster_file(arena *a, const char *path, const char *name, int depth,
                             ir_cluster *c, cluster_locs *cl)
{
	src_file *src = src_read(a, path);
	if (!src)
		return -1;
	ydoc d;
	if (ydoc_load(&d, a, src, "cluster file") < 0)
		return -1;
	static const char *const keys[] = {"cluster"};
	keyspec ks = {"at the top level of a cluster file", keys, 1, 0, 0, 0};
	yaml_node_t *root = yaml_document_get_root_node(&d.doc), *k, *v;
	int rc = -1;
	if (ydoc_walk_map(&d, root, "the top level of a cluster file", &ks, &k, &v) < 0)
		goto out;
	if (!v) {
		ydoc_missing(&d, root, "cluster", "in cluster file");
		goto out;
	}
	if (read_cluster(&d, v, ysrc_dir_of(a, path), depth, c, cl) < 0)
		goto out;
	c->name = name;
	rc = 0;
out:
	ydoc_free(&d);
	return rc;
}

/* A preset name, or a file when it has a '/' or a .yaml/.yml suffix;
 * relative file names are relative to `dir`.  Errors about the reference
 * itself go to `loc`, errors inside the file into the file. */
static int load_cluster_ref(arena *a, const char *ref, ir_loc loc, const char *dir, int depth,
                            ir_cluster *c, cluster_locs *cl)
{
	if (depth > MAX_PRESET_DEPTH) {
		diag_error(loc, "cluster presets nested more than %d deep; do they name each other?",
		           MAX_PRESET_DEPTH);
		return -1;
	}
	if (strchr(ref, '/') || ends_with(ref, ".yaml") || ends_with(ref, ".yml")) {
		const char *path = ysrc_resolve(a, dir, ref);
		if (access(path, R_OK) != 0) {
			diag_error(loc, "cannot open cluster file '%s': %s", ysrc_shown(a, path),
			           strerror(errno));
			return -1;
		}
		const char *base = strrchr(ref, '/') ? strrchr(ref, '/') + 1 : ref;
		size_t n = strlen(base);
		n -= ends_with(base, ".yaml") ? 5 : ends_with(base, ".yml") ? 4 : 0;
		return load_cluster_file(a, path, arena_strndup(a, base, n), depth, c, cl);
	}
	const char *path = arena_printf(a, "%s/clusters/%s.yaml", fe_models_dir(), ref);
	if (!*ref || access(path, R_OK) != 0) {
		unknown_preset(a, loc, ref);
		return -1;
	}
	return load_cluster_file(a, path, arena_strdup(a, ref), depth, c, cl);
}

int fe_load_cluster(arena *a, const char *name_or_path, ir_cluster *out)
{
	cluster_locs cl = {{0}};
	return load_cluster_ref(a, name_or_path, no_loc, NULL, 0, out, &cl);
}

/* The module's cluster from a preset or file named at `loc` (a flag),
 * with the locations of its fields. */
int fe_module_cluster(ir_module *m, const char *ref, ir_loc loc)
{
	cluster_locs cl = {{0}};
	if (load_cluster_ref(m->arena, ref, loc, NULL, 0, &m->cluster, &cl) < 0)
		return -1;
	m->cluster_at.devices = cl.devices;
	m->cluster_at.mem = cl.mem;
	return 0;
}

int fe_read_cluster(ir_module *m, ydoc *d, yaml_node_t *n, const char *dir)
{
	cluster_locs cl = {{0}};
	if (read_cluster(d, n, dir, 0, &m->cluster, &cl) < 0)
		return -1;
	m->cluster_at.devices = cl.devices;
	m->cluster_at.mem = cl.mem;
	return 0;
}
