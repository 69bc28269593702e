//go:build amd64 && !purego && !noasm

#include "textflag.h"

// func takeWordsAsm(slots *uint64, shift, mask uint64, masks *[32][2]uint64, text *byte, pos int, m uint64, out *[64]int32) (int, uint64, int)
//
// R10 slots, CX shift, R15 masks, SI the block (text + pos&^63), DI the
// offset in it (pos&63), BX m, R8 the next id's place in out. For each
// start e = BSF(m) with n = e-off <= 16: a, b are the n bytes at block+off
// (wordIndex's key, with hashK1 and hashK3), the probe's first slot (home)
// or the one after (near) must hold a, b and n+1, and its id goes to out.
// The first pre-token that is longer or in neither slot ends the loop, as
// in takeWordsGo.
TEXT ·takeWordsAsm(SB), NOSPLIT, $0-88
	MOVQ slots+0(FP), R10
	MOVQ shift+8(FP), CX
	MOVQ masks+24(FP), R15
	MOVQ pos+40(FP), DI
	MOVQ DI, SI
	ANDQ $~63, SI
	ADDQ text+32(FP), SI
	ANDQ $63, DI
	MOVQ m+48(FP), BX
	MOVQ out+56(FP), R8

loop:
	BSFQ BX, AX                   // AX = e; ZF when m == 0
	JZ   done
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
	MOVQ pos+40(FP), R9
	ANDQ $~63, R9
	ADDQ R9, DI
	MOVQ DI, ret+64(FP)
	MOVQ BX, ret1+72(FP)
	MOVQ out+56(FP), R9
	SUBQ R9, R8
	SHRQ $2, R8
	MOVQ R8, ret2+80(FP)
	RET
