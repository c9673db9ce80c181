#include "textflag.h"

// func repMovsb(dst, src unsafe.Pointer, n uintptr)
TEXT ·repMovsb(SB),NOSPLIT,$0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	CLD
	REP; MOVSB
	RET

// func cpuid7EDX() uint32
TEXT ·cpuid7EDX(SB),NOSPLIT,$0-4
	MOVL $7, AX
	XORL CX, CX
	CPUID
	MOVL DX, ret+0(FP)
	RET
