/* profile.c: measured layer costs (docs/profile.md) onto a loaded module.
 *
 * A profile is a YAML mapping three levels deep: the units, then entries
 * per layer kind and per layer index, each with F, B and W times and
 * optional stash sizes.  It is read event by event with libyaml's parser:
 * the shape is fixed, so no node tree is needed, and reading stops at the
 * first event that does not fit, which bounds nesting and work on any
 * input.  Nothing is applied until the whole file has been read: a layer
 * that an entry matches then holds the measured fields, marked in its
 * cost's measured mask, and its cost stays unknown: the cost pass makes the
 * rest and keeps what was measured.  Layers that no entry matches are left
 * as they were. */
#include "frontend.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "yamlsrc.h"

/* The times come first (E_F..E_W_COLD), in the order of entry.t. */
enum { E_F, E_B, E_W, E_F_COLD, E_B_COLD, E_W_COLD, E_ACT, E_WSTASH, E_NKEYS };
static const char *const entry_keys[E_NKEYS] = {"f", "b", "w", "f_cold", "b_cold", "w_cold",
                                                "act_bytes", "wstash_bytes"};

enum { T_UNITS, T_KINDS, T_LAYERS, T_MEASURED, T_LINK, T_CACHE, T_NKEYS };
static const char *const top_keys[T_NKEYS] = {"units", "kinds", "layers", "measured_on", "link",
                                              "cache_bytes"};

/* measured_on: what the times were measured on.  The strings are recorded
 * for people; the shape is checked against the model. */
enum { M_HOST, M_CPU, M_DEVICE, M_DTYPE, M_SEQ, M_MBS, M_HIDDEN, M_RANKS, M_NKEYS };
static const char *const measured_keys[M_NKEYS] = {"host", "cpu", "device", "dtype",
                                                   "seq", "mbs", "hidden", "ranks"};

/* The two first are required; the host's time to post a send and a
 * receive (MPI) are optional. */
enum { L_LATENCY, L_BANDWIDTH, L_SEND, L_RECV, L_NKEYS };
static const char *const link_keys[L_NKEYS] = {"latency_us", "bandwidth", "send_us", "recv_us"};

/* Units of the times, and microseconds per unit. */
static const char *const unit_names[] = {"ms", "us", "s"};
static const double unit_us[] = {1e3, 1, 1e6};

typedef struct entry {
	bool set;
	ir_loc loc;            /* the entry's mapping */
	double t[6];           /* f, b, w, then cold, in the file's unit */
	ir_loc tloc[6];
	bool has[E_NKEYS];
	uint64_t act, wstash;
	ir_loc act_loc, wstash_loc;
} entry;

typedef struct prof {
	ir_module *m;
	arena *a;
	yev r;
	int unit;              /* index into unit_names, -1 until read */
	entry kind[IR_NLAYER_KINDS];
	entry *layer;          /* one per layer of m */
	bool has_m[M_NKEYS];   /* measured_on */
	ir_loc mloc;
	const char *mstr[M_DTYPE + 1];
	uint64_t mint[M_NKEYS];
	bool has_link;         /* link */
	double link[L_NKEYS];
	bool has_cache;        /* cache_bytes */
	uint64_t cache;
} prof;

static const yev_words words = {
	"a mapping", "a sequence", "out of memory while reading YAML",
	"in a profile; aliases are not supported here, write the entry out",
	"; tags are not part of the profile format", "a second YAML document; a profile holds one",
};

/* ---- values --------------------------------------------------------------------- */

/* time := non-negative finite number (the next event). */
static int read_time(prof *pr, const char *key, double *out, ir_loc *loc)
{
	if (yev_next(&pr->r) < 0)
		return -1;
	*loc = yev_here(&pr->r);
	bool scalar = pr->r.ev.type == YAML_SCALAR_EVENT;
	const char *what = arena_printf(pr->a, "'%s'", key);
	int rc = ysrc_number(pr->a, *loc, what, scalar ? yev_text(&pr->r) : "",
	                     scalar && yev_plain(&pr->r), YSRC_NONNEG, out);
	if (rc > 0)
		diag_error(*loc, "expected a number for %s, got %s", what, yev_describe(&pr->r));
	return rc ? -1 : 0;
}

/* A plain scalar of decimal digits as an unsigned integer: 1, 0 when it is
 * not one, -1 when it is beyond 64 bits. */
