//go:build amd64 && !purego && !noasm

#include "textflag.h"

// func takeWordsAsm(slots *uint64, shift, mask uint64, masks *[17][4]uint64, text *byte, base, pos int, m, u uint64, run *[2]uint64, nrun int, last uint64, out *int32, long *uint64, longShift uint64) (int, uint64, int, int)
//
// R10 slots, CX shift, R15 masks, SI m's block (text + base), DI pos's
// offset from it (negative when pos is in a block before), BX m, R8 the
// next id's place in out. For each start e = BSF(m) with n = e-off <= 12
// (shortWord): a, b are the n bytes at block+off, the tag is b | n+1<<32
// (wordTag, from masks), the home slot's index is shortIndex's (hashK1,
// hashK3), and that slot or one after it before an empty one (near) must
// hold a and the tag in the low 40 bits of its second word, whose top 24
// are the id that goes to out. A pre-token of 13 to 16 bytes must be in
// its home slot of long (wordIndex, triples: a, b, n+1 | id<<32). When m's
// starts are all taken and u is 0, run's next block's are (before its
// first unknown; last masks those of run's last): SI moves on to that
// block, off 64 back; u, run and nrun are kept in their argument slots.
// The first pre-token that is longer or not found ends the loop, as in
// takeWordsGo.
TEXT ·takeWordsAsm(SB), NOSPLIT, $0-152
	MOVQ slots+0(FP), R10
	MOVQ shift+8(FP), CX
	MOVQ masks+24(FP), R15
	MOVQ base+40(FP), SI
	MOVQ pos+48(FP), DI
	SUBQ SI, DI
	ADDQ text+32(FP), SI
	MOVQ m+56(FP), BX
	MOVQ out+96(FP), R8

loop:
	BSFQ BX, AX                   // AX = e; ZF when m == 0
	JZ   nextblock
	MOVQ AX, DX
	SUBQ DI, DX                   // DX = n = e - off, at least 1
	CMPQ DX, $12
	JA   longer
	SHLQ $5, DX
	MOVQ (SI)(DI*1), R13
	ANDQ (R15)(DX*1), R13         // R13 = a
	MOVQ 8(SI)(DI*1), R14
	ANDQ 8(R15)(DX*1), R14
	ORQ  16(R15)(DX*1), R14       // R14 = the tag
	MOVQ $0xa0761d6478bd642f, R12 // hashK1
	IMULQ R13, R12
	MOVQ $0x8ebc6af09c88c6e3, R9  // hashK3
	IMULQ R14, R9
	XORQ R12, R9
	SHRQ CX, R9                   // R9 = the home slot's index
	SHLQ $4, R9
	ADDQ R10, R9                  // R9 = &slots[2*index]
	MOVQ (R9), R11
	XORQ R13, R11
	MOVQ 8(R9), R12
	XORQ R14, R12
	SHLQ $24, R12                 // the id's bits out
	ORQ  R12, R11
	JNZ  near

take:
	MOVQ 8(R9), R12
	SHRQ $40, R12                 // the id

put:
	MOVL R12, (R8)
	ADDQ $4, R8
	MOVQ AX, DI                   // off = e
	LEAQ -1(BX), R12
	ANDQ R12, BX                  // m &= m-1
	JMP  loop

near:
	// The slots after home, the first again past the last, to an empty
	// one (its second word 0: the key is not in the table).
	MOVQ mask+16(FP), DX
	INCQ DX
	SHLQ $4, DX
	ADDQ R10, DX                  // DX = the end of slots

probe:
	ADDQ $16, R9
	CMPQ R9, DX
	CMOVQEQ R10, R9
	MOVQ 8(R9), R12
	TESTQ R12, R12
	JZ   done
	MOVQ (R9), R11
	XORQ R13, R11
	XORQ R14, R12
	SHLQ $24, R12
	ORQ  R12, R11
	JNZ  probe
	JMP  take

longer:
	// 13 to 16 bytes: the home slot of long.
	CMPQ DX, $16
	JA   done
	MOVQ DX, R12
	SHLQ $5, R12
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
	MOVQ longShift+112(FP), CX
	SHRQ CX, R9                   // R9 = the home slot's index
	MOVQ shift+8(FP), CX
	LEAQ (R9)(R9*2), R9
	SHLQ $3, R9
	ADDQ long+104(FP), R9          // R9 = &long[3*index]
	INCQ DX                       // n+1
	MOVQ (R9), R11
	XORQ R13, R11
	MOVQ 8(R9), R12
	XORQ R14, R12
	ORQ  R12, R11
	MOVL 16(R9), R12
	XORL DX, R12
	ORQ  R12, R11
	JNZ  done
	MOVL 20(R9), R12              // the id
	JMP  put

nextblock:
	// m's starts are all taken: those of run's next block, if u is 0.
	CMPQ u+64(FP), $0
	JNE  done
	MOVQ nrun+80(FP), R12
	SUBQ $1, R12
	JCS  done                     // nrun was 0
	MOVQ R12, nrun+80(FP)
	MOVQ run+72(FP), R9
	MOVQ (R9), BX                 // the block's starts
	MOVQ 8(R9), R11               // and unknowns
	ADDQ $16, R9
	MOVQ R9, run+72(FP)
	MOVQ R11, u+64(FP)
	MOVQ R11, R13
	NEGQ R13
	ANDQ R11, R13
	DECQ R13                      // the bits below the first unknown
	ANDQ R13, BX
	TESTQ R12, R12
	JNZ  moved
	ANDQ last+88(FP), BX          // run's last block

moved:
	ADDQ $64, SI
	SUBQ $64, DI
	JMP  loop

done:
	SUBQ text+32(FP), SI          // SI = the block's base
	MOVQ SI, ret2+136(FP)
	ADDQ SI, DI
	MOVQ DI, ret+120(FP)
	MOVQ BX, ret1+128(FP)
	MOVQ out+96(FP), R9
	SUBQ R9, R8
	SHRQ $2, R8
	MOVQ R8, ret3+144(FP)
	RET
