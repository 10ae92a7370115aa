/* dev_emu.c: the host emulator backend (dev.h).  Not built yet. */
#include "dev.h"

int dev_emu_create(int rank, bool bf16, rt_dev **out)
{
	(void)rank, (void)bf16, (void)out;
	return RT_EINVAL;
}
int dev_emu_add_table(rt_dev *d, const char *name, const dev_emu_entry *table)
{
	(void)name, (void)table;
	return dev_fail(d, RT_EINVAL, "not built");
}
int dev_emu_add_source(rt_dev *d, const char *name, const char *src, const char *cxx, const char *workdir)
{
	(void)name, (void)src, (void)cxx, (void)workdir;
	return dev_fail(d, RT_EINVAL, "not built");
}
