/* hf_import.h: a Hugging Face config.json as an OctoPipe model file
 * (docs/import.md), for `octopipe import CONFIG.json`. */
#ifndef OCTO_HF_IMPORT_H
#define OCTO_HF_IMPORT_H

#include "ir.h"

/* The model file (YAML text, docs/yaml.md) that src, a config.json of one
 * of the families docs/import.md lists, describes; from a.  `ignore` holds
 * n keys the user drops knowingly (--ignore): a key that only shapes
 * training is read as absent, and a refused key's part that the format
 * cannot say is left out.  Each must be a key of the file.  NULL after a
 * diagnostic located in src (or, for `ignore`, at `ignore_at`). */
const char *fe_import_hf(arena *a, const src_file *src, const char *const *ignore, int n,
                         ir_loc ignore_at);

/* Whether src reads as a config.json rather than another format: it holds
 * a "model_type" key.  Cheap: a look at the text, no parse. */
bool fe_looks_like_hf(const src_file *src);

#endif