static int parse_index(const prof *pr, uint64_t *out)
{
	const char *s = yev_text(&pr->r);
	if (pr->r.ev.type != YAML_SCALAR_EVENT || !yev_plain(&pr->r) || !*s)
		return 0;
	if (strspn(s, "0123456789") != strlen(s))
		return 0;
	errno = 0;
	*out = strtoull(s, NULL, 10);
	return errno == ERANGE ? -1 : 1;
}

/* bytes := non-negative integer (the next event). */
static int read_bytes(prof *pr, const char *key, uint64_t *out, ir_loc *loc)
{
	if (yev_next(&pr->r) < 0)
		return -1;
	if (loc)
		*loc = yev_here(&pr->r);
	int rc = parse_index(pr, out);
	if (rc == 0)
		diag_error(yev_here(&pr->r), "expected a non-negative integer (bytes) for '%s', got %s",
		           key, yev_describe(&pr->r));
	else if (rc < 0)
		diag_error(yev_here(&pr->r), "integer %s for '%s' is out of range",
		           ysrc_shown(pr->a, yev_text(&pr->r)), key);
	return rc > 0 ? 0 : -1;
}

/* entry := {f: time, b: time, w: time, (f_cold: time, b_cold: time, w_cold: time)?,
 *           act_bytes?: bytes, wstash_bytes?: bytes} */
static int read_entry(prof *pr, const char *what, entry *e)
{
	if (yev_want_mapping(&pr->r, what) < 0)
		return -1;
	memset(e, 0, sizeof *e);
	e->set = true;
	e->loc = yev_here(&pr->r);
	const char *where = arena_printf(pr->a, "in %s", what);
	ir_loc kloc[E_NKEYS];
	int rc;
	while ((rc = yev_next_key(&pr->r, where)) > 0) {
		int k = yev_key_index(&pr->r, "key", where, entry_keys, E_NKEYS, e->has, kloc);
		if (k < 0)
			return -1;
		if ((k <= E_W_COLD && read_time(pr, entry_keys[k], &e->t[k], &e->tloc[k]) < 0) ||
		    (k == E_ACT && read_bytes(pr, entry_keys[k], &e->act, &e->act_loc) < 0) ||
		    (k == E_WSTASH && read_bytes(pr, entry_keys[k], &e->wstash, &e->wstash_loc) < 0))
			return -1;
	}
	if (rc < 0)
		return -1;
	for (int k = E_F; k <= E_W; k++)
		if (!e->has[k]) {
			diag_error(e->loc, "missing required key '%s' %s", entry_keys[k], where);
			return -1;
		}
	bool cold = e->has[E_F_COLD] || e->has[E_B_COLD] || e->has[E_W_COLD];
	for (int k = E_F_COLD; cold && k <= E_W_COLD; k++)
		if (!e->has[k]) {
			diag_error(e->loc, "missing key '%s' %s: the cold times come as f_cold, b_cold and "
			                   "w_cold together", entry_keys[k], where);
			return -1;
		}
	return 0;
}

/* kinds := {KIND: entry, ...} */
static int read_kinds(prof *pr)
{
	if (yev_want_mapping(&pr->r, "'kinds'") < 0)
		return -1;
	ir_loc first[IR_NLAYER_KINDS];
	bool seen[IR_NLAYER_KINDS] = {0};
	int rc;
	while ((rc = yev_next_key(&pr->r, "in 'kinds'")) > 0) {
		int k = yev_key_index(&pr->r, "layer kind", "in 'kinds'", ir_layer_kind_names,
		                      IR_NLAYER_KINDS, seen, first);
		if (k < 0)
			return -1;
		if (read_entry(pr, arena_printf(pr->a, "'%s'", ir_layer_kind_names[k]), &pr->kind[k]) < 0)
			return -1;
	}
	return rc;
}

