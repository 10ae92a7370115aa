/* cost.h: the analytic cost model (docs/cost-model.md) behind the `cost`
 * pass, for the pass itself and for the profile loader, which starts from
 * the analytic cost of a layer and overwrites what the profile measured. */
#ifndef OCTO_COST_H
#define OCTO_COST_H

#include <math.h>

#include "ir.h"

/* The analytic cost of layer `layer` of m: F/B/W time on m's cluster,
 * FLOPs, stashes, parameters and resident bytes, with known = true.
 * Returns 0, or -1 after a diagnostic at the layer when a number does not
 * fit (bytes beyond 2^64, times that are not finite). */
int cost_layer(const ir_module *m, int layer, ir_cost *out);

/* The same, with the FLOPs of F, B and W apart (out->flops is their sum);
 * flops may be NULL. */
int cost_layer_split(const ir_module *m, int layer, ir_cost *out, double flops[IR_NOPS]);

/* Times are kept to the nanosecond, so IR text stays short (a profile's
 * 2.3 ms is 2300us, not 2299.9999999999995us). */
static inline double cost_round_us(double us)
{
	return round(us * 1e3) / 1e3;
}

#endif
