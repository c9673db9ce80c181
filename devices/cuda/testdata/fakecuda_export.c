// An exporter process for the cuda plugin's tests, over the FAKE CUDA
// driver (fakecuda.c, linked in): it allocates argv[1] bytes on device 0
// with cuMemAlloc_v2 (legacy memory, as cudaMalloc makes), fills byte i
// with (i*7+3)&0xff, prints the legacy IPC handle (cuIpcGetMemHandle) as
// hex and a newline, then frees the allocation when it reads "free" (and
// prints "freed"), and exits at end of input.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct { char reserved[64]; } CUipcMemHandle;
CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(void **, int);
CUresult cuCtxSetCurrent(void *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuIpcGetMemHandle(CUipcMemHandle *, CUdeviceptr);

int main(int argc, char **argv) {
	size_t n = argc > 1 ? strtoull(argv[1], 0, 10) : 4096;
	void *ctx;
	CUdeviceptr p;
	CUipcMemHandle h;
	if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx) || cuMemAlloc_v2(&p, n) || cuIpcGetMemHandle(&h, p)) {
		fprintf(stderr, "fake exporter: allocation failed\n");
		return 1;
	}
	for (size_t i = 0; i < n; i++) ((unsigned char *)(size_t)p)[i] = (unsigned char)(i * 7 + 3);
	for (size_t i = 0; i < sizeof h; i++) printf("%02x", (unsigned char)h.reserved[i]);
	printf("\n");
	fflush(stdout);
	char line[64];
	while (fgets(line, sizeof line, stdin)) {
		if (strncmp(line, "free", 4) == 0) {
			cuMemFree_v2(p);
			printf("freed\n");
			fflush(stdout);
		}
	}
	return 0;
}