/* layers := {INDEX: entry, ...} */
static int read_layers(prof *pr)
{
	if (yev_want_mapping(&pr->r, "'layers'") < 0)
		return -1;
	int n = pr->m->nlayers, rc;
	ir_loc *first = arena_alloc(pr->a, (size_t)n * sizeof *first);
	while ((rc = yev_next_key(&pr->r, "in 'layers'")) > 0) {
		uint64_t i;
		int ok = parse_index(pr, &i);
		const char *s = yev_text(&pr->r);
		if (ok == 0 && yev_plain(&pr->r) && s[0] == '-' && s[1] &&
		    strspn(s + 1, "0123456789") == strlen(s + 1))
			ok = -1; /* a negative index */
		if (ok == 0) {
			diag_error(yev_here(&pr->r), "expected a layer index (an integer) in 'layers', got %s",
			           yev_describe(&pr->r));
			return -1;
		}
		if (ok < 0 || i >= (uint64_t)n) {
			diag_error(yev_here(&pr->r),
			           "layer index %s is out of range; the model has %d layers (0..%d)",
			           ysrc_shown(pr->a, yev_text(&pr->r)), n, n - 1);
			return -1;
		}
		if (pr->layer[i].set) {
			diag_error(yev_here(&pr->r), "duplicate layer %llu in 'layers'",
			           (unsigned long long)i);
			diag_note(first[i], "the first entry for layer %llu is here", (unsigned long long)i);
			return -1;
		}
		first[i] = yev_here(&pr->r);
		if (read_entry(pr, arena_printf(pr->a, "layer %llu", (unsigned long long)i),
		               &pr->layer[i]) < 0)
			return -1;
	}
	return rc;
}

/* measured_on := {host?: str, cpu?: str, device?: str, dtype?: str, seq?: int, mbs?: int,
 *                 hidden?: int, ranks?: int} */
static int read_measured(prof *pr)
{
	if (yev_want_mapping(&pr->r, "'measured_on'") < 0)
		return -1;
	pr->mloc = yev_here(&pr->r);
	ir_loc first[M_NKEYS];
	int rc;
	while ((rc = yev_next_key(&pr->r, "in 'measured_on'")) > 0) {
		int k = yev_key_index(&pr->r, "key", "in 'measured_on'", measured_keys, M_NKEYS,
		                      pr->has_m, first);
		if (k < 0)
			return -1;
		if (k > M_DTYPE) {
			if (read_bytes(pr, measured_keys[k], &pr->mint[k], NULL) < 0)
				return -1;
			continue;
		}
		if (yev_next(&pr->r) < 0)
			return -1;
		if (pr->r.ev.type != YAML_SCALAR_EVENT) {
			diag_error(yev_here(&pr->r), "expected a string for '%s', got %s", measured_keys[k],
			           yev_describe(&pr->r));
			return -1;
		}
		pr->mstr[k] = arena_printf(pr->a, "%s", yev_text(&pr->r));
		if (k == M_DTYPE && ir_lookup(ir_dtype_names, IR_NDTYPES, pr->mstr[k]) < 0) {
			ysrc_unknown(pr->a, yev_here(&pr->r), "dtype", pr->mstr[k], "in 'measured_on'",
			             ir_dtype_names, IR_NDTYPES);
			return -1;
		}
	}
	return rc;
}

/* link := {latency_us: number >= 0, bandwidth: number > 0 (bytes/s),
 *          send_us?: number >= 0, recv_us?: number >= 0} */
static int read_link(prof *pr)
{
	if (yev_want_mapping(&pr->r, "'link'") < 0)
		return -1;
	ir_loc top = yev_here(&pr->r), first[L_NKEYS], at;
	bool seen[L_NKEYS] = {0};
	int rc;
	while ((rc = yev_next_key(&pr->r, "in 'link'")) > 0) {
		int k = yev_key_index(&pr->r, "key", "in 'link'", link_keys, L_NKEYS, seen, first);
		if (k < 0 || read_time(pr, link_keys[k], &pr->link[k], &at) < 0)
			return -1;
		if (k == L_BANDWIDTH && !ir_rate_ok(pr->link[k])) {
			diag_error(at, "'bandwidth' must be in %g .. %g bytes per second, got %g", IR_MIN_RATE,
			           IR_MAX_RATE, pr->link[k]);
			return -1;
		}
		if (k != L_BANDWIDTH && pr->link[k] > IR_MAX_US) {
			diag_error(at, "'%s' must be at most %gus (11.6 days), got %g", link_keys[k],
			           IR_MAX_US, pr->link[k]);
			return -1;
		}
	}
	if (rc < 0)
		return -1;
	for (int k = 0; k <= L_BANDWIDTH; k++)
		if (!seen[k]) {
			diag_error(top, "missing required key '%s' in 'link'", link_keys[k]);
			return -1;
		}
	pr->has_link = true;
	return 0;
}

/* profile := {units: ms | us | s, kinds?: kinds, layers?: layers, measured_on?: ...,
 *             link?: link, cache_bytes?: bytes} */
