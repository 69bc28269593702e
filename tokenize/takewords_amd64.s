//go:build amd64 && !purego && !noasm

#include "textflag.h"

// func takeWordsAsm(slots *uint64, shift, mask uint64, masks *[32][2]uint64, text *byte, base, pos int, m, next uint64, out *[128]int32) (int, uint64, int, int)
//
// R10 slots, CX shift, R15 masks, SI m's block (text + base), DI pos's
// offset from it (pos-base: -64 to -1 when pos is in the block before),
// BX m, R8 the next id's place in out. For each start e = BSF(m) with
// n = e-off <= 16: a, b are the n bytes at block+off (wordIndex's key,
// with hashK1 and hashK3), the probe's first slot (home) or the one after
// (near) must hold a, b and n+1, and its id goes to out. When m's starts
// are all taken, next's are: SI moves to the next block, off 64 back. The
// first pre-token that is longer or in neither slot ends the loop, as in
// takeWordsGo.
TEXT ·takeWordsAsm(SB), NOSPLIT, $0-112
	MOVQ slots+0(FP), R10
	MOVQ shift+8(FP), CX
	MOVQ masks+24(FP), R15
	MOVQ base+40(FP), SI
	MOVQ pos+48(FP), DI
	SUBQ SI, DI
	ADDQ text+32(FP), SI
	MOVQ m+56(FP), BX
	MOVQ out+72(FP), R8

loop:
	BSFQ BX, AX                   // AX = e; ZF when m == 0
	JZ   nextblock
	MOVQ AX, DX
	SUBQ DI, DX                   // DX = n = e - off, at least 1
	CMPQ DX, $16
	JA   done
	MOVQ DX, R12
	SHLQ $4, R12
	MOVQ (SI)(DI*1), R13
	ANDQ (R15)(R12*1), R13        // R13 = a
	MOVQ 8(SI)(DI*1), R14
	ANDQ 8(R15)(R12*1), R14       // R14 = b
	MOVQ $0xa0761d6478bd642f, R12 // hashK1
	IMULQ R13, R12
	MOVQ R14, R9
	XORQ DX, R9
	MOVQ $0x8ebc6af09c88c6e3, R11 // hashK3
	IMULQ R11, R9
	XORQ R12, R9
	SHRQ CX, R9                   // R9 = the home slot's index
	LEAQ (R9)(R9*2), R12
	LEAQ (R10)(R12*8), R12        // R12 = &slots[3*index]
	INCQ DX                       // DX = n+1; bit 63: near probed

probe:
	MOVQ (R12), R11
	XORQ R13, R11
	MOVQ 8(R12), R9
	XORQ R14, R9
	ORQ  R9, R11
	MOVL 16(R12), R9
	XORL DX, R9
	ORQ  R9, R11
	JNZ  miss
	MOVL 20(R12), R9              // the id
	MOVL R9, (R8)
	ADDQ $4, R8
	MOVQ AX, DI                   // off = e
	LEAQ -1(BX), R9
	ANDQ R9, BX                   // m &= m-1
	JMP  loop

nextblock:
	// m's starts are all taken: next's, in the block after, if any.
	MOVQ next+64(FP), BX
	TESTQ BX, BX
	JZ   done
	MOVQ $0, next+64(FP)
	ADDQ $64, SI
	SUBQ $64, DI
	JMP  loop

miss:
	BTSQ $63, DX                  // CF: near probed already
	JCS  done
	// The slot after home (near), the first again past the last.
	MOVQ mask+16(FP), R9
	LEAQ 3(R9)(R9*2), R9          // 3 * the number of slots
	LEAQ (R10)(R9*8), R9          // R9 = the end of slots
	ADDQ $24, R12
	CMPQ R12, R9
	CMOVQEQ R10, R12
	JMP  probe

done:
	SUBQ text+32(FP), SI          // SI = the block's base
	MOVQ SI, ret2+96(FP)
	ADDQ SI, DI
	MOVQ DI, ret+80(FP)
	MOVQ BX, ret1+88(FP)
	MOVQ out+72(FP), R9
	SUBQ R9, R8
	SHRQ $2, R8
	MOVQ R8, ret3+104(FP)
	RET
