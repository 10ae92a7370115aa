/* kernel_info.c: what the driver makes of kernel modules, for the GPU
 * kit's first run (tests/gpu/kit.sh, docs/cuda.md "The first-run kit").
 *
 *   kernel_info FILE.ptx ...
 *
 * Each PTX file is loaded on its own through the CUDA backend
 * (dev_cuda_create: the driver JITs it for this card, as a rank does)
 * and every entry point is printed with its registers, local memory a
 * thread, launch bound and static shared memory (dev_cuda_kernels, the
 * walk the backend reserves local memory from):
 *
 *   MODULE KERNEL regs R local L max_threads T shared S
 *
 * then one line per module ("module M: N kernels, at most R registers,
 * L bytes of local memory (KERNEL)") and a last line "kernel_info: N
 * modules loaded, F failed".  A module the driver refuses is a line with
 * its error, and the others still load.  Exit 0 when every module loads,
 * 1 when one does not, 2 without a device or on a usage error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev.h"

typedef struct summary {
	int n, regs, local;
	char regs_at[64], local_at[64];
} summary;

static int print_kernel(void *arg, const char *module, const dev_cuda_kernel *k)
{
	summary *s = arg;
	printf("%s %s regs %d local %d max_threads %d shared %d\n", module, k->name, k->regs, k->local,
	       k->max_threads, k->shared);
	s->n++;
	if (k->regs > s->regs) {
		s->regs = k->regs;
		snprintf(s->regs_at, sizeof s->regs_at, "%s", k->name);
	}
	if (k->local > s->local) {
		s->local = k->local;
		snprintf(s->local_at, sizeof s->local_at, "%s", k->name);
	}
	return 0;
}

/* FILE's bytes, NUL-terminated, or NULL. */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char *buf = NULL;
	long n = -1;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n)
		buf[n] = 0;
	else {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

int main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "--help") == 0) {
		fprintf(argc < 2 ? stderr : stdout, "usage: kernel_info FILE.ptx ...\n"
		        "  loads each module on the GPU and prints every entry point's registers,\n"
		        "  local memory a thread, launch bound and static shared memory\n");
		return argc < 2 ? 2 : 0;
	}
	int loaded = 0, failed = 0;
	for (int i = 1; i < argc; i++) {
		char *ptx = slurp(argv[i]);
		if (!ptx) {
			printf("module %s: cannot read it\n", argv[i]);
			failed++;
			continue;
		}
		/* The module's name: the file's, without directory and suffix. */
		const char *base = strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i];
		char name[128];
		snprintf(name, sizeof name, "%.*s", (int)strcspn(base, "."), base);
		const char *names[] = {name}, *imgs[] = {ptx};
		rt_dev *dev = NULL;
		char err[1024];
		int rc = dev_cuda_create(0, 1, false, 1, names, imgs, false, 0, &dev, err, sizeof err);
		if (rc == RT_ENODEV) {
			fprintf(stderr, "kernel_info: error: %s\n", err);
			free(ptx);
			return 2;
		}
		summary s = {0};
		if (!rc)
			rc = dev_cuda_kernels(dev, print_kernel, &s);
		if (rc) {
			printf("module %s: FAILED: %s\n", name, dev ? dev->err : err);
			failed++;
		} else {
			printf("module %s: %d kernels, at most %d registers (%s), %d bytes of local memory%s%s%s\n",
			       name, s.n, s.regs, s.regs_at, s.local, s.local ? " (" : "", s.local_at,
			       s.local ? ")" : "");
			loaded++;
		}
		if (dev)
			dev->ops->destroy(dev);
		free(ptx);
	}
	printf("kernel_info: %d modules loaded, %d failed\n", loaded, failed);
	return failed ? 1 : 0;
}
