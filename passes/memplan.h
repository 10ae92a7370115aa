/* memplan.h: the allocator of the `memplan` pass (the pass itself is
 * pass_memplan in pass.h), for the tests and anyone who plans buffers of
 * their own.  docs/memplan.md describes both. */
#ifndef OCTO_MEMPLAN_H
#define OCTO_MEMPLAN_H

#include "ir.h"

/* Give each of the n buffers an offset (b[i].off), a multiple of
 * IR_BUF_ALIGN, so that no two whose live ranges (first..last, inclusive)
 * meet share a byte, and return the arena size: the largest off + size.
 * Best fit over three orders of placement, each refined by promoting the
 * buffers that reach the top (memplan.c); deterministic.  Empty buffers sit
 * at offset 0. */
uint64_t memplan_assign(ir_buf *b, int n);

#endif
