//go:build !race

#include "textflag.h"

// func StoreRelease32(p *atomic.Uint32, v uint32)
TEXT ·StoreRelease32(SB),NOSPLIT,$0-12
	MOVD p+0(FP), R0
	MOVWU v+8(FP), R1
	STLRW R1, (R0)
	RET

// func StoreRelease64(p *atomic.Uint64, v uint64)
TEXT ·StoreRelease64(SB),NOSPLIT,$0-16
	MOVD p+0(FP), R0
	MOVD v+8(FP), R1
	STLR R1, (R0)
	RET

// func Fence()
TEXT ·Fence(SB),NOSPLIT,$0-0
	DMB $0xb
	RET
