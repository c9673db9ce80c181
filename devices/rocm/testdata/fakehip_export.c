// An exporter process for the rocm plugin's tests, over the FAKE HIP
// runtime (fakehip.c, linked in): it allocates argv[1] bytes on device 0,
// fills byte i with (i*7+3)&0xff, prints the IPC handle as hex and a
// newline, then frees the allocation when it reads "free" (and prints
// "freed"), and exits at end of input.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int hipError_t;
typedef struct { char reserved[64]; } hipIpcMemHandle_t;
hipError_t hipSetDevice(int);
hipError_t hipMalloc(void **, size_t);
hipError_t hipFree(void *);
hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t *, void *);

int main(int argc, char **argv) {
	size_t n = argc > 1 ? strtoull(argv[1], 0, 10) : 4096;
	void *p;
	hipIpcMemHandle_t h;
	if (hipSetDevice(0) || hipMalloc(&p, n) || hipIpcGetMemHandle(&h, p)) {
		fprintf(stderr, "fake exporter: allocation failed\n");
		return 1;
	}
	for (size_t i = 0; i < n; i++) ((unsigned char *)p)[i] = (unsigned char)(i * 7 + 3);
	for (size_t i = 0; i < sizeof h; i++) printf("%02x", (unsigned char)h.reserved[i]);
	printf("\n");
	fflush(stdout);
	char line[64];
	while (fgets(line, sizeof line, stdin)) {
		if (strncmp(line, "free", 4) == 0) {
			hipFree(p);
			printf("freed\n");
			fflush(stdout);
		}
	}
	return 0;
}
