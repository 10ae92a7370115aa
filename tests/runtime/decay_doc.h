/* decay_doc.h: docs/layers.md's "Weight decay" table (kind, tensor, yes/no),
 * read by the tests that hold the runtime to it: unit_kernels compares every
 * tensor's rt_tensor_info.decay with it, unit_rt checks one optimizer step
 * against it.  Reading the document itself, rather than a copy of it, is
 * what keeps the two from drifting.  OCTO_LAYERS_MD is the file's path (set
 * by runtime/CMakeLists.txt). */
#ifndef OCTO_TEST_DECAY_DOC_H
#define OCTO_TEST_DECAY_DOC_H

#include <stdio.h>
#include <string.h>

#include "octo_kernels.h"

#define DOC_DECAY_SECTION "## Weight decay"
#define DOC_DECAY_MAX 96

typedef struct doc_decay_row {
	char kind[16], name[40];
	int decay; /* 1 yes, 0 no */
	int seen;  /* matched by a tensor of some layer (the callers' count) */
} doc_decay_row;

typedef struct doc_decay {
	doc_decay_row row[DOC_DECAY_MAX];
	int n;
	char err[512]; /* why doc_decay_read failed */
} doc_decay;

/* docs/layers.md's section names, in rt_kind order. */
static const char *const doc_kind_names[RT_NKINDS] = {"embedding", "attention", "mlp",
                                                      "moe",       "mamba",     "head",
                                                      "parallel"};

static doc_decay_row *doc_decay_find(doc_decay *d, const char *kind, const char *name)
{
	for (int i = 0; i < d->n; i++)
		if (!strcmp(d->row[i].kind, kind) && !strcmp(d->row[i].name, name))
			return &d->row[i];
	return NULL;
}

/* Reads the table's rows "| KIND | `NAME` | yes|no |" between the section
 * heading and the next "## ".  0, or -1 with d->err (no file, no section, a
 * row that does not parse, a row twice, an empty table). */
static int doc_decay_read(doc_decay *d)
{
	char line[512];
	int in = 0, lineno = 0, rc = 0;
	memset(d, 0, sizeof *d);
	FILE *f = fopen(OCTO_LAYERS_MD, "r");
	if (!f) {
		snprintf(d->err, sizeof d->err, "%s: cannot open", OCTO_LAYERS_MD);
		return -1;
	}
	while (!rc && fgets(line, sizeof line, f)) {
		lineno++;
		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "## ", 3)) {
			if (in)
				break;
			in = !strcmp(line, DOC_DECAY_SECTION);
			continue;
		}
		if (!in || strncmp(line, "| ", 2) || !strncmp(line, "| kind ", 7))
			continue;
		doc_decay_row r = {0};
		char flag[8], end;
		if (sscanf(line, "| %15s | `%39[^`]` | %7s %c", r.kind, r.name, flag, &end) != 4 ||
		    end != '|' || (strcmp(flag, "yes") && strcmp(flag, "no"))) {
			snprintf(d->err, sizeof d->err, "%s:%d: not a row 'KIND | `NAME` | yes|no': %.80s",
			         OCTO_LAYERS_MD, lineno, line);
			rc = -1;
		} else if (doc_decay_find(d, r.kind, r.name)) {
			snprintf(d->err, sizeof d->err, "%s:%d: %s %s is listed twice", OCTO_LAYERS_MD,
			         lineno, r.kind, r.name);
			rc = -1;
		} else if (d->n == DOC_DECAY_MAX) {
			snprintf(d->err, sizeof d->err, "%s:%d: more than %d rows", OCTO_LAYERS_MD, lineno,
			         DOC_DECAY_MAX);
			rc = -1;
		} else {
			r.decay = !strcmp(flag, "yes");
			d->row[d->n++] = r;
		}
	}
	fclose(f);
	if (!rc && !d->n) {
		snprintf(d->err, sizeof d->err, "%s: no rows under '%s'", OCTO_LAYERS_MD,
		         DOC_DECAY_SECTION);
		rc = -1;
	}
	return rc;
}

#endif
