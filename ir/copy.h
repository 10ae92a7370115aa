/* copy.h: copies of a module's parts, for planners that judge candidate
 * plans on scratch modules (the tuner) and hand the one they keep back. */
#ifndef OCTO_COPY_H
#define OCTO_COPY_H

#include "ir.h"

/* A new module with m's header lines (model, train, cluster and plan
 * options), its layers with their costs, and the locations of the module,
 * its header lines, fields and layers (so that a pass's diagnostic on the
 * copy points where it would on m); no stages, programs, proof or memory
 * plan.  The
 * copy shares m's strings and arrays (layer names, the given partition
 * and placement): m must outlive it. */
ir_module *ir_copy_header(const ir_module *m);

/* dst's stages and programs become src's, and its proof and memory plan
 * are dropped.  With compute_only, the programs without their
 * communication: the order of work, to be lowered again.  src and dst
 * have the same layers and devices. */
void ir_copy_plan(ir_module *dst, const ir_module *src, bool compute_only);

#endif