static int read_profile(prof *pr)
{
	if (yev_start(&pr->r) < 0)
		return -1;
	if (pr->r.ev.type != YAML_MAPPING_START_EVENT) {
		diag_error(yev_here(&pr->r), "expected a mapping at the top level of a profile, got %s",
		           yev_describe(&pr->r));
		return -1;
	}
	ir_loc top = yev_here(&pr->r), first[T_NKEYS];
	bool seen[T_NKEYS] = {0};
	int rc;
	while ((rc = yev_next_key(&pr->r, "at the top level of a profile")) > 0) {
		int k = yev_key_index(&pr->r, "key", "at the top level of a profile", top_keys, T_NKEYS,
		                      seen, first);
		if (k < 0)
			return -1;
		if (k == T_KINDS)
			rc = read_kinds(pr);
		else if (k == T_LAYERS)
			rc = read_layers(pr);
		else if (k == T_MEASURED)
			rc = read_measured(pr);
		else if (k == T_LINK)
			rc = read_link(pr);
		else if (k == T_CACHE)
			pr->has_cache = (rc = read_bytes(pr, top_keys[k], &pr->cache, NULL)) == 0;
		else if (yev_next(&pr->r) < 0)
			rc = -1;
		else if (pr->r.ev.type != YAML_SCALAR_EVENT) {
			diag_error(yev_here(&pr->r), "expected a string for 'units', got %s",
			           yev_describe(&pr->r));
			rc = -1;
		} else if (!*yev_text(&pr->r)) {
			diag_error(yev_here(&pr->r), "expected a unit (ms, us or s) for 'units', got %s",
			           yev_describe(&pr->r));
			rc = -1;
		} else if ((pr->unit = ir_lookup(unit_names, NELEMS(unit_names), yev_text(&pr->r))) < 0) {
			ysrc_unknown(pr->a, yev_here(&pr->r), "unit", yev_text(&pr->r), "for 'units'",
			             unit_names, NELEMS(unit_names));
			rc = -1;
		}
		if (rc < 0)
			return -1;
	}
	if (rc < 0)
		return -1;
	if (!seen[T_UNITS]) {
		diag_error(top, "missing required key 'units' at the top level of a profile (ms, us or s)");
		return -1;
	}
	return yev_end(&pr->r);
}

/* ---- applying it ---------------------------------------------------------------- */

/* Times measured on one shape say little about another: a profile that
 * records its shape must be the model's. */
static int check_shape(prof *pr)
{
	const ir_module *m = pr->m;
	const char *dt = ir_dtype_names[m->model.dtype];
	bool bad = (pr->has_m[M_SEQ] && pr->mint[M_SEQ] != (uint64_t)m->model.seq) ||
	           (pr->has_m[M_MBS] && pr->mint[M_MBS] != (uint64_t)m->train.mbs) ||
	           (pr->has_m[M_HIDDEN] && pr->mint[M_HIDDEN] != (uint64_t)m->model.hidden) ||
	           (pr->has_m[M_DTYPE] && strcmp(pr->mstr[M_DTYPE], dt) != 0);
	if (!bad)
		return 0;
	char got[160];
	snprintf(got, sizeof got, "seq %s, mbs %s, hidden %s, dtype %s",
	         pr->has_m[M_SEQ] ? arena_printf(pr->a, "%llu", (unsigned long long)pr->mint[M_SEQ]) : "?",
	         pr->has_m[M_MBS] ? arena_printf(pr->a, "%llu", (unsigned long long)pr->mint[M_MBS]) : "?",
	         pr->has_m[M_HIDDEN] ? arena_printf(pr->a, "%llu", (unsigned long long)pr->mint[M_HIDDEN]) : "?",
	         pr->has_m[M_DTYPE] ? pr->mstr[M_DTYPE] : "?");
	diag_error(pr->mloc, "the profile was measured on another shape (%s) than the model's "
	                     "(seq %lld, mbs %lld, hidden %lld, dtype %s): its times do not apply; "
	                     "measure this shape ('octopipe profile')",
	           got, (long long)m->model.seq, (long long)m->train.mbs, (long long)m->model.hidden, dt);
	return -1;
}

