#include "textflag.h"

// func blockingSyscall6(trap, a1, a2, a3, a4, a5, a6 uintptr) (r1, r2, errno uintptr)
//
// blocking_linux_amd64.s for arm64: the system call runs between
// entersyscallblock and exitsyscall, and nothing here may grow the stack
// (the forwarders are nosplit). Not a leaf, so the assembler gives the
// function a frame for the link register; both forwarders are called
// from it, at the same stack pointer, as exitsyscall requires. The
// return convention is the kernel's: a value in [-4095, -1] is an error.
TEXT ·blockingSyscall6(SB),NOSPLIT,$0-80
	BL	·callEntersyscallblock(SB)
	MOVD	a1+8(FP), R0
	MOVD	a2+16(FP), R1
	MOVD	a3+24(FP), R2
	MOVD	a4+32(FP), R3
	MOVD	a5+40(FP), R4
	MOVD	a6+48(FP), R5
	MOVD	trap+0(FP), R8
	SVC
	CMN	$4095, R0
	BCC	ok
	MOVD	$-1, R4
	MOVD	R4, r1+56(FP)
	MOVD	ZR, r2+64(FP)
	NEG	R0, R0
	MOVD	R0, errno+72(FP)
	BL	·callExitsyscall(SB)
	RET
ok:
	MOVD	R0, r1+56(FP)
	MOVD	R1, r2+64(FP)
	MOVD	ZR, errno+72(FP)
	BL	·callExitsyscall(SB)
	RET
