/* dev_mlp.c: not built yet. */
#include "dev.h"

int dev_mlp_sizes(const rt_shape *s, size_t esz, rt_sizes *sz)
{
	(void)s, (void)esz, (void)sz;
	return RT_EINVAL;
}
int dev_mlp_f(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	(void)L, (void)io;
	return dev_fail(d, RT_EINVAL, "the device executor does not run this kind yet");
}
int dev_mlp_b(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	return dev_mlp_f(d, L, io);
}
int dev_mlp_w(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	return dev_mlp_f(d, L, io);
}
