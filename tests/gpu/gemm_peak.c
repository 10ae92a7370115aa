/* gemm_peak.c: the card's measured cuBLAS peak, for tests/gpu/run.sh:
 * TFLOP/s of square GEMMs (bf16 in, f32 accumulate; and f32) of size N,
 * median of 10 after 3 warm-up runs.  Prints "peak bf16 X TFLOP/s" and
 * "peak f32 Y TFLOP/s"; exit 1 with the failing call otherwise.  The
 * matrices hold values in [-1, 1), not zeros: a tensor core's power, and
 * so its clock, depends on the bits it multiplies (zeros overstate the
 * peak by about an eighth). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#define CK(call)                                                                        \
	do {                                                                              \
		int e_ = (int)(call);                                                         \
		if (e_) {                                                                     \
			fprintf(stderr, "gemm_peak: error: %s failed (%d)\n", #call, e_);         \
			return 1;                                                                 \
		}                                                                             \
	} while (0)

static int cmp(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

/* n*n values in [-1, 1) from a fixed-seed generator, as f32 or as bf16
 * (the f32's upper half), copied to dev. */
static int fill(void *dev, size_t count, size_t el)
{
	char *h = malloc(count * el);
	if (!h) {
		fprintf(stderr, "gemm_peak: error: out of host memory\n");
		return 1;
	}
	uint64_t s = 0x9e3779b97f4a7c15u;
	for (size_t i = 0; i < count; i++) {
		s = s * 6364136223846793005u + 1442695040888963407u;
		float v = (float)((s >> 40) / (double)(1u << 24) * 2.0 - 1.0);
		uint32_t bits;
		memcpy(&bits, &v, 4);
		if (el == 4)
			memcpy(h + 4 * i, &bits, 4);
		else {
			uint16_t hi = (uint16_t)(bits >> 16);
			memcpy(h + 2 * i, &hi, 2);
		}
	}
	int e = (int)cudaMemcpy(dev, h, count * el, cudaMemcpyHostToDevice);
	free(h);
	if (e)
		fprintf(stderr, "gemm_peak: error: cudaMemcpy failed (%d)\n", e);
	return e != 0;
}

static int run(cublasHandle_t h, int n, cudaDataType t, cublasComputeType_t ct, const char *name)
{
	size_t el = t == CUDA_R_32F ? 4 : 2;
	void *a, *b, *c;
	CK(cudaMalloc(&a, (size_t)n * n * el));
	CK(cudaMalloc(&b, (size_t)n * n * el));
	CK(cudaMalloc(&c, (size_t)n * n * 4));
	if (fill(a, (size_t)n * n, el) || fill(b, (size_t)n * n, el))
		return 1;
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	float one = 1.f, zero = 0.f, ms[10];
	for (int i = 0; i < 13; i++) {
		CK(cudaEventRecord(e0, 0));
		CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, t, n, b, t, n, &zero, c,
		                CUDA_R_32F, n, ct, CUBLAS_GEMM_DEFAULT));
		CK(cudaEventRecord(e1, 0));
		CK(cudaEventSynchronize(e1));
		if (i >= 3)
			CK(cudaEventElapsedTime(&ms[i - 3], e0, e1));
	}
	qsort(ms, 10, sizeof *ms, cmp);
	printf("peak %s %.1f TFLOP/s (cuBLAS GEMM %d^3, median of 10)\n", name,
	       2.0 * n * n * (double)n / (ms[5] * 1e-3) / 1e12, n);
	cudaFree(a);
	cudaFree(b);
	cudaFree(c);
	return 0;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 8192;
	cublasHandle_t h;
	CK(cublasCreate(&h));
	if (run(h, n, CUDA_R_16BF, CUBLAS_COMPUTE_32F, "bf16") ||
	    run(h, n, CUDA_R_32F, CUBLAS_COMPUTE_32F, "f32"))
		return 1;
	cublasDestroy(h);
	return 0;
}
