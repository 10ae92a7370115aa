/* lazy.c: libLLVM and NVRTC opened on first use (cg_lazy.h says why).
 *
 * The libraries' paths are the ones the build found (cg_config.h:
 * CG_LLVM_LIB, CG_NVRTC_LIB; NVRTC by its soname on the library path where
 * that path does not hold it, as on the GPU kit's machine); a library
 * that does not open, or lacks a function, is a diagnostic naming it, not
 * a crash. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#ifdef OCTO_HAVE_CUDA
#include <nvrtc.h>
#endif

#define CG_LAZY_IMPL
#include "cg_config.h"
#include "cg_impl.h"
#include "cg_lazy.h"

/* Opens path once, or else the library `soname` (when not empty) on the
 * library search path; *h the handle, NULL (and a diagnostic) if neither
 * opens. */
static int open_lib(const char *path, const char *soname, const char *what, void **h, int *state)
{
	if (*state)
		return *state > 0 ? 0 : -1;
	*h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!*h && soname[0]) {
		char first[512];
		snprintf(first, sizeof first, "%s", dlerror());
		if (!(*h = dlopen(soname, RTLD_NOW | RTLD_LOCAL))) {
			diag_error((ir_loc){0}, "cannot load %s (%s): %s; nor %s on the library path: %s",
			           what, path, first, soname, dlerror());
			*state = -1;
			return -1;
		}
	}
	if (!*h) {
		diag_error((ir_loc){0}, "cannot load %s (%s): %s", what, path, dlerror());
		*state = -1;
		return -1;
	}
	return 1;
}

/* The function `name` of h into *slot (POSIX: a function pointer's bits
 * through a void *). */
static bool sym(void *h, const char *path, const char *name, void *slot)
{
	void *p = dlsym(h, name);
	if (!p) {
		diag_error((ir_loc){0}, "%s has no function %s", path, name);
		return false;
	}
	*(void **)slot = p;
	return true;
}

struct cg_llvm_fns cg_llvm;

#define STR_(x) #x
#define STR(x) STR_(x)

int cg_llvm_load(void)
{
	static int state;
	static void *h;
	int rc = open_lib(CG_LLVM_LIB, "", "LLVM", &h, &state);
	if (rc <= 0)
		return rc;
	bool ok = true;
#define X(f) ok = ok && sym(h, CG_LLVM_LIB, #f, &cg_llvm.f);
	CG_LLVM_FNS(X)
#undef X
#ifdef LLVM_NATIVE_TARGET
	/* LLVMInitializeNativeTarget and ...AsmPrinter, inline in Target.h:
	 * the native target's functions, named by llvm-config.h. */
	const char *init[] = {STR(LLVM_NATIVE_TARGETINFO), STR(LLVM_NATIVE_TARGET),
	                      STR(LLVM_NATIVE_TARGETMC), STR(LLVM_NATIVE_ASMPRINTER)};
	for (size_t i = 0; ok && i < sizeof init / sizeof *init; i++) {
		void (*fn)(void);
		ok = sym(h, CG_LLVM_LIB, init[i], &fn);
		if (ok)
			fn();
	}
#else
	diag_error((ir_loc){0}, "LLVM has no native target on this machine");
	ok = false;
#endif
	state = ok ? 1 : -1;
	return ok ? 0 : -1;
}

#ifdef OCTO_HAVE_CUDA
struct cg_nvrtc_fns cg_nvrtc;

int cg_nvrtc_load(void)
{
	static int state;
	static void *h;
	int rc = open_lib(CG_NVRTC_LIB, CG_NVRTC_SONAME, "NVRTC", &h, &state);
	if (rc <= 0)
		return rc;
	bool ok = true;
#define X(f) ok = ok && sym(h, CG_NVRTC_LIB, #f, &cg_nvrtc.f);
	CG_NVRTC_FNS(X)
#undef X
	state = ok ? 1 : -1;
	return ok ? 0 : -1;
}
#endif
