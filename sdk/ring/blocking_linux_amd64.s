#include "textflag.h"

// func blockingSyscall6(trap, a1, a2, a3, a4, a5, a6 uintptr) (r1, r2, errno uintptr)
//
// The system call runs between entersyscallblock, which hands the
// goroutine's P to the scheduler before it, and exitsyscall. The runtime
// saves this frame as the goroutine's for the call's length, so nothing
// here may grow the stack: the forwarders are nosplit.
TEXT ·blockingSyscall6(SB),NOSPLIT,$0-80
	CALL	·callEntersyscallblock(SB)
	MOVQ	a1+8(FP), DI
	MOVQ	a2+16(FP), SI
	MOVQ	a3+24(FP), DX
	MOVQ	a4+32(FP), R10
	MOVQ	a5+40(FP), R8
	MOVQ	a6+48(FP), R9
	MOVQ	trap+0(FP), AX
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	MOVQ	$-1, r1+56(FP)
	MOVQ	$0, r2+64(FP)
	NEGQ	AX
	MOVQ	AX, errno+72(FP)
	CALL	·callExitsyscall(SB)
	RET
ok:
	MOVQ	AX, r1+56(FP)
	MOVQ	DX, r2+64(FP)
	MOVQ	$0, errno+72(FP)
	CALL	·callExitsyscall(SB)
	RET
