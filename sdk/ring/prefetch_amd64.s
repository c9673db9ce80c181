#include "textflag.h"

// func prefetchWrite(p unsafe.Pointer)
TEXT ·prefetchWrite(SB),NOSPLIT,$0-8
	MOVQ p+0(FP), AX
	// PREFETCHW (AX): 0F 0D /1, ModRM 0x08. Go's assembler has no
	// mnemonic for it.
	BYTE $0x0F; BYTE $0x0D; BYTE $0x08
	RET
