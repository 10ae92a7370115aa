/* prove.h: the deadlock proof's core (prove.c), for programs given
 * replica by replica.
 *
 * The `verify` pass proves a module's programs (pass_verify).  With data
 * parallelism the D replicas run the same programs, and the pass proves
 * the quotient: one copy, in which each collective waits only for its own
 * post (docs/deadlock.md, "Collectives" says why that decides the D-copy
 * system).  prove_replicas builds the D-copy system itself from programs
 * given per replica, which may differ: it is how a program whose DP group
 * members post their collectives in different orders is checked, and what
 * the tests cross-check the quotient against. */
#ifndef OCTO_PROVE_H
#define OCTO_PROVE_H

#include "pass.h"

/* The programs of one replica: one per pipeline device, as in the module
 * (m->ndevices of them), and where each op was read (NULL: unknown, as
 * m->op_loc). */
typedef struct prove_replica {
	const ir_device *devices;
	ir_loc *const *op_loc;
} prove_replica;

/* What prove_replicas found. */
enum {
	PROVE_OK = 0,       /* deadlock-free: *proof holds the certificate */
	PROVE_CYCLE = -1,   /* a cycle of waits, printed */
	PROVE_INVALID = -2, /* a replica fails ir_verify, or the members of a DP
	                     * group disagree on a collective (kind, stage,
	                     * bucket, bytes, or its place in the order of their
	                     * posts): reported, located at the op */
};

/* Prove the D replicas' programs (reps[0..D-1]) deadlock-free under m's
 * backend: the stages, layers and plan are m's.  Each replica's programs
 * must pass ir_verify on their own (checked, unless they are m's).  The
 * k-th collective that each member of a DP group posts must be the same
 * one; when it is not, the cycle the intended matching makes is reported
 * if there is one, else the disagreement.  Scratch from a; diagnostics to
 * diag (NULL: the default sink).  On PROVE_OK, *proof is the certificate
 * (proof may be NULL). */
int prove_replicas(const ir_module *m, const prove_replica *reps, int D, arena *a,
                   diag_sink *diag, ir_proof *proof);

#endif
