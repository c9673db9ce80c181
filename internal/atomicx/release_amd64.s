//go:build !race

#include "textflag.h"

// func StoreRelease32(p *atomic.Uint32, v uint32)
TEXT ·StoreRelease32(SB),NOSPLIT,$0-12
	MOVQ p+0(FP), AX
	MOVL v+8(FP), BX
	MOVL BX, (AX)
	RET

// func StoreRelease64(p *atomic.Uint64, v uint64)
TEXT ·StoreRelease64(SB),NOSPLIT,$0-16
	MOVQ p+0(FP), AX
	MOVQ v+8(FP), BX
	MOVQ BX, (AX)
	RET

// func Fence()
TEXT ·Fence(SB),NOSPLIT,$0-0
	LOCK
	ORL $0, (SP)
	RET