static int apply(prof *pr)
{
	ir_module *m = pr->m;
	if (check_shape(pr) < 0)
		return -1;
	if (pr->has_link) {
		/* Measured between two ranks of one machine: the intra-node link. */
		m->cluster.intra.lat = pr->link[L_LATENCY];
		m->cluster.intra.bw = pr->link[L_BANDWIDTH];
		m->cluster.send_post = pr->link[L_SEND];
		m->cluster.recv_post = pr->link[L_RECV];
	}
	if (pr->has_cache)
		m->cluster.cache = pr->cache;
	double scale = unit_us[pr->unit];
	ir_cost *cost = arena_alloc(pr->a, (size_t)m->nlayers * sizeof *cost);
	bool *hit = arena_alloc(pr->a, (size_t)m->nlayers * sizeof *hit);
	for (int i = 0; i < m->nlayers; i++) {
		const entry *e = pr->layer[i].set ? &pr->layer[i] : &pr->kind[m->layers[i].kind];
		if (!e->set)
			continue;
		ir_cost *c = &cost[i];
		*c = (ir_cost){.measured = IR_CF_TIMES, .cold = e->has[E_F_COLD]};
		if (c->cold)
			c->measured |= IR_CF_BIT(COLD);
		double *t[6] = {&c->f, &c->b, &c->w, &c->f_cold, &c->b_cold, &c->w_cold};
		for (int k = 0; k < (c->cold ? 6 : 3); k++) {
			*t[k] = ir_round_us(e->t[k] * scale);
			if (!(*t[k] <= IR_MAX_US)) {
				diag_error(e->tloc[k], "'%s' is too large: %g %s is beyond %gus (11.6 days; "
				           "docs/profile.md)", entry_keys[k], e->t[k], unit_names[pr->unit],
				           IR_MAX_US);
				return -1;
			}
		}
		if (e->has[E_ACT])
			c->act = e->act, c->measured |= IR_CF_BIT(ACT);
		if (e->has[E_WSTASH])
			c->wstash = e->wstash, c->measured |= IR_CF_BIT(WSTASH);
		hit[i] = true;
	}
	/* What the measured fields alone say about the step: no time at all, or
	 * bytes past the limit (docs/ir.md, "Ranges"), blamed on the stash size
	 * of the profile that passes it.  They are checked as known costs of
	 * those fields, and nothing is applied then. */
	ir_cost *old = arena_alloc(pr->a, (size_t)m->nlayers * sizeof *old);
	for (int i = 0; i < m->nlayers; i++) {
		old[i] = m->layers[i].cost;
		if (hit[i]) {
			m->layers[i].cost = cost[i];
			m->layers[i].cost.known = true;
		}
	}
	if (ir_no_time(m)) {
		for (int i = 0; i < m->nlayers; i++)
			m->layers[i].cost = old[i];
		const entry *e = pr->layer[0].set ? &pr->layer[0] : &pr->kind[m->layers[0].kind];
		diag_error(e->loc, "every layer's f, b and w are 0: the step would take no time, and "
		                   "no plan can be compared with another");
		return -1;
	}
	int over = ir_step_bytes_overflow(m);
	if (over >= 0) {
		const entry *e = pr->layer[over].set ? &pr->layer[over] : &pr->kind[m->layers[over].kind];
		ir_loc loc = m->layer_loc ? m->layer_loc[over] : m->loc;
		if (hit[over])
			loc = e->has[E_WSTASH] && (!e->has[E_ACT] || e->wstash >= e->act) ? e->wstash_loc
			    : e->has[E_ACT] ? e->act_loc : e->loc;
		for (int i = 0; i < m->nlayers; i++)
			m->layers[i].cost = old[i];
		return ir_step_bytes_error(m, over, loc, NULL);
	}
	for (int i = 0; i < m->nlayers; i++)
		if (hit[i])
			m->layers[i].cost.known = false; /* the cost pass completes it */
	return 0;
}

int fe_load_profile_src(ir_module *m, const src_file *src)
{
	prof pr = {.m = m, .a = m->arena, .unit = -1};
	pr.layer = arena_alloc(pr.a, (size_t)(m->nlayers ? m->nlayers : 1) * sizeof *pr.layer);
	if (yev_open(&pr.r, pr.a, src, &words) < 0)
		return -1;
	int rc = read_profile(&pr);
	yev_close(&pr.r);
	return rc < 0 ? -1 : apply(&pr);
}

int fe_load_profile(ir_module *m, const char *path)
{
	const src_file *src = src_read(m->arena, path);
	return src ? fe_load_profile_src(m, src) : -1;
}
